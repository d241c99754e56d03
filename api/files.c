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
#include "validate.h"
#include "xalloc.h"

#define FILES_TIMEOUT_MS 120000L
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
static int body_path(const char **out, json_object *body, char *msg, size_t msglen)
{
	const char *p = NULL;
	int err;

	if ((err = orc_json_get_str(body, "path", &p, msg, msglen)) < 0)
		return err;
	if (err == 1 || !*p) {
		snprintf(msg, msglen, "field 'path' is required (a file path)");
		return ORC_EINVALID;
	}
	if (strlen(p) >= API_PATH_MAX) {
		snprintf(msg, msglen, "field 'path' is longer than %d bytes", API_PATH_MAX - 1);
		return ORC_EINVALID;
	}
	*out = p;
	return 0;
}

/* A JSON field 'mode' (optional; *out NULL when absent): octal, at most 07777,
 * at most 5 digits (as the agent's agent_parse_mode reads it). */
static int body_mode(const char **out, json_object *body, char *msg, size_t msglen)
{
	const char *m = NULL, *p;
	int err;

	if ((err = orc_json_get_str(body, "mode", &m, msg, msglen)) < 0)
		return err;
	if (err == 1) {
		*out = NULL;
		return 0;
	}
	for (p = m; *p == '0'; p++)
		;
	if (!*m || strspn(m, "01234567") != strlen(m) || strlen(p) > 4 || strlen(m) > 5) {
		snprintf(msg, msglen, "field 'mode' must be an octal string such as \"0644\", at most 07777");
		return ORC_EINVALID;
	}
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
	char *esc = api_url_escape(path);
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
	char msg[1024];
	int err;

	json_object_object_add(d, "success", json_object_new_boolean(status == 200));
	if (status != 200)
		json_object_object_add(d, "error", json_object_new_string(
			api_agent_message(out->ptr, out->len, msg, sizeof(msg))));
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

/* A POST /files body, checked (pointers into body). */
struct upload_req {
	const char *path;
	const char *mode;             /* NULL: the agent's default */
	json_object *content;         /* the base64 string */
	size_t size;                  /* decoded bytes */
	char sha256[65];              /* of the decoded bytes, hex */
};

/* The fields of an upload body: 0, or ORC_EINVALID / API_EBADREQ and msg. */
static int parse_upload(struct upload_req *u, json_object *body, char *msg, size_t msglen)
{
	int err;

	if ((err = body_path(&u->path, body, msg, msglen)) < 0 ||
	    (err = body_mode(&u->mode, body, msg, msglen)) < 0)
		return err;
	if (!json_object_object_get_ex(body, "content", &u->content) || !u->content) {
		snprintf(msg, msglen, "field 'content' is required (the file's bytes as standard base64)");
		return ORC_EINVALID;
	}
	if (!json_object_is_type(u->content, json_type_string)) {
		snprintf(msg, msglen, "field 'content' must be a base64 string");
		return ORC_EINVALID;
	}
	if (b64_measure(&u->size, u->sha256, json_object_get_string(u->content),
			(size_t)json_object_get_string_len(u->content)) < 0) {
		snprintf(msg, msglen, "field 'content' is not valid base64 (standard alphabet, padding "
			 "optional, no whitespace)");
		return API_EBADREQ;
	}
	return 0;
}

int api_files_upload(struct api_req *r)
{
	struct orc_buf out = ORC_BUF_INIT;
	struct upload_req u;
	json_object *body, *d, *ans, *v;
	struct api_agent a;
	char msg[512];
	long status = 0;
	int err;

	if ((err = api_req_json_body(&body, r)) < 0)
		return err;
	if ((err = parse_upload(&u, body, msg, sizeof(msg))) < 0)
		return api_reply_error(r, err, "%s", msg);
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
		json_object_object_add(d, "content", json_object_get(u.content));
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
	const char *path;
	int err;

	if ((err = query_path(&path, r, NULL)) < 0)
		return err;
	return pass_through(r, "GET", agent_path(r, "/files/base64", path, NULL), ANSWER_MAX);
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

/* The fields of a mkdir body {path, parents: true, mode?}: 0, or ORC_EINVALID and msg. */
static int parse_mkdir(const char **path, const char **mode, int *parents, json_object *body,
		       char *msg, size_t msglen)
{
	int err;

	*parents = 1;
	if ((err = body_path(path, body, msg, msglen)) < 0 ||
	    (err = body_mode(mode, body, msg, msglen)) < 0 ||
	    (err = orc_json_get_bool(body, "parents", parents, msg, msglen)) < 0)
		return err;
	return 0;
}

/* ?recursive= of a delete: absent, empty, 0 or false is 0; 1 or true is 1; else 422 (replied). */
static int query_recursive(int *out, struct api_req *r)
{
	const char *rec = api_req_query(r, "recursive");

	if (rec && (!strcmp(rec, "1") || !strcmp(rec, "true")))
		*out = 1;
	else if (rec && *rec && strcmp(rec, "0") && strcmp(rec, "false"))
		return api_reply_error(r, ORC_EINVALID, "query parameter 'recursive' must be true or "
				       "false");
	else
		*out = 0;
	return 0;
}

int api_files_mkdir(struct api_req *r)
{
	json_object *body, *d;
	const char *path, *mode;
	char msg[512];
	int parents, err;

	if ((err = api_req_json_body(&body, r)) < 0)
		return err;
	if ((err = parse_mkdir(&path, &mode, &parents, body, msg, sizeof(msg))) < 0)
		return api_reply_error(r, err, "%s", msg);
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

	if ((err = query_path(&path, r, NULL)) < 0 || (err = query_recursive(&recursive, r)) < 0)
		return err;
	d = json_object_new_object();
	json_object_object_add(d, "path", json_object_new_string(path));
	json_object_object_add(d, "recursive", json_object_new_boolean(recursive));
	return change(r, "file.delete", d, "DELETE",
		      agent_path(r, "/files", path, recursive ? "&recursive=1" : NULL), NULL, 0);
}
