/*
 * The api's rules on outside input, from the api's archive (libapi.a, the
 * Makefile): the route table's matching (router.c), the agent route URIs
 * nginx asks about (auth_agent.c), keyset cursors (cursor.c) and the
 * request field checks (validate.c).
 */
#include <string.h>

#include <json-c/json.h>

#include "../../api/api.h"
#include "../../api/validate.h"
#include "err.h"
#include "unit.h"

/* What api/main.c defines for the linked objects (zeroed: no database,
 * no configuration; these tests reach neither). */
struct api_server api_server;

/* ---- router.c ------------------------------------------------------------ */

static void only_stream_routes_stream(void)
{
	CHECK(api_route_streams("PUT", "/sandboxes/sb-1/files/raw"));
	CHECK(api_route_streams("PUT", "/sandboxes/sb-1/archive"));
	CHECK(!api_route_streams("GET", "/sandboxes/sb-1/files/raw"));   /* another method */
	CHECK(!api_route_streams("PUT", "/sandboxes/sb-1/files/raw/x")); /* a longer path */
	CHECK(!api_route_streams("PUT", "/sandboxes/sb-1/files/ra"));    /* a shorter one */
	CHECK(!api_route_streams("PUT", "/sandboxes//files/raw"));       /* an empty {id} */
	CHECK(!api_route_streams("PUT", "/sandboxes/a/b/files/raw"));    /* {id} is one segment */
	CHECK(!api_route_streams("POST", "/sandboxes/sb-1/exec"));
	CHECK(!api_route_streams("PUT", ""));
}

static void only_file_uploads_take_big_bodies(void)
{
	CHECK(api_route_body_max("POST", "/sandboxes/sb-1/files") == API_FILE_BODY_MAX);
	CHECK(api_route_body_max("GET", "/sandboxes/sb-1/files") == API_BODY_MAX);
	CHECK(api_route_body_max("POST", "/sandboxes/sb-1/exec") == API_BODY_MAX);
	CHECK(api_route_body_max("POST", "/sandboxes") == API_BODY_MAX);
	CHECK(api_route_body_max("POST", "/nosuch") == API_BODY_MAX);
}

static void ids_are_dns_labels(void)
{
	static const char *const good[] = { "a", "sb-1", "0123456789abcdef", "a-b-c" };
	static const char *const bad[] = { "", "-a", "a-", "A", "a_b", "a.b", "a/b", "..", "a b" };
	char long_id[API_MAX_ID + 2];
	size_t i;

	for (i = 0; i < sizeof(good) / sizeof(*good); i++)
		CHECK(api_valid_id(good[i]));
	for (i = 0; i < sizeof(bad) / sizeof(*bad); i++)
		CHECK(!api_valid_id(bad[i]));
	memset(long_id, 'a', sizeof(long_id) - 1);
	long_id[API_MAX_ID] = '\0';
	CHECK(api_valid_id(long_id));
	long_id[API_MAX_ID] = 'a';
	long_id[API_MAX_ID + 1] = '\0';
	CHECK(!api_valid_id(long_id));
}

static void agent_uris_name_their_sandbox(void)
{
	char id[API_MAX_ID + 1];

	CHECK(api_agent_uri_parse(id, "/v1/sandboxes/sb-1/exec/pty") == API_AGENT_ROUTE_PTY);
	CHECK_STR(id, "sb-1");
	CHECK(api_agent_uri_parse(id, "/sandboxes/sb-2/exec/pty") == API_AGENT_ROUTE_PTY);
	CHECK_STR(id, "sb-2");
	CHECK(api_agent_uri_parse(id, "/v1/sandboxes/sb-1/files/raw?path=/a") >= 0);
	CHECK_STR(id, "sb-1");
	CHECK(api_agent_uri_parse(id, "/v1/sandboxes/sb-1/nosuch") == ORC_EINVALID);
	CHECK(api_agent_uri_parse(id, "/v1/sandboxes/Bad_Id/exec/pty") == ORC_EINVALID);
	CHECK(api_agent_uri_parse(id, "/v1/jobs/sb-1/exec/pty") == ORC_EINVALID);
	CHECK(api_agent_uri_parse(id, "") == ORC_EINVALID);
}

/* ---- cursor.c ------------------------------------------------------------ */

static void cursors_parse_or_are_refused(void)
{
	static const char *const bad[] = { "", "_", "123", "123_", "_abc", "x1_abc", "-1_abc",
					   "1_Bad_Id", "1_a/b", "99999999999999999999999_abc" };
	struct api_cursor c;
	size_t i;

	CHECK(api_cursor_parse(&c, "1733400000123456_sb-1") == 0);
	CHECK_STR(c.us, "1733400000123456");
	CHECK_STR(c.id, "sb-1");
	CHECK(api_cursor_parse(&c, "0_a") == 0);
	CHECK_STR(c.us, "0");
	for (i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		if (api_cursor_parse(&c, bad[i]) != ORC_EINVALID) {
			fprintf(stderr, "    cursor \"%s\" was accepted\n", bad[i]);
			unit_failures++;
		}
	}
}

/* ---- validate.c ---------------------------------------------------------- */

/* Parse JSON text for a check; the caller puts it. */
static json_object *js(const char *text)
{
	json_object *o = json_tokener_parse(text);

	CHECK(o != NULL);
	return o;
}

static int labels(const char *text, struct api_req *r)
{
	json_object *o = js(text);
	int e = api_check_labels(o, r);

	json_object_put(o);
	return e;
}

static void labels_follow_kubernetes_rules(void)
{
	static const char *const good[] = { "{}", "{\"a\": \"b\"}", "{\"app.kubernetes.io/name\": \"x\"}",
					    "{\"a\": \"\"}", "{\"a-b.c_d\": \"v.1-2_3\"}" };
	static const char *const bad[] = { "{\"\": \"x\"}", "{\"-a\": \"x\"}", "{\"a\": \"-x\"}",
					   "{\"a\": 1}", "{\"a b\": \"x\"}", "{\"/a\": \"x\"}",
					   "{\"Pre_fix/a\": \"x\"}", "{\"a\": \"x y\"}" };
	struct api_req r = { 0 };
	size_t i;

	for (i = 0; i < sizeof(good) / sizeof(*good); i++)
		CHECK(labels(good[i], &r) == 0);
	for (i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		r.error[0] = '\0';
		if (labels(bad[i], &r) != ORC_EINVALID || !r.error[0]) {
			fprintf(stderr, "    labels %s were not refused with a message\n", bad[i]);
			unit_failures++;
		}
	}
}

static void label_lengths_are_bounded(void)
{
	struct api_req r = { 0 };
	char key[API_LABEL_NAME_MAX + 2], text[256];

	memset(key, 'a', sizeof(key));
	key[API_LABEL_NAME_MAX] = '\0';
	snprintf(text, sizeof(text), "{\"%s\": \"v\"}", key);
	CHECK(labels(text, &r) == 0);
	key[API_LABEL_NAME_MAX] = 'a';
	key[API_LABEL_NAME_MAX + 1] = '\0';
	snprintf(text, sizeof(text), "{\"%s\": \"v\"}", key);
	CHECK(labels(text, &r) == ORC_EINVALID);
}

static void env_paths_and_commands_are_checked(void)
{
	json_object *o;
	struct api_req r = { 0 };

	o = js("{\"PATH\": \"/bin\", \"_X1\": \"\"}");
	CHECK(api_check_env(o, "env", &r) == 0);
	json_object_put(o);
	o = js("{\"1X\": \"a\"}");
	r.error[0] = '\0';
	CHECK(api_check_env(o, "env", &r) == ORC_EINVALID && strstr(r.error, "env"));
	json_object_put(o);
	o = js("{\"A\": 1}");
	CHECK(api_check_env(o, "env", &r) == ORC_EINVALID);
	json_object_put(o);
	o = js("{\"A=B\": \"x\"}");
	CHECK(api_check_env(o, "env", &r) == ORC_EINVALID);
	json_object_put(o);

	o = js("\"/workspace/a\"");
	CHECK(api_check_path(o, "cwd", &r) == 0);
	json_object_put(o);
	o = js("\"relative\"");
	r.error[0] = '\0';
	CHECK(api_check_path(o, "cwd", &r) == ORC_EINVALID && strstr(r.error, "cwd"));
	json_object_put(o);
	o = js("5");
	CHECK(api_check_path(o, "cwd", &r) == ORC_EINVALID);
	json_object_put(o);

	o = js("\"echo hi\"");
	CHECK(api_check_command(o, &r) == 0);
	json_object_put(o);
	o = js("[\"ls\", \"-l\"]");
	CHECK(api_check_command(o, &r) == 0);
	json_object_put(o);
	o = js("\"\"");
	CHECK(api_check_command(o, &r) == ORC_EINVALID);
	json_object_put(o);
	o = js("[]");
	CHECK(api_check_command(o, &r) == ORC_EINVALID);
	json_object_put(o);
	o = js("[\"ls\", 1]");
	CHECK(api_check_command(o, &r) == ORC_EINVALID);
	json_object_put(o);
}

static void idempotency_keys_are_printable_ascii(void)
{
	char key[258];

	/* 1: a usable key; 0: not */
	CHECK(api_check_idempotency_key("a") == 1);
	CHECK(api_check_idempotency_key("retry-1~!{}") == 1);
	CHECK(api_check_idempotency_key("") == 0);
	CHECK(api_check_idempotency_key("a b") == 0);
	CHECK(api_check_idempotency_key("tab\there") == 0);
	CHECK(api_check_idempotency_key("caf\xc3\xa9") == 0);
	memset(key, 'k', sizeof(key));
	key[255] = '\0';
	CHECK(api_check_idempotency_key(key) == 1);
	key[255] = 'k';
	key[256] = '\0';
	CHECK(api_check_idempotency_key(key) == 0);
}

const struct unit_test api_rule_tests[] = {
	{ "router: only stream routes stream", only_stream_routes_stream },
	{ "router: only file uploads take big bodies", only_file_uploads_take_big_bodies },
	{ "router: ids are DNS labels", ids_are_dns_labels },
	{ "router: agent URIs name their sandbox", agent_uris_name_their_sandbox },
	{ "cursor: parse or are refused", cursors_parse_or_are_refused },
	{ "validate: labels follow Kubernetes rules", labels_follow_kubernetes_rules },
	{ "validate: label lengths are bounded", label_lengths_are_bounded },
	{ "validate: env, paths and commands", env_paths_and_commands_are_checked },
	{ "validate: Idempotency-Key is printable ASCII", idempotency_keys_are_printable_ascii },
	{ NULL, NULL }
};
