/*
 * Files as JSON: Orchard's base64 upload and download, list, and our
 * stat, mkdir and remove, each a call to the sandbox's agent
 * (docs/agent-protocol.md "Files").
 *
 *   POST   /sandboxes/{id}/files        {path, content (base64), mode?}
 *   GET    /sandboxes/{id}/files?path=  -> {path, content, size}
 *   GET    /sandboxes/{id}/files/list?path=/workspace
 *   GET    /sandboxes/{id}/files/stat?path=
 *   POST   /sandboxes/{id}/files/mkdir  {path, parents?, mode?}
 *   DELETE /sandboxes/{id}/files?path=[&recursive=true]
 *
 * Requests are checked here before the agent is called, so bad input is a
 * 4xx that writes nothing. A well-formed change the agent refuses (a file
 * where a directory should be, permission denied) is a failed step: it is
 * recorded with "success": false (docs/trajectory.md) and answered with
 * the agent's status and message. Reads are not recorded.
 */
#include <stdio.h>
#include <string.h>
#include <openssl/evp.h>

#include "api.h"
#include "base64.h"
#include "err.h"
#include "json.h"
#include "log.h"
#include "strutil.h"
#include "url.h"
#include "validate.h"
#include "xalloc.h"

#define FILES_TIMEOUT_MS 120000L
#define B64_FILE_MAX (64u << 20)       /* the agent's limit of the base64 routes */
#define ANSWER_MAX (96u << 20)         /* base64 JSON of the agent's 64 MiB limit */
#define SMALL_ANSWER_MAX (64u << 10)
#define CONTENT_RECORD_MAX (1u << 20)  /* files up to this keep their bytes in the event */

/* ---- shared by the files routes ------------------------------------------------- */

/* ?path=: def when missing or empty (NULL: required, 422), replied. */
static int query_path(const char **out, struct api_req *r, const char *def)
{
	const char *p = api_req_query(r, "path");

	if ((!p || !*p) && def)
		p = def;
	if (!p || !*p)
		return api_reply_error(r, ORC_EINVALID, "query parameter 'path' is required");
	if (strlen(p) >= API_PATH_MAX)
		return api_reply_error(r, ORC_EINVALID, "query parameter 'path' is longer than %d bytes",
				       API_PATH_MAX - 1);
	*out = p;
	return 0;
}

/* A JSON field 'path': a non-empty string without NUL, shorter than 4096. */
static int body_path(const char **out, json_object *body, struct api_req *r)
{
	const char *p = NULL;
	int err;

	if ((err = orc_json_get_str(body, "path", &p, API_ERRBUF(r))) < 0)
		return err;
	if (err == 1 || !*p)
		return api_fail(r, ORC_EINVALID, "field 'path' is required (a file path)");
	if (strlen(p) >= API_PATH_MAX)
		return api_fail(r, ORC_EINVALID, "field 'path' is longer than %d bytes",
				API_PATH_MAX - 1);
	*out = p;
	return 0;
}

/* A JSON field 'mode' (optional; *out NULL when absent): octal, at most 07777,
 * at most 5 digits (as the agent's agent_parse_mode reads it). */
static int body_mode(const char **out, json_object *body, struct api_req *r)
{
	const char *m = NULL, *p;
	int err;

	if ((err = orc_json_get_str(body, "mode", &m, API_ERRBUF(r))) < 0)
		return err;
	if (err == 1) {
		*out = NULL;
		return 0;
	}
	for (p = m; *p == '0'; p++)
		;
	if (!*m || strspn(m, "01234567") != strlen(m) || strlen(p) > 4 || strlen(m) > 5)
		return api_fail(r, ORC_EINVALID, "field 'mode' must be an octal string such as "
				"\"0644\", at most 07777");
	*out = m;
	return 0;
}

/* Call the agent for r and answer its 200 body unchanged. */
static int pass_through(struct api_req *r, const char *method, const char *path, size_t max)
{
	struct orc_buf out = ORC_BUF_INIT;
	struct api_agent a;
	long status = 0;
	int err;

	if ((err = api_agent_get(&a, r)) < 0)
		return err;
	orc_buf_init(&out, max);
	if ((err = api_agent_json(&out, &status, r, &a, method, path, NULL, 0, FILES_TIMEOUT_MS)) < 0)
		goto done;
	err = api_reply_agent(r, status, &out);
done:
	orc_buf_release(&out);
	return err;
}

/* "/files/stat?path=ESCAPED[&extra]" for the agent; owned by r. */
static const char *agent_path(struct api_req *r, const char *route, const char *path,
			      const char *extra)
{
	char *esc = orc_url_escape(path, "/");
	char *s = xasprintf("%s?path=%s%s", route, esc, extra ? extra : "");

	free(esc);
	return api_own_mem(r, s);
}

/* The agent's answer as an object, for the fields we record. */
static json_object *answer_object(struct api_req *r, const struct orc_buf *out)
{
	json_object *o = NULL;

	if (orc_json_parse_object(&o, orc_buf_cstr(out), out->len, NULL, 0) < 0)
		return NULL;
	return api_own_json(r, o);
}

/*
 * Record a change: the event's data is d (taken) with "success" and, on
 * failure, the agent's "error". Replies 503 when it cannot be recorded
 * (the change happened, but a client must not think it is in the record).
 */
static int record(struct api_req *r, const char *kind, json_object *d, long status,
		  const struct orc_buf *out)
{
	int err;

	json_object_object_add(d, "success", json_object_new_boolean(status == 200));
	if (status != 200)
		json_object_object_add(d, "error", api_agent_message(out->ptr, out->len));
	err = api_event_record(r, kind, api_own_json(r, d));
	if (err < 0)
		return api_reply_error(r, ORC_EUNAVAIL, "the %s on sandbox %s could not be recorded; "
				       "its outcome is unknown to the trajectory", kind, r->id);
	return 0;
}

/* ---- base64 ----------------------------------------------------------------------- */

/*
 * Check standard base64 exactly as the agent does (padding optional, no
 * whitespace, canonical final bits) and hash the decoded bytes without
 * holding them: *size_out and sha256_out (65 bytes, hex).
 */
static int b64_measure(size_t *size_out, char *sha256_out, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char chunk[3072], md[32];
	unsigned acc = 0, mdlen = 0;
	size_t i, o = 0, total = 0, pad = 0;
	EVP_MD_CTX *ctx;
	int v, bits = 0, err = 0;

	while (pad < 2 && n > 0 && s[n - 1] == '=') {
		n--;
		pad++;
	}
	if (n % 4 == 1 || (pad && (n + pad) % 4))
		return ORC_EINVALID;
	ctx = EVP_MD_CTX_new();
	if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL))
		abort();
	for (i = 0; i < n; i++) {
		if ((v = orc_base64_value((unsigned char)s[i])) < 0) {
			err = ORC_EINVALID;
			goto done;
		}
		acc = (acc << 6 | (unsigned)v) & 0xffffff;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			chunk[o++] = (unsigned char)(acc >> bits);
			if (o == sizeof(chunk)) {
				EVP_DigestUpdate(ctx, chunk, o);
				total += o;
				o = 0;
			}
		}
	}
	if (bits && (acc & ((1u << bits) - 1))) {
		err = ORC_EINVALID;
		goto done;
	}
	EVP_DigestUpdate(ctx, chunk, o);
	total += o;
	EVP_DigestFinal_ex(ctx, md, &mdlen);
	for (i = 0; i < 32; i++) {
		sha256_out[2 * i] = hex[md[i] >> 4];
		sha256_out[2 * i + 1] = hex[md[i] & 15];
	}
	sha256_out[64] = '\0';
	*size_out = total;
done:
	EVP_MD_CTX_free(ctx);
	return err;
}

/* ---- the upload body, without a tree of the content -------------------------------- */

/*
 * A 64 MiB file is about 90 MB of base64: parsed as a JSON tree it would
 * be held two or three more times (the tokenizer's buffer, the string).
 * So the body is scanned once for its top-level "content" string, the rest
 * of the object (with "content": "") is parsed as JSON, and the base64 is
 * checked and hashed where it lies in the body, which goes to the agent
 * unchanged. A body the scan does not understand is parsed whole, so its
 * error messages stay the JSON parser's.
 */

/* Past the string whose opening quote is at s[i]: the index of its
 * closing quote, or n. */
static size_t string_end(const char *s, size_t i, size_t n)
{
	for (i++; i < n && s[i] != '"'; i++)
		if (s[i] == '\\')
			i++;
	return i < n ? i : n;
}

static size_t skip_ws(const char *s, size_t i, size_t n)
{
	while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
		i++;
	return i;
}

/* Past the JSON value at s[i] (string, object, array or scalar), roughly:
 * the parser of the rest checks it. */
static size_t value_end(const char *s, size_t i, size_t n)
{
	size_t depth = 0;

	if (i < n && s[i] == '"')
		return string_end(s, i, n) + 1;
	for (; i < n; i++) {
		if (s[i] == '"') {
			i = string_end(s, i, n);
		} else if (s[i] == '{' || s[i] == '[') {
			depth++;
		} else if (s[i] == '}' || s[i] == ']') {
			if (depth == 0)
				return i;       /* the end of the object: a scalar ended */
			if (--depth == 0)
				return i + 1;
		} else if (depth == 0 && s[i] == ',') {
			return i;
		}
	}
	return n;
}

/* The last top-level "content" member of the object in s, when its value
 * is a string: [*start, *end) is its text between the quotes. 0, or -1
 * when there is none, it is not a string, or s is not an object the scan
 * follows. */
static int find_content(size_t *start, size_t *end, const char *s, size_t n)
{
	size_t i = skip_ws(s, 0, n), k, v;
	int found = -1;

	if (i >= n || s[i++] != '{')
		return -1;
	for (;;) {
		i = skip_ws(s, i, n);
		if (i < n && s[i] == '}')
			return found;
		if (i >= n || s[i] != '"')
			return -1;
		k = i;
		i = skip_ws(s, string_end(s, i, n) + 1, n);
		if (i >= n || s[i++] != ':')
			return -1;
		v = skip_ws(s, i, n);
		i = value_end(s, v, n);
		if (i > n || i <= v)
			return -1;
		if (!strncmp(s + k, "\"content\"", 9)) {
			/* the last one counts, as for the JSON parsers */
			found = s[v] == '"' && i - 1 > v && s[i - 1] == '"' ? 0 : -1;
			*start = v + 1;
			*end = i - 1;
		}
		i = skip_ws(s, i, n);
		if (i < n && s[i] == ',')
			i++;
		else if (!(i < n && s[i] == '}'))
			return -1;
	}
}

/* A POST /files body, checked (pointers into the request). */
struct upload_req {
	const char *path;
	const char *mode;             /* NULL: the agent's default */
	const char *content;          /* the base64 text in the body */
	size_t content_len;
	json_object *content_json;    /* the content as a JSON string (parsed bodies only) */
	size_t size;                  /* decoded bytes */
	char sha256[65];              /* of the decoded bytes, hex */
};

/* The body of r as a JSON object whose "content" is "" when the scan found
 * it (u->content then points into the body), or the whole body parsed.
 * Replied on error. */
static int upload_body(json_object **out, struct upload_req *u, struct api_req *r)
{
	const char *s = orc_buf_cstr(&r->body);
	struct orc_buf rest = ORC_BUF_INIT;
	size_t start, end;
	json_object *o = NULL;
	int err;

	if (find_content(&start, &end, s, r->body.len) < 0 || memchr(s + start, '\\', end - start))
		return api_req_json_body(out, r);
	orc_buf_add(&rest, s, start);
	orc_buf_add(&rest, s + end, r->body.len - end);
	/* A key spelled with \u escapes could be another "content": parse all. */
	if (memmem(rest.ptr, rest.len, "\\u", 2)) {
		orc_buf_release(&rest);
		return api_req_json_body(out, r);
	}
	err = orc_json_parse_object(&o, orc_buf_cstr(&rest), rest.len, API_ERRBUF(r));
	orc_buf_release(&rest);
	if (err < 0)
		return api_reply_failed(r, API_EBADREQ);
	u->content = s + start;
	u->content_len = end - start;
	*out = api_own_json(r, o);
	return 0;
}

/* The fields of an upload body: 0, or ORC_EINVALID / API_EBADREQ (api_fail). */
static int parse_upload(struct upload_req *u, json_object *body, struct api_req *r)
{
	json_object *c = NULL;
	int err;

	if ((err = body_path(&u->path, body, r)) < 0 ||
	    (err = body_mode(&u->mode, body, r)) < 0)
		return err;
	if (!json_object_object_get_ex(body, "content", &c) || !c)
		return api_fail(r, ORC_EINVALID, "field 'content' is required (the file's bytes as "
				"standard base64)");
	if (!json_object_is_type(c, json_type_string))
		return api_fail(r, ORC_EINVALID, "field 'content' must be a base64 string");
	if (!u->content) {
		u->content_json = c;
		u->content = json_object_get_string(c);
		u->content_len = (size_t)json_object_get_string_len(c);
	}
	if (b64_measure(&u->size, u->sha256, u->content, u->content_len) < 0)
		return api_fail(r, API_EBADREQ, "field 'content' is not valid base64 (standard "
				"alphabet, padding optional, no whitespace)");
	if (u->size > B64_FILE_MAX)
		return api_fail(r, ORC_ETOOBIG, "field 'content' decodes to more than 64 MiB, the "
				"limit of POST /files (base64): upload it with PUT /files/raw");
	return 0;
}

int api_files_upload(struct api_req *r)
{
	struct orc_buf out = ORC_BUF_INIT;
	struct upload_req u = { 0 };
	json_object *body, *d, *ans, *v;
	struct api_agent a;
	long status = 0;
	int err;

	if ((err = upload_body(&body, &u, r)) < 0)
		return err;
	if ((err = parse_upload(&u, body, r)) < 0)
		return api_reply_failed(r, err);
	if ((err = api_agent_get(&a, r)) < 0)
		return err;
	/* The agent reads the same fields from the same bytes. */
	orc_buf_init(&out, SMALL_ANSWER_MAX);
	if ((err = api_agent_json(&out, &status, r, &a, "POST", "/files/base64", r->body.ptr,
				  r->body.len, FILES_TIMEOUT_MS)) < 0)
		goto done;
	ans = status == 200 ? answer_object(r, &out) : NULL;
	d = json_object_new_object();
	json_object_object_add(d, "path", json_object_new_string(
		ans && json_object_object_get_ex(ans, "path", &v) && json_object_is_type(v, json_type_string)
		? json_object_get_string(v) : u.path));
	json_object_object_add(d, "size", json_object_new_int64((int64_t)u.size));
	json_object_object_add(d, "sha256", json_object_new_string(u.sha256));
	if (u.mode)
		json_object_object_add(d, "mode", json_object_new_string(u.mode));
	if (u.size <= CONTENT_RECORD_MAX)
		json_object_object_add(d, "content", u.content_json ? json_object_get(u.content_json)
				       : json_object_new_string_len(u.content, (int)u.content_len));
	if ((err = record(r, "file.write", d, status, &out)) < 0)
		goto done;
	if (status != 200) {
		err = api_reply_agent_error(r, status, &out);
		goto done;
	}
	api_req_write(r, 200, NULL, orc_buf_cstr(&out), out.len);
done:
	orc_buf_release(&out);
	return err;
}

int api_files_download(struct api_req *r)
{
	struct orc_buf out = ORC_BUF_INIT;
	struct api_agent a;
	const char *path;
	long status = 0;
	int err;

	if ((err = query_path(&path, r, NULL)) < 0)
		return err;
	if ((err = api_agent_get(&a, r)) < 0)
		return err;
	orc_buf_init(&out, ANSWER_MAX);
	if ((err = api_agent_json(&out, &status, r, &a, "GET", agent_path(r, "/files/base64", path, NULL),
				  NULL, 0, FILES_TIMEOUT_MS)) < 0)
		goto done;
	/* The agent's hint names its own route; ours for big files is /files/raw. */
	if (status == 413)
		err = api_reply_error(r, ORC_ETOOBIG, "file \"%s\" is larger than 64 MiB, the limit of "
				      "GET /files (base64): download it with GET /sandboxes/%s/files/raw",
				      path, r->id);
	else
		err = api_reply_agent(r, status, &out);
done:
	orc_buf_release(&out);
	return err;
}

int api_files_list(struct api_req *r)
{
	const char *path;
	int err;

	if ((err = query_path(&path, r, "/workspace")) < 0)
		return err;
	return pass_through(r, "GET", agent_path(r, "/files/list", path, NULL), ANSWER_MAX);
}

int api_files_stat(struct api_req *r)
{
	const char *path;
	int err;

	if ((err = query_path(&path, r, NULL)) < 0)
		return err;
	return pass_through(r, "GET", agent_path(r, "/files/stat", path, NULL), SMALL_ANSWER_MAX);
}

/* Send a change to the agent, record it as kind with data d (taken), and
 * answer the agent's 200 body or its error. */
static int change(struct api_req *r, const char *kind, json_object *d, const char *method,
		  const char *path, const char *body, size_t body_len)
{
	struct orc_buf out = ORC_BUF_INIT;
	struct api_agent a;
	json_object *ans, *v;
	long status = 0;
	int err;

	api_own_json(r, d);
	if ((err = api_agent_get(&a, r)) < 0)
		return err;
	orc_buf_init(&out, SMALL_ANSWER_MAX);
	if ((err = api_agent_json(&out, &status, r, &a, method, path, body, body_len,
				  FILES_TIMEOUT_MS)) < 0)
		goto done;
	if (status == 200 && (ans = answer_object(r, &out)) &&
	    json_object_object_get_ex(ans, "path", &v) && json_object_is_type(v, json_type_string))
		json_object_object_add(d, "path", json_object_get(v));
	if ((err = record(r, kind, json_object_get(d), status, &out)) < 0)
		goto done;
	err = api_reply_agent(r, status, &out);
done:
	orc_buf_release(&out);
	return err;
}

/* The fields of a mkdir body {path, parents: true, mode?}: 0, or ORC_EINVALID (api_fail). */
static int parse_mkdir(const char **path, const char **mode, int *parents, json_object *body,
		       struct api_req *r)
{
	int err;

	*parents = 1;
	if ((err = body_path(path, body, r)) < 0 ||
	    (err = body_mode(mode, body, r)) < 0 ||
	    (err = orc_json_get_bool(body, "parents", parents, API_ERRBUF(r))) < 0)
		return err;
	return 0;
}

int api_files_mkdir(struct api_req *r)
{
	json_object *body, *d;
	const char *path, *mode;
	int parents, err;

	if ((err = api_req_json_body(&body, r)) < 0)
		return err;
	if ((err = parse_mkdir(&path, &mode, &parents, body, r)) < 0)
		return api_reply_failed(r, err);
	d = json_object_new_object();
	json_object_object_add(d, "path", json_object_new_string(path));
	json_object_object_add(d, "parents", json_object_new_boolean(parents));
	if (mode)
		json_object_object_add(d, "mode", json_object_new_string(mode));
	return change(r, "file.mkdir", d, "POST", "/files/mkdir", r->body.ptr, r->body.len);
}

int api_files_delete(struct api_req *r)
{
	const char *path;
	json_object *d;
	int recursive = 0, err;

	if ((err = query_path(&path, r, NULL)) < 0 ||
	    (err = api_req_query_bool(&recursive, r, "recursive")) < 0)
		return err;
	d = json_object_new_object();
	json_object_object_add(d, "path", json_object_new_string(path));
	json_object_object_add(d, "recursive", json_object_new_boolean(recursive));
	return change(r, "file.delete", d, "DELETE",
		      agent_path(r, "/files", path, recursive ? "&recursive=1" : NULL), NULL, 0);
}
