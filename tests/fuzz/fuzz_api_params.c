/*
 * The query parameters of the api's list, wait, export and raw-file
 * routes, each parser the real one (files included; SQL, FastCGI and curl
 * calls are dropped by --gc-sections):
 *   GET /sandboxes               parse_list (status, limit, cursor, label=k=v...)
 *   GET /sandboxes/{id}/jobs     parse_job_list (limit, cursor)
 *   cursors                      api_cursor_parse (api/cursor.c)
 *   GET .../trajectory, /trajectories   parse_include, parse_labels
 *   GET .../wait, /jobs/{id}/wait       api_query_timeout (api/sandboxes.c)
 *   PUT/GET .../files/raw, .../archive  raw_target (path, mode)
 * api_valid_id (used by cursors) is repeated from api/router.c, whose route
 * table would pull in every handler. Input: a query string (fuzz_req.h).
 *
 * Properties: a refusal is one 422 with a message; limits within their
 * ranges (the default when absent); a status among pending, ready and
 * failed; a cursor is "<decimal>_<DNS label>", and printing it and
 * parsing again gives the same; every label filter passes
 * api_check_label; include is "content" exactly when asked for; a timeout
 * 0..3600 s; a raw target's agent query gives back the path and mode.
 */
#include "fuzz_req.h"
#include "../../api/sandbox_list.c"
enum { SB_LIST_DEFAULT = LIST_DEFAULT, SB_LIST_MAX = LIST_MAX };
#undef LIST_DEFAULT
#undef LIST_MAX
#include "../../api/job_list.c"
#include "../../api/trajectory.c"
#include "../../api/sandboxes.c"
#include "../../api/files_raw.c"

int api_valid_id(const char *s)
{
	return orc_is_dns_label(s);
}

static void check_cursor(const struct api_cursor *c, const char *s)
{
	struct api_cursor again;
	char *printed;
	int64_t us;

	FUZZ_ASSERT(orc_parse_i64(&us, c->us, 0, INT64_MAX) == 0);
	FUZZ_ASSERT(c->us[0] != '0' || !c->us[1]);
	FUZZ_ASSERT(c->id == strchr(s, '_') + 1 && orc_is_dns_label(c->id));
	printed = xasprintf("%s_%s", c->us, c->id);
	FUZZ_ASSERT(api_cursor_parse(&again, printed) == 0);
	FUZZ_ASSERT(!strcmp(again.us, c->us) && !strcmp(again.id, c->id));
	free(printed);
}

/* limit: absent → dflt; else in 1..max */
static void check_limit(struct api_req *r, int64_t limit, int64_t dflt, int64_t max)
{
	FUZZ_ASSERT(limit >= 1 && limit <= max);
	if (!api_req_query(r, "limit"))
		FUZZ_ASSERT(limit == dflt);
}

static void lists(struct api_req *r)
{
	const char *cur = api_req_query(r, "cursor");
	struct api_cursor c;
	struct list_req l;
	int64_t limit;
	size_t i, n;

	if (cur && api_cursor_parse(&c, cur) == 0)
		check_cursor(&c, cur);
	fuzz_req_rearm(r);
	if (parse_list(&l, r) == 0) {
		FUZZ_ASSERT(!l.status || !strcmp(l.status, "pending") || !strcmp(l.status, "ready") ||
			    !strcmp(l.status, "failed"));
		check_limit(r, l.limit, SB_LIST_DEFAULT, SB_LIST_MAX);
		if (l.cursor.us[0])
			check_cursor(&l.cursor, cur);
		n = l.labels ? json_object_array_length(l.labels) : 0;
		for (i = 0; i < n; i++) {
			json_object *pair = json_object_array_get_idx(l.labels, i);
			FUZZ_ASSERT(json_object_object_length(pair) == 1);
			json_object_object_foreach(pair, k, v)
				FUZZ_ASSERT(api_check_label(k, v, r) == 0);
		}
	} else {
		FUZZ_ASSERT(r->status == ORC_EINVALID);
	}
	fuzz_req_rearm(r);
	if (parse_job_list(&limit, &c, r) == 0) {
		check_limit(r, limit, LIST_DEFAULT, LIST_MAX);
		if (c.us[0])
			check_cursor(&c, cur);
		else
			FUZZ_ASSERT(!cur || !*cur);
	} else {
		FUZZ_ASSERT(r->status == ORC_EINVALID);
	}
}

static void exports(struct api_req *r)
{
	const char *inc = api_req_query(r, "include"), *p;
	json_object *labels = NULL;
	int content = -1, want = 0, ok = 1;
	size_t n;

	for (p = inc; p && *p; p += n + (p[n] == ',')) {
		n = strcspn(p, ",");
		if (n == 7 && !strncmp(p, "content", 7))
			want = 1;
		else if (n)
			ok = 0;
	}
	fuzz_req_rearm(r);
	if (parse_include(r, &content) == 0)
		FUZZ_ASSERT(ok && content == want);
	else
		FUZZ_ASSERT(!ok && r->status == ORC_EINVALID);
	fuzz_req_rearm(r);
	if (parse_labels(&labels, r) == 0)
		FUZZ_ASSERT(!labels || api_check_labels(labels, r) == 0);
	else
		FUZZ_ASSERT(r->status == ORC_EINVALID);
}

static void waits_and_raw(struct api_req *r)
{
	const char *agent = NULL, *path = NULL, *q = api_req_query(r, "path");
	const char *mode = api_req_query(r, "mode");
	char *m;
	int64_t t = -1;
	long v;

	fuzz_req_rearm(r);
	if (api_query_timeout(&t, r, 300, 3600) == 0) {
		FUZZ_ASSERT(t >= 0 && t <= 3600);
		if (!api_req_query(r, "timeout") || !*api_req_query(r, "timeout"))
			FUZZ_ASSERT(t == 300);
	} else {
		FUZZ_ASSERT(r->status == ORC_EINVALID && t == -1);
	}
	fuzz_req_rearm(r);
	if (raw_target(&agent, &path, r, "/files", 1) == 0) {
		FUZZ_ASSERT(path == q && *path && strlen(path) < API_PATH_MAX);
		FUZZ_ASSERT(!strncmp(agent, "/files?", 7));
		fuzz_query_round_trip(agent + 7, "path", path);
		if (mode) {
			v = strtol(mode, &m, 8);
			/* and at most 5 digits, as the agent's agent_parse_mode reads */
			FUZZ_ASSERT(*mode && !*m && v >= 0 && v <= 07777 && strlen(mode) <= 5);
			fuzz_query_round_trip(agent + 7, "mode", mode);
		}
	} else {
		FUZZ_ASSERT(r->status == ORC_EINVALID);
	}
	fuzz_req_rearm(r);
	if (raw_target(&agent, &path, r, "/archive", 0) == 0)
		FUZZ_ASSERT(!strncmp(agent, "/archive?", 9) && !strstr(agent, "&mode="));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct api_req r;

	if (fuzz_req_init(&r, data, size) == 0) {
		lists(&r);
		exports(&r);
		waits_and_raw(&r);
	}
	api_req_release(&r);
	return 0;
}
