/*
 * What several sandbox commands share: waiting until one is ready, and
 * reading a paginated listing to its end.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "err.h"
#include "strutil.h"
#include "xalloc.h"

static int is_ready(json_object *sb)
{
	json_object *v;

	if (json_object_object_get_ex(sb, "ready", &v) && json_object_is_type(v, json_type_boolean) &&
	    json_object_get_boolean(v))
		return 1;
	return !strcmp(cli_field_text(sb, "status"), "ready");
}

static int is_failed(json_object *sb)
{
	const char *st = cli_field_text(sb, "status");

	return !strcmp(st, "failed") || !strcmp(st, "not_found");
}

/* One server-side wait of at most left seconds: 1 ready, 0 not yet. */
static int wait_once(json_object **sb, const struct cli_config *cfg, const char *id, int64_t left,
		     struct cli_spinner *spin)
{
	struct cli_response r = CLI_RESPONSE_INIT;
	struct cli_request req = { "GET", NULL, NULL, NULL, 0, NULL, NULL };
	char suffix[64], *path;
	int err;

	snprintf(suffix, sizeof(suffix), "/wait?timeout=%lld", (long long)left);
	path = cli_path("/v1/sandboxes", id, suffix);
	req.path = path;
	req.timeout_s = (long)left + 30;
	if (spin && spin->active) {
		req.tick = cli_spinner_tick;
		req.tick_arg = spin;
	}
	if ((err = cli_http(&r, cfg, &req)) < 0)
		goto done;
	if (r.status == 408) {
		err = 0;  /* the server's wait ran out; the caller decides whether ours did */
	} else if (r.status < 200 || r.status > 299) {
		if (spin)
			cli_spinner_stop(spin);
		cli_report_response(&r);
		err = ORC_ERROR;
	} else if (!r.json || !json_object_is_type(r.json, json_type_object)) {
		cli_error("unexpected response to wait for %s (HTTP %ld)", id, r.status);
		err = ORC_ERROR;
	} else {
		if (*sb)
			json_object_put(*sb);
		*sb = json_object_get(r.json);
		err = is_ready(*sb);
	}
done:
	cli_response_release(&r);
	free(path);
	return err;
}

int cli_sandbox_wait(json_object **out, const struct cli_config *cfg, const char *id, long timeout_s,
		     int spin)
{
	int64_t deadline = orc_mono_ms() + (int64_t)timeout_s * 1000, left;
	struct cli_spinner spinner = { 0 };
	json_object *sb = NULL;
	char *what = NULL;
	int err;

	if (spin) {
		what = xasprintf("waiting for sandbox %s to be ready", id);
		cli_spinner_start(&spinner, what);
	}
	for (;;) {
		left = (deadline - orc_mono_ms() + 999) / 1000;
		if (left <= 0) {
			cli_spinner_stop(&spinner);
			cli_error("sandbox %s is not ready after %lds (status: %s)", id, timeout_s,
				  sb ? cli_field_text(sb, "status") : "pending");
			err = ORC_ETIMEOUT;
			goto done;
		}
		if ((err = wait_once(&sb, cfg, id, left, spin ? &spinner : NULL)) < 0)
			goto done;
		if (err == 1)
			break;
		if (sb && is_failed(sb)) {
			cli_spinner_stop(&spinner);
			cli_error("sandbox %s failed: %s", id,
				  strcmp(cli_field_text(sb, "status_message"), "-") ?
				  cli_field_text(sb, "status_message") : "no reason given");
			err = ORC_ERROR;
			goto done;
		}
		/* Not ready yet and the server returned early: do not spin. */
		if (deadline - orc_mono_ms() > 1000) {
			sleep(1);
			cli_spinner_tick(&spinner);
		}
	}
	*out = sb;
	sb = NULL;
	err = 0;
done:
	cli_spinner_stop(&spinner);
	if (sb)
		json_object_put(sb);
	free(what);
	return err;
}

json_object *cli_list_items(json_object *list, const char *key)
{
	static const char *const keys[] = { "items", "data" };
	json_object *v;
	size_t i;

	if (json_object_is_type(list, json_type_array))
		return list;
	if (!json_object_is_type(list, json_type_object))
		return NULL;
	if (json_object_object_get_ex(list, key, &v) && json_object_is_type(v, json_type_array))
		return v;
	for (i = 0; i < sizeof(keys) / sizeof(*keys); i++)
		if (json_object_object_get_ex(list, keys[i], &v) && json_object_is_type(v, json_type_array))
			return v;
	return NULL;
}

static char *next_cursor(json_object *list)
{
	json_object *v;

	if (json_object_is_type(list, json_type_object) && json_object_object_get_ex(list, "next_cursor", &v) &&
	    json_object_is_type(v, json_type_string) && *json_object_get_string(v))
		return xstrdup(json_object_get_string(v));
	return NULL;
}

/*
 * One page as JSON. A route this server lacks sets *missing (when the
 * caller asked) instead of being reported.
 */
static int fetch_page(json_object **out, const struct cli_config *cfg, const struct cli_request *req,
		      int *missing)
{
	struct cli_response r = CLI_RESPONSE_INIT;
	int err;

	if ((err = cli_http(&r, cfg, req)) < 0)
		return err;
	if (r.status < 200 || r.status > 299) {
		if (missing && cli_route_missing(&r)) {
			*missing = 1;
			err = ORC_ENOTFOUND;
		} else {
			cli_report_response(&r);
			err = r.status == 404 ? ORC_ENOTFOUND : ORC_ERROR;
		}
	} else if (!r.json) {
		cli_error("unexpected response from GET %s: not JSON (HTTP %ld)", req->path, r.status);
		err = ORC_ERROR;
	} else {
		*out = r.json;
		r.json = NULL;
	}
	cli_response_release(&r);
	return err;
}

int cli_list_all(json_object **out, const struct cli_config *cfg, const char *base, const char *key,
		 long page, size_t max, int *missing)
{
	struct cli_request req = { "GET", NULL, NULL, NULL, 60, NULL, NULL };
	struct orc_buf path = ORC_BUF_INIT;
	json_object *all = json_object_new_array(), *list = NULL, *items;
	char *cursor = NULL, *next, limit[24];
	size_t i, n;
	int err = 0;

	for (;;) {
		orc_buf_reset(&path);
		orc_buf_adds(&path, base);
		if (page > 0) {
			snprintf(limit, sizeof(limit), "%ld", page);
			cli_path_add_query(&path, "limit", limit);
		}
		if (cursor)
			cli_path_add_query(&path, "cursor", cursor);
		req.path = orc_buf_cstr(&path);
		if ((err = fetch_page(&list, cfg, &req, cursor ? NULL : missing)) < 0)
			goto done;
		if (!(items = cli_list_items(list, key))) {
			cli_error("unexpected response to GET %s: no list of %s", base, key);
			err = ORC_ERROR;
			goto done;
		}
		n = json_object_array_length(items);
		for (i = 0; i < n; i++) {
			if (json_object_array_length(all) >= max) {
				cli_error("warning: stopped after %zu %s; narrow the listing with filters", max, key);
				goto finished;
			}
			json_object_array_add(all, json_object_get(json_object_array_get_idx(items, i)));
		}
		next = next_cursor(list);
		json_object_put(list);
		list = NULL;
		/* A cursor that does not move would loop forever. */
		if (!next || n == 0 || (cursor && !strcmp(cursor, next))) {
			free(next);
			break;
		}
		free(cursor);
		cursor = next;
	}
finished:
	*out = all;
	all = NULL;
done:
	if (list)
		json_object_put(list);
	if (all)
		json_object_put(all);
	orc_buf_release(&path);
	free(cursor);
	return err;
}
