/*
 * The JSON request bodies of the agent's files and git endpoints, through
 * agent/files_args.c: agent_body_object, then agent_field_path for the
 * fields those handlers read ("path" required as in POST /files/base64
 * and /files/mkdir; "cwd" defaulting to /workspace as in /git/apply and
 * /git/reset), and the "mode" field through agent_parse_mode
 * (agent/fsutil.c).
 *
 * Properties: a refusal is a 400 whose body is the JSON object
 * {"error": "..."}; an accepted path is absolute and normal
 * (agent_path_resolve changes nothing), and the default is /workspace; a
 * mode is at most 07777; nothing leaks.
 *
 * agent_reply_error is repeated from agent/server.c (linking server.c
 * would pull in every handler through its route table).
 */
#include <limits.h>

#include "fuzz.h"

#include "err.h"
#include "files.h"
#include "fsutil.h"
#include "json.h"
#include "server.h"

void agent_reply_error(struct agent_reply *reply, unsigned status, const char *msg)
{
	reply->status = status;
	orc_buf_reset(&reply->body);
	orc_buf_adds(&reply->body, "{\"error\":");
	orc_json_quote(&reply->body, msg);
	orc_buf_addc(&reply->body, '}');
}

static void check_refusal(struct agent_reply *reply)
{
	json_object *o = NULL, *e = NULL;

	FUZZ_ASSERT(reply->status == 400);
	FUZZ_ASSERT(orc_json_parse_object(&o, orc_buf_cstr(&reply->body), reply->body.len, NULL, 0) == 0);
	FUZZ_ASSERT(json_object_object_get_ex(o, "error", &e) && json_object_is_type(e, json_type_string));
	FUZZ_ASSERT(json_object_get_string_len(e) > 0);
	json_object_put(o);
}

static void check_path(struct agent_reply *reply, json_object *body, const char *key, const char *def)
{
	char *path = NULL, *again = NULL, msg[256];

	reply->status = 0;
	orc_buf_reset(&reply->body);
	if (agent_field_path(&path, reply, body, key, def) < 0) {
		check_refusal(reply);
		return;
	}
	FUZZ_ASSERT(reply->status == 0 && path && path[0] == '/' && strlen(path) < PATH_MAX);
	FUZZ_ASSERT(agent_path_resolve(&again, path, strlen(path), msg, sizeof(msg)) == 0);
	FUZZ_ASSERT(!strcmp(again, path));
	if (def && !json_object_object_get_ex(body, key, NULL))
		FUZZ_ASSERT(!strcmp(path, def));
	free(again);
	free(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct agent_request req;
	struct agent_reply reply;
	json_object *body = NULL;
	const char *mode_s = NULL;
	char *text = fuzz_cstr(data, size), msg[256];
	mode_t mode = 0;

	memset(&req, 0, sizeof(req));
	memset(&reply, 0, sizeof(reply));
	req.method = "POST";
	req.path = "/files/mkdir";
	req.body = text;
	req.body_len = size;
	if (agent_body_object(&body, &reply, &req) < 0) {
		check_refusal(&reply);
		goto done;
	}
	check_path(&reply, body, "path", NULL);
	check_path(&reply, body, "cwd", AGENT_WORKSPACE);
	if (orc_json_get_str(body, "mode", &mode_s, msg, sizeof(msg)) == 0 &&
	    agent_parse_mode(&mode, mode_s) == 0)
		FUZZ_ASSERT(mode <= 07777 && strlen(mode_s) <= 5);
done:
	json_object_put(body);
	orc_buf_release(&reply.body);
	free(text);
	return 0;
}
