/*
 * A path in a sandbox, written "ID:PATH" on the command line (kubectl cp,
 * docker cp): ID is a sandbox id (a DNS label), so a local path with a
 * colon in it is written "./a:b".
 */
#include <stdio.h>
#include <string.h>

#include "err.h"
#include "strutil.h"
#include "transfer.h"
#include "xalloc.h"

int cli_remote_split(char **id_out, char **path_out, const char *arg)
{
	const char *colon = strchr(arg, ':');
	char *id;

	if (!colon || colon == arg || (size_t)(colon - arg) > 63)
		return ORC_EINVALID;
	id = xstrndup(arg, (size_t)(colon - arg));
	if (!orc_is_dns_label(id)) {
		free(id);
		return ORC_EINVALID;
	}
	*id_out = id;
	/* "ID:" is the sandbox's workspace. */
	*path_out = xstrdup(colon[1] ? colon + 1 : "/workspace");
	return 0;
}

char *cli_remote_route(const char *id, const char *suffix, const char *path)
{
	struct orc_buf b = ORC_BUF_INIT;
	char *p = cli_path("/v1/sandboxes", id, suffix);

	orc_buf_adds(&b, p);
	free(p);
	if (path)
		cli_path_add_query(&b, "path", path);
	return orc_buf_detach(&b, NULL);
}

int cli_sandbox_missing(const struct cli_response *r, const char *id)
{
	json_object *v;
	char want[128];

	snprintf(want, sizeof(want), "sandbox %s not found", id);
	return r->json && json_object_is_type(r->json, json_type_object) &&
	       json_object_object_get_ex(r->json, "detail", &v) && json_object_is_type(v, json_type_string) &&
	       !strcmp(json_object_get_string(v), want);
}

int cli_remote_stat(json_object **out, const struct cli_config *cfg, const char *id, const char *path)
{
	struct cli_response r = CLI_RESPONSE_INIT;
	struct cli_request req = { "GET", NULL, NULL, NULL, 60, NULL, NULL };
	char *route = cli_remote_route(id, "/files/stat", path);
	int err;

	req.path = route;
	if ((err = cli_http(&r, cfg, &req)) < 0)
		goto done;
	if (r.status == 404 && r.json && !cli_route_missing(&r) && !cli_sandbox_missing(&r, id)) {
		err = ORC_ENOTFOUND;
		goto done;
	}
	if (r.status < 200 || r.status > 299 || !r.json || !json_object_is_type(r.json, json_type_object)) {
		cli_report_response(&r);
		err = ORC_ERROR;
		goto done;
	}
	*out = r.json;
	r.json = NULL;
done:
	cli_response_release(&r);
	free(route);
	return err;
}
