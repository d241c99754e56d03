/*
 * The files routes of the api (api/files.c, included; its agent calls are
 * dropped by --gc-sections): the query of GET/DELETE /files, /files/list
 * and /files/stat (query_path, api_req_query_bool, the agent path built from
 * them with api_url_escape of api/sandbox_agent.c), and the bodies of
 * POST /files (parse_upload, with b64_measure) and POST /files/mkdir
 * (parse_mkdir), and upload_body's scan for "content" (find_content).
 * Input (fuzz_req.h): a query string line, then the body.
 *
 * Properties: a refusal is one 4xx answer with a message; an accepted
 * path is a non-empty field or parameter of the request shorter than
 * 4096 bytes without NUL, and the agent's query gives it back; a mode is
 * octal at most 07777 and agent_parse_mode takes it; b64_measure accepts exactly what the agent's
 * decoder (agent_b64_decode) accepts, with the same size, and its sha256
 * is that of the decoded bytes; parents defaults to true; what the scan
 * takes for the content of a body that parses is the parser's content.
 */
#include "fuzz_req.h"
#include "../../api/files.c"

/* The agent's readers of what the api accepts (agent/files_base64.c, agent/fsutil.c). */
int agent_b64_decode(unsigned char *out, size_t *outlen, const char *s, size_t n);
int agent_parse_mode(mode_t *out, const char *s);

/* A mode the api accepts is octal, at most 07777, and the agent takes it too. */
static void check_mode(const char *mode)
{
	mode_t m = 0;
	char *end;
	long v;

	if (!mode)
		return;
	v = strtol(mode, &end, 8);
	FUZZ_ASSERT(*mode && !*end && v >= 0 && v <= 07777);
	FUZZ_ASSERT(agent_parse_mode(&m, mode) == 0 && (long)m == v);
}

static void check_agent_path(struct api_req *r, const char *route, const char *path)
{
	const char *a = agent_path(r, route, path, NULL);

	FUZZ_ASSERT(!strncmp(a, route, strlen(route)) && a[strlen(route)] == '?');
	fuzz_query_round_trip(a + strlen(route) + 1, "path", path);
}

static void queries(struct api_req *r)
{
	const char *path = NULL, *q = api_req_query(r, "path"), *rec = api_req_query(r, "recursive");
	int recursive = -1;

	fuzz_req_rearm(r);
	if (query_path(&path, r, NULL) == 0) {
		FUZZ_ASSERT(path == q && *path && strlen(path) < API_PATH_MAX);
		check_agent_path(r, "/files/stat", path);
	} else {
		FUZZ_ASSERT(r->status == ORC_EINVALID && (!q || !*q || strlen(q) >= API_PATH_MAX));
	}
	fuzz_req_rearm(r);
	if (query_path(&path, r, "/workspace") == 0)
		FUZZ_ASSERT(q && *q ? path == q : !strcmp(path, "/workspace"));
	else
		FUZZ_ASSERT(r->status == ORC_EINVALID && q && strlen(q) >= API_PATH_MAX);
	fuzz_req_rearm(r);
	if (api_req_query_bool(&recursive, r, "recursive") == 0)
		FUZZ_ASSERT(recursive == (rec && (!strcmp(rec, "1") || !strcmp(rec, "true"))));
	else
		FUZZ_ASSERT(r->status == ORC_EINVALID && rec && *rec && recursive == -1);
}

/* b64_measure against the agent's decoder and a separate sha256. */
static void check_b64(const char *s, size_t n)
{
	unsigned char *bytes = malloc(n / 4 * 3 + 3), md[32];
	char sha[65], hex[65];
	size_t size = 0, len = 0, i;
	int mine, agent;

	FUZZ_ASSERT(bytes);
	mine = b64_measure(&size, sha, s, n);
	agent = agent_b64_decode(bytes, &len, s, n);
	FUZZ_ASSERT((mine == 0) == (agent == 0));
	if (mine == 0) {
		FUZZ_ASSERT(size == len);
		FUZZ_ASSERT(EVP_Digest(bytes, len, md, NULL, EVP_sha256(), NULL));
		for (i = 0; i < 32; i++)
			snprintf(hex + 2 * i, 3, "%02x", md[i]);
		FUZZ_ASSERT(!strcmp(sha, hex));
	}
	free(bytes);
}

/* The scan's content is the parsed body's, when upload_body trusts it. */
static void check_scan(struct api_req *r, json_object *body)
{
	const char *s = orc_buf_cstr(&r->body);
	size_t start = 0, end = 0;
	json_object *v = NULL;

	if (find_content(&start, &end, s, r->body.len) < 0 || memchr(s + start, '\\', end - start) ||
	    memmem(s, r->body.len, "\\u", 2))
		return;
	FUZZ_ASSERT(json_object_object_get_ex(body, "content", &v) && json_object_is_type(v, json_type_string));
	FUZZ_ASSERT((size_t)json_object_get_string_len(v) == end - start &&
		    !memcmp(json_object_get_string(v), s + start, end - start));
}

static void bodies(struct api_req *r, json_object *body)
{
	struct upload_req u = { 0 };
	const char *path = NULL, *mode = NULL;
	json_object *v = NULL;
	int parents = -1, err;

	if (json_object_object_get_ex(body, "content", &v) && json_object_is_type(v, json_type_string))
		check_b64(json_object_get_string(v), (size_t)json_object_get_string_len(v));
	r->error[0] = '\0';
	if ((err = parse_upload(&u, body, r)) == 0) {
		FUZZ_ASSERT(fuzz_is_field(body, "path", u.path) && *u.path && strlen(u.path) < API_PATH_MAX);
		FUZZ_ASSERT(!u.mode || fuzz_is_field(body, "mode", u.mode));
		check_mode(u.mode);
		FUZZ_ASSERT(u.content_json && json_object_is_type(u.content_json, json_type_string));
		FUZZ_ASSERT(u.content == json_object_get_string(u.content_json));
		FUZZ_ASSERT(strlen(u.sha256) == 64 && u.size <= B64_FILE_MAX);
	} else {
		FUZZ_ASSERT((err == ORC_EINVALID || err == API_EBADREQ || err == ORC_ETOOBIG) && r->error[0]);
	}
	check_scan(r, body);
	r->error[0] = '\0';
	if ((err = parse_mkdir(&path, &mode, &parents, body, r)) == 0) {
		FUZZ_ASSERT(fuzz_is_field(body, "path", path) && *path && strlen(path) < API_PATH_MAX);
		check_mode(mode);
		FUZZ_ASSERT(parents == 0 || parents == 1);
		if (!json_object_object_get_ex(body, "parents", &v) || !v)
			FUZZ_ASSERT(parents == 1);
	} else {
		FUZZ_ASSERT(err == ORC_EINVALID && r->error[0]);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct api_req r;
	json_object *body;

	if (fuzz_req_init(&r, data, size) == 0) {
		queries(&r);
		if ((body = fuzz_req_body(&r)))
			bodies(&r, body);
	}
	api_req_release(&r);
	return 0;
}
