/*
 * Raw byte streams between the client and the agent, never holding a
 * whole file (docs/architecture.md, "Raw file streams"):
 *
 *   PUT /sandboxes/{id}/files/raw?path=[&mode=]  body: the file -> {path, size, sha256}
 *   GET /sandboxes/{id}/files/raw?path=          the file (application/octet-stream)
 *   PUT /sandboxes/{id}/archive?path=DIR         body: a tar (or .tar.gz) -> {path, entries, bytes}
 *   GET /sandboxes/{id}/archive?path=DIR         the directory as a tar
 *
 * Uploads come here: nginx streams the body over FastCGI
 * (fastcgi_request_buffering off), we read it with FCGX_GetStr as libcurl
 * asks for it and send it on to the agent's PUT /files or /archive, whose
 * answer (size and sha256 of what it wrote) goes into the 'file.write' or
 * 'archive.upload' event (the latter with the size and sha256 of the tar
 * stream, computed here as it passes). Memory stays bounded by the buffers
 * in between (plus the first 1 MiB, kept so a small file's or archive's
 * bytes are in the event).
 *
 * Downloads are normally proxied by nginx straight to the agent; these
 * handlers serve them when nginx hands a request over (an agent error to
 * put into our error shape, a sandbox that is not the caller's) and work
 * on their own behind any FastCGI front end: the agent's answer is copied
 * to FastCGI as it arrives ("X-Accel-Buffering: no").
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <curl/curl.h>
#include <openssl/evp.h>

#include "api.h"
#include "err.h"
#include "json.h"
#include "log.h"
#include "strutil.h"
#include "url.h"
#include "validate.h"
#include "xalloc.h"

#define ANSWER_MAX (64u << 10)
#define CONTENT_RECORD_MAX (1u << 20)
#define RAW_TIMEOUT_S 3600L        /* a whole transfer */
#define RAW_STALL_S 120L           /* no progress for this long: give up */
#define DRAIN_MAX (64u << 20)      /* body read and dropped after an early answer */

/* ---- libcurl to the agent ------------------------------------------------------- */

struct agent_stream {
	CURL *h;
	struct curl_slist *hdrs;
	char *url;
};

static void agent_stream_release(struct agent_stream *s)
{
	if (s->h)
		curl_easy_cleanup(s->h);
	curl_slist_free_all(s->hdrs);
	free(s->url);
	memset(s, 0, sizeof(*s));
}

/* A handle for method on the agent's path (with query), headers set. */
static int agent_stream_init(struct agent_stream *s, struct api_req *r, const struct api_agent *a,
			     const char *path)
{
	char *line;

	memset(s, 0, sizeof(*s));
	if (!(s->h = curl_easy_init()))
		return ORC_ERROR;
	if (!strncmp(a->address, "unix:", 5)) {
		curl_easy_setopt(s->h, CURLOPT_UNIX_SOCKET_PATH, a->address + 5);
		s->url = xasprintf("http://agent%s", path);
	} else {
		s->url = xasprintf("%s%s", a->address, path);
	}
	line = xasprintf("Authorization: Bearer %s", a->token);
	s->hdrs = curl_slist_append(s->hdrs, line);
	free(line);
	s->hdrs = curl_slist_append(s->hdrs, "Expect:");
	/* One request per connection (lib/agent_client.c says why). */
	s->hdrs = curl_slist_append(s->hdrs, "Connection: close");
	if (r->request_id[0]) {
		line = xasprintf("X-Request-ID: %s", r->request_id);
		s->hdrs = curl_slist_append(s->hdrs, line);
		free(line);
	}
	curl_easy_setopt(s->h, CURLOPT_URL, s->url);
	curl_easy_setopt(s->h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(s->h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
	curl_easy_setopt(s->h, CURLOPT_TIMEOUT, RAW_TIMEOUT_S);
	curl_easy_setopt(s->h, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(s->h, CURLOPT_LOW_SPEED_TIME, RAW_STALL_S);
	return 0;
}

/* ?path= (required) and the agent path "route?path=ESC[&mode=M]" (owned by r). */
static int raw_target(const char **agent_path, const char **path_out, struct api_req *r,
		      const char *route, int with_mode)
{
	const char *path = api_req_query(r, "path"), *mode = with_mode ? api_req_query(r, "mode") : NULL;
	char *esc;

	if (!path || !*path)
		return api_reply_error(r, ORC_EINVALID, "query parameter 'path' is required");
	if (strlen(path) >= API_PATH_MAX)
		return api_reply_error(r, ORC_EINVALID, "query parameter 'path' is longer than %d bytes",
				       API_PATH_MAX - 1);
	if (mode && (!*mode || strspn(mode, "01234567") != strlen(mode) ||
		     strlen(mode + strspn(mode, "0")) > 4 || strlen(mode) > 5))
		return api_reply_error(r, ORC_EINVALID, "query parameter 'mode' must be octal such as "
				       "0644, at most 07777");
	esc = orc_url_escape(path, "/");
	*agent_path = api_own_mem(r, xasprintf("%s?path=%s%s%s", route, esc, mode ? "&mode=" : "",
					      mode ? mode : ""));
	free(esc);
	*path_out = path;
	return 0;
}

/* ---- uploads ---------------------------------------------------------------------- */

struct upload {
	struct api_req *r;
	int64_t remaining;          /* -1: until the end of the FastCGI stream */
	uint64_t sent;
	struct orc_buf head;        /* the first bytes, for the event */
	EVP_MD_CTX *sha;            /* sha256 of the stream (archives; NULL for files) */
	int client_short;           /* the body ended before Content-Length */
	int revoked;                /* the key was revoked meanwhile (key_revoke.c) */
	struct orc_buf answer;
};

static size_t upload_read(char *buf, size_t size, size_t nitems, void *userdata)
{
	struct upload *u = userdata;
	size_t want = size * nitems;
	int n;

	if (u->remaining == 0)
		return 0;
	if (api_key_revoked(u->r->key_id)) {
		u->revoked = 1;
		return CURL_READFUNC_ABORT;
	}
	if (u->remaining > 0 && (uint64_t)u->remaining < want)
		want = (size_t)u->remaining;
	if (want > INT_MAX)
		want = INT_MAX;
	n = FCGX_GetStr(buf, (int)want, u->r->fcgi->in);
	if (n <= 0) {
		if (u->remaining > 0) {
			u->client_short = 1;
			return CURL_READFUNC_ABORT;
		}
		return 0;
	}
	if (u->head.len < CONTENT_RECORD_MAX + 1)
		orc_buf_add(&u->head, buf, (size_t)n < CONTENT_RECORD_MAX + 1 - u->head.len ?
			    (size_t)n : CONTENT_RECORD_MAX + 1 - u->head.len);
	if (u->sha)
		EVP_DigestUpdate(u->sha, buf, (size_t)n);
	u->sent += (uint64_t)n;
	if (u->remaining > 0)
		u->remaining -= n;
	return (size_t)n;
}

static size_t answer_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct orc_buf *b = userdata;
	size_t n = size * nmemb;

	return orc_buf_add(b, ptr, n) < 0 ? 0 : n;
}

/* Read and drop what is left of the body (bounded), so that nginx, still
 * sending it, gets our early answer rather than a reset. */
static void upload_drain(struct upload *u)
{
	char scratch[65536];
	uint64_t dropped = 0;
	int n;

	while (u->remaining != 0 && dropped < DRAIN_MAX &&
	       (n = FCGX_GetStr(scratch, sizeof(scratch), u->r->fcgi->in)) > 0) {
		dropped += (uint64_t)n;
		if (u->remaining > 0)
			u->remaining -= n;
	}
}

static json_object *answer_field(json_object *ans, const char *k)
{
	json_object *v = NULL;

	return ans && json_object_object_get_ex(ans, k, &v) ? json_object_get(v) : NULL;
}

/* The first MiB as base64, when it is the whole body: a replay can send it again. */
static void add_content(json_object *d, const struct upload *u)
{
	int n = 4 * (((int)u->head.len + 2) / 3);
	unsigned char *b64 = xmalloc((size_t)n + 1);

	EVP_EncodeBlock(b64, (const unsigned char *)orc_buf_cstr(&u->head), (int)u->head.len);
	json_object_object_add(d, "content", json_object_new_string_len((char *)b64, n));
	free(b64);
}

/* The stream's sha256 in lowercase hex (archives). */
static json_object *stream_sha256(struct upload *u)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0, i;
	char out[2 * EVP_MAX_MD_SIZE + 1];

	EVP_DigestFinal_ex(u->sha, md, &mdlen);
	for (i = 0; i < mdlen; i++) {
		out[2 * i] = hex[md[i] >> 4];
		out[2 * i + 1] = hex[md[i] & 15];
	}
	out[2 * mdlen] = '\0';
	return json_object_new_string(out);
}

/*
 * The event of an upload that reached the agent: status and answer. A
 * tar stream the agent took whole is recorded with its size and sha256
 * (and its bytes when at most 1 MiB), like a file: one 'archive.upload'
 * step of the trajectory, whatever the number of entries.
 */
static json_object *upload_event(struct upload *u, int is_archive, const char *path,
				 const char *mode, long status, json_object *ans)
{
	json_object *d = json_object_new_object(), *p = answer_field(ans, "path");
	int whole = u->sent <= CONTENT_RECORD_MAX && u->head.len == u->sent;

	json_object_object_add(d, "path", p ? p : json_object_new_string(path));
	if (is_archive) {
		json_object_object_add(d, "entries", answer_field(ans, "entries"));
		json_object_object_add(d, "bytes", answer_field(ans, "bytes"));
		if (status == 200) {
			json_object_object_add(d, "size", json_object_new_int64((int64_t)u->sent));
			json_object_object_add(d, "sha256", stream_sha256(u));
		}
	} else {
		json_object_object_add(d, "size", ans ? answer_field(ans, "size") :
				       json_object_new_int64((int64_t)u->sent));
		if (ans)
			json_object_object_add(d, "sha256", answer_field(ans, "sha256"));
		if (mode)
			json_object_object_add(d, "mode", json_object_new_string(mode));
	}
	json_object_object_add(d, "success", json_object_new_boolean(status == 200));
	if (status != 200)
		json_object_object_add(d, "error", api_agent_message(u->answer.ptr, u->answer.len));
	json_object_object_add(d, "raw", json_object_new_boolean(1));
	/* small enough to keep: a replay can write it again (an archive only
	 * when the agent read all of it) */
	if (whole && (!is_archive || status == 200))
		add_content(d, u);
	return d;
}

static int raw_upload(struct api_req *r, int is_archive)
{
	const char *cl = api_req_param(r, "CONTENT_LENGTH");
	const char *agent_path, *path, *mode = is_archive ? NULL : api_req_query(r, "mode");
	struct agent_stream s;
	struct upload u;
	struct api_agent a;
	json_object *ans = NULL;
	long status = 0;
	CURLcode cc;
	int err;

	memset(&s, 0, sizeof(s));
	memset(&u, 0, sizeof(u));
	u.r = r;
	u.remaining = -1;
	orc_buf_init(&u.head, CONTENT_RECORD_MAX + 1);
	orc_buf_init(&u.answer, ANSWER_MAX);
	if (is_archive && (!(u.sha = EVP_MD_CTX_new()) || !EVP_DigestInit_ex(u.sha, EVP_sha256(), NULL)))
		abort();
	if ((err = raw_target(&agent_path, &path, r, is_archive ? "/archive" : "/files", !is_archive)) < 0)
		goto done;
	if (cl && *cl && orc_parse_i64(&u.remaining, cl, 0, INT64_MAX) < 0) {
		err = api_reply_error(r, API_EBADREQ, "invalid Content-Length");
		goto done;
	}
	if (u.remaining > api_server.raw_max) {
		err = api_reply_error(r, ORC_ETOOBIG, "request body is larger than %lld bytes",
				      (long long)api_server.raw_max);
		goto done;
	}
	if ((err = api_agent_get(&a, r)) < 0 || (err = agent_stream_init(&s, r, &a, agent_path)) < 0)
		goto done;
	s.hdrs = curl_slist_append(s.hdrs, "Content-Type: application/octet-stream");
	curl_easy_setopt(s.h, CURLOPT_HTTPHEADER, s.hdrs);
	curl_easy_setopt(s.h, CURLOPT_UPLOAD, 1L);
	curl_easy_setopt(s.h, CURLOPT_UPLOAD_BUFFERSIZE, 512L * 1024);
	curl_easy_setopt(s.h, CURLOPT_READFUNCTION, upload_read);
	curl_easy_setopt(s.h, CURLOPT_READDATA, &u);
	if (u.remaining >= 0)
		curl_easy_setopt(s.h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)u.remaining);
	curl_easy_setopt(s.h, CURLOPT_WRITEFUNCTION, answer_write);
	curl_easy_setopt(s.h, CURLOPT_WRITEDATA, &u.answer);
	cc = curl_easy_perform(s.h);
	curl_easy_getinfo(s.h, CURLINFO_RESPONSE_CODE, &status);
	if (u.client_short) {
		/* nothing was written: the agent drops an incomplete body */
		err = api_reply_error(r, API_EBADREQ, "the request body ended after %llu bytes, before "
				      "its Content-Length", (unsigned long long)u.sent);
		goto done;
	}
	if (u.revoked) {
		/* the agent drops an incomplete body too */
		err = api_reply_error(r, ORC_EFORBIDDEN, "the API key was revoked during the upload; "
				      "nothing was written");
		goto done;
	}
	if (!status) {
		err = api_reply_error(r, cc == CURLE_OPERATION_TIMEDOUT ? ORC_ETIMEOUT : API_EAGENT,
				      "the upload to the agent of sandbox %s failed: %s", r->id,
				      curl_easy_strerror(cc));
		goto done;
	}
	if (u.remaining != 0)
		upload_drain(&u);    /* the agent answered before the end (413, 400) */
	if (status == 200 &&
	    orc_json_parse_object(&ans, orc_buf_cstr(&u.answer), u.answer.len, NULL, 0) < 0) {
		err = api_reply_error(r, API_EAGENT, "the sandbox's agent sent an invalid answer");
		goto done;
	}
	api_own_json(r, ans);
	if (api_event_record(r, is_archive ? "archive.upload" : "file.write",
			     api_own_json(r, upload_event(&u, is_archive, path, mode, status, ans))) < 0) {
		err = api_reply_error(r, ORC_EUNAVAIL, "the upload to sandbox %s could not be recorded",
				      r->id);
		goto done;
	}
	if (status != 200)
		err = api_reply_agent_error(r, status, &u.answer);
	else
		api_req_write(r, 200, NULL, orc_buf_cstr(&u.answer), u.answer.len);
done:
	agent_stream_release(&s);
	EVP_MD_CTX_free(u.sha);
	orc_buf_release(&u.head);
	orc_buf_release(&u.answer);
	return err;
}

int api_files_raw_put(struct api_req *r)
{
	return raw_upload(r, 0);
}

int api_archive_put(struct api_req *r)
{
	return raw_upload(r, 1);
}

/* ---- downloads -------------------------------------------------------------------- */

struct download {
	struct api_req *r;
	CURL *h;
	const char *content_type;
	int head_only;
	int checked;                /* the agent's status has been looked at */
	int started;                /* our 200 and headers went out */
	int client_gone;
	long status;
	struct orc_buf pass;        /* agent headers passed on */
	struct orc_buf error;       /* the body of a non-200 answer */
};

/* Agent response headers that describe the file, passed to the client. */
static const char *const passed_headers[] = {
	"Content-Length", "X-File-Size", "X-File-Mode", "X-File-Modified",
};

static size_t download_header(char *buf, size_t size, size_t nitems, void *userdata)
{
	struct download *d = userdata;
	size_t n = size * nitems, i, k, v;

	if (n >= 5 && !strncmp(buf, "HTTP/", 5)) {
		orc_buf_reset(&d->pass);   /* a new response (after 100 Continue) */
		return n;
	}
	for (i = 0; i < sizeof(passed_headers) / sizeof(*passed_headers); i++) {
		k = strlen(passed_headers[i]);
		if (n <= k || buf[k] != ':' || strncasecmp(buf, passed_headers[i], k))
			continue;
		for (v = k + 1; v < n && buf[v] == ' '; v++)
			;
		while (n > v && (buf[n - 1] == '\r' || buf[n - 1] == '\n' || buf[n - 1] == ' '))
			n--;
		if (n > v && n - v <= 128 && !memchr(buf + v, '\r', n - v) && !memchr(buf + v, '\n', n - v))
			orc_buf_addf(&d->pass, "%s: %.*s\r\n", passed_headers[i], (int)(n - v), buf + v);
		return size * nitems;
	}
	return n;
}

/* The agent's status is known: on 200, send ours with its headers. */
static void download_check(struct download *d)
{
	struct orc_buf h = ORC_BUF_INIT;

	d->checked = 1;
	curl_easy_getinfo(d->h, CURLINFO_RESPONSE_CODE, &d->status);
	if (d->status != 200)
		return;
	orc_buf_addf(&h, "Status: 200 OK\r\nContent-Type: %s\r\nX-Accel-Buffering: no\r\n%s\r\n",
		     d->content_type, orc_buf_cstr(&d->pass));
	FCGX_PutStr(h.ptr, (int)h.len, d->r->fcgi->out);
	d->r->replied = 1;
	d->r->status = 200;
	d->started = 1;
	orc_buf_release(&h);
}

static size_t download_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct download *d = userdata;
	size_t n = size * nmemb;

	if (!d->checked)
		download_check(d);
	if (d->status != 200) {
		orc_buf_add(&d->error, ptr, n);   /* an error body past 64 KiB is dropped */
		return n;
	}
	if (d->head_only || api_key_revoked(d->r->key_id))
		return 0;
	if (FCGX_PutStr(ptr, (int)n, d->r->fcgi->out) != (int)n) {
		d->client_gone = 1;
		return 0;
	}
	return n;
}

/*
 * Our 200 is out and the stream broke: make nginx see a FastCGI
 * connection that ended without END_REQUEST, so it cuts the client's
 * response short too instead of ending it as if complete. (The
 * descriptor stays open; FCGX_Finish_r closes it.)
 */
static void abort_response(struct api_req *r)
{
	if (r->fcgi->ipcFd >= 0)
		shutdown(r->fcgi->ipcFd, SHUT_RDWR);
}

static int raw_download(struct api_req *r, int is_archive)
{
	const char *agent_path, *path;
	struct agent_stream s;
	struct download d;
	struct api_agent a;
	CURLcode cc;
	int err;

	memset(&s, 0, sizeof(s));
	memset(&d, 0, sizeof(d));
	orc_buf_init(&d.error, ANSWER_MAX);
	if ((err = raw_target(&agent_path, &path, r, is_archive ? "/archive" : "/files", 0)) < 0 ||
	    (err = api_agent_get(&a, r)) < 0 || (err = agent_stream_init(&s, r, &a, agent_path)) < 0)
		goto done;
	d.r = r;
	d.h = s.h;
	d.content_type = is_archive ? "application/x-tar" : "application/octet-stream";
	d.head_only = !strcmp(r->method, "HEAD");
	curl_easy_setopt(s.h, CURLOPT_HTTPHEADER, s.hdrs);
	curl_easy_setopt(s.h, CURLOPT_BUFFERSIZE, 256L * 1024);
	curl_easy_setopt(s.h, CURLOPT_HEADERFUNCTION, download_header);
	curl_easy_setopt(s.h, CURLOPT_HEADERDATA, &d);
	curl_easy_setopt(s.h, CURLOPT_WRITEFUNCTION, download_write);
	curl_easy_setopt(s.h, CURLOPT_WRITEDATA, &d);
	cc = curl_easy_perform(s.h);
	if (!d.checked && cc == CURLE_OK)
		download_check(&d);            /* an empty body */
	if (d.started) {
		if (cc != CURLE_OK && !(d.head_only && cc == CURLE_WRITE_ERROR)) {
			if (!d.client_gone)
				orc_log(ORC_LOG_WARN, "download cut short", "sandbox_id", r->id, "path", path,
					"error", curl_easy_strerror(cc), NULL);
			abort_response(r);
		}
		err = 0;
		goto done;
	}
	if (d.status && d.status != 200)
		err = api_reply_agent_error(r, d.status, &d.error);
	else
		err = api_reply_error(r, cc == CURLE_OPERATION_TIMEDOUT ? ORC_ETIMEOUT : API_EAGENT,
				      "the download from the agent of sandbox %s failed: %s", r->id,
				      curl_easy_strerror(cc));
done:
	agent_stream_release(&s);
	orc_buf_release(&d.pass);
	orc_buf_release(&d.error);
	return err;
}

int api_files_raw_get(struct api_req *r)
{
	return raw_download(r, 0);
}

int api_archive_get(struct api_req *r)
{
	return raw_download(r, 1);
}
