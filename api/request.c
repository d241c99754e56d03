/*
 * One FastCGI request: its parameters, query, body and every allocation
 * made while handling it, released together when it ends (nginx's request
 * pool). Handlers never free what they hand to api_own_*.
 */
#include <poll.h>
#include <stdarg.h>
#include <string.h>
#include <stdlib.h>

#include "api.h"
#include "err.h"
#include "json.h"
#include "log.h"
#include "strutil.h"
#include "xalloc.h"

#define QUERY_MAX 8192

const char *api_req_param(struct api_req *r, const char *name)
{
	return FCGX_GetParam(name, r->fcgi->envp);
}

json_object *api_own_json(struct api_req *r, json_object *o)
{
	if (!o)
		return NULL;
	if (r->njson == API_MAX_OWNED)
		abort(); /* a handler bug, not input: every handler owns a few */
	r->owned_json[r->njson++] = o;
	return o;
}

PGresult *api_own_pg(struct api_req *r, PGresult *res)
{
	if (!res)
		return NULL;
	if (r->npg == API_MAX_OWNED)
		abort();
	r->owned_pg[r->npg++] = res;
	return res;
}

void *api_own_mem(struct api_req *r, void *p)
{
	if (!p)
		return NULL;
	if (r->nmem == API_MAX_OWNED)
		abort();
	r->owned_mem[r->nmem++] = p;
	return p;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Percent-decode s[0..n) ('+' is a space) into a fresh string; NULL when
 * the encoding is broken or decodes to a NUL byte. */
static char *url_decode(const char *s, size_t n)
{
	char *out = xmalloc(n + 1), *o = out;
	size_t i;

	for (i = 0; i < n; i++) {
		if (s[i] == '%') {
			int hi, lo;
			if (i + 2 >= n || (hi = hexval(s[i + 1])) < 0 || (lo = hexval(s[i + 2])) < 0)
				goto bad;
			if (!hi && !lo)
				goto bad;
			*o++ = (char)(hi * 16 + lo);
			i += 2;
		} else {
			*o++ = s[i] == '+' ? ' ' : s[i];
		}
	}
	*o = '\0';
	return out;
bad:
	free(out);
	return NULL;
}

static int parse_query(struct api_req *r, const char *qs)
{
	const char *p = qs, *end, *eq;

	if (!qs || !*qs)
		return 0;
	if (strlen(qs) > QUERY_MAX)
		return api_reply_error(r, API_EBADREQ, "query string is longer than %d bytes", QUERY_MAX);
	while (*p) {
		struct api_query_param *q;
		end = strchr(p, '&');
		if (!end)
			end = p + strlen(p);
		if (end == p) {
			p++;
			continue;
		}
		if (r->nquery == API_MAX_QUERY)
			return api_reply_error(r, API_EBADREQ, "too many query parameters (at most %d)",
					       API_MAX_QUERY);
		eq = memchr(p, '=', (size_t)(end - p));
		q = &r->query[r->nquery];
		q->key = url_decode(p, (size_t)((eq ? eq : end) - p));
		q->value = eq ? url_decode(eq + 1, (size_t)(end - eq - 1)) : xstrdup("");
		if (!q->key || !q->value) {
			free(q->key);
			free(q->value);
			q->key = q->value = NULL;
			return api_reply_error(r, API_EBADREQ, "malformed percent-encoding in query string");
		}
		r->nquery++;
		p = *end ? end + 1 : end;
	}
	return 0;
}

const char *api_req_query(struct api_req *r, const char *key)
{
	int i;

	for (i = r->nquery - 1; i >= 0; i--)
		if (!strcmp(r->query[i].key, key))
			return r->query[i].value;
	return NULL;
}

int api_req_query_bool(int *out, struct api_req *r, const char *key)
{
	const char *v = api_req_query(r, key);

	if (v && (!strcmp(v, "1") || !strcmp(v, "true")))
		*out = 1;
	else if (v && *v && strcmp(v, "0") && strcmp(v, "false"))
		return api_reply_error(r, ORC_EINVALID, "query parameter '%s' must be true or false", key);
	else
		*out = 0;
	return 0;
}

static int read_body(struct api_req *r)
{
	const char *cl = api_req_param(r, "CONTENT_LENGTH");
	size_t got = 0, max = api_route_body_max(r->method, r->path);
	int64_t len = 0;
	char chunk[16384];

	if (!cl || !*cl)
		return 0;
	if (orc_parse_i64(&len, cl, 0, INT64_MAX) < 0)
		return api_reply_error(r, API_EBADREQ, "invalid Content-Length");
	if (len > (int64_t)max)
		return api_reply_error(r, ORC_ETOOBIG, "request body is larger than %zu bytes%s", max,
				       max < API_FILE_BODY_MAX ? "" : " (files past 64 MiB: PUT /files/raw)");
	orc_buf_init(&r->body, max);
	while (got < (size_t)len) {
		size_t want = (size_t)len - got;
		int n = FCGX_GetStr(chunk, (int)(want < sizeof(chunk) ? want : sizeof(chunk)), r->fcgi->in);
		if (n <= 0)
			return api_reply_error(r, API_EBADREQ, "request body is shorter than Content-Length");
		if (orc_buf_add(&r->body, chunk, (size_t)n) < 0)
			return api_reply_error(r, ORC_ETOOBIG, "request body is too large");
		got += (size_t)n;
	}
	return 0;
}

/* The path without query string; "/v1" and "/v1/..." lose the prefix and a
 * trailing slash is dropped, so "/v1/sandboxes/" routes like "/sandboxes". */
static void set_path(struct api_req *r)
{
	const char *uri = api_req_param(r, "DOCUMENT_URI");
	char *p, *q;
	size_t n;

	if (!uri || !*uri)
		uri = api_req_param(r, "REQUEST_URI");
	if (!uri || !*uri)
		uri = api_req_param(r, "SCRIPT_NAME");
	if (!uri || !*uri)
		uri = "/";
	p = xstrdup(uri);
	if ((q = strchr(p, '?')))
		*q = '\0';
	if (!strncmp(p, "/v1", 3) && (p[3] == '/' || p[3] == '\0'))
		memmove(p, p + 3, strlen(p + 3) + 1);
	n = strlen(p);
	if (n == 0) {
		free(p);
		p = xstrdup("/");
	} else if (n > 1 && p[n - 1] == '/') {
		p[n - 1] = '\0';
	}
	r->path_copy = p;
	r->path = p;
}

int api_req_init(struct api_req *r, FCGX_Request *fcgi)
{
	const char *v;
	int err;

	memset(r, 0, sizeof(*r));
	r->fcgi = fcgi;
	r->method = api_req_param(r, "REQUEST_METHOD");
	if (!r->method)
		r->method = "GET";
	v = api_req_param(r, "REQUEST_ID");
	if (!v || !orc_request_id_valid(v))
		v = api_req_param(r, "HTTP_X_REQUEST_ID");
	r->request_id = v && orc_request_id_valid(v) ? v : "";
	orc_trace_begin(&r->trace, api_req_param(r, "HTTP_TRACEPARENT"));
	orc_log_context_set(r->request_id, &r->trace);
	set_path(r);

	/* Only nginx's auth_request_set params are trusted, never headers. */
	v = api_req_param(r, "ORCHARD_TENANT");
	if (v && *v && orc_parse_i64(&r->tenant_id, v, 1, INT64_MAX) < 0)
		r->tenant_id = 0;
	v = api_req_param(r, "ORCHARD_KEY");
	r->key_id = v && *v ? v : NULL;
	v = api_req_param(r, "ORCHARD_ROLE");
	r->role = v && *v ? v : "user";

	if ((err = parse_query(r, api_req_param(r, "QUERY_STRING"))) < 0)
		return err;
	/* nginx's auth subrequest carries the client's Content-Length but no
	 * body (fastcgi_pass_request_body off); never wait for one. */
	if (!strcmp(r->path, "/_auth") || !strcmp(r->path, "/_auth_agent"))
		return 0;
	/* Raw uploads are read by their handler as a stream (files_raw.c). */
	if (api_route_streams(r->method, r->path))
		return 0;
	return read_body(r);
}

/*
 * Read what the handler left of the request's stdin (a GET's empty stdin
 * record, a body refused before it was read), so that the connection can
 * carry nginx's next request (serve.c), or be closed at once when nginx
 * did not ask to keep it: libfcgi would otherwise take the rest for the
 * start of the next request, see a protocol error and drop the connection.
 * A buffered body is in nginx's hands whole (client_max_body_size), so this
 * never waits on a client; of a streamed upload (files/raw, archive) at
 * most STREAM_DRAIN_MAX is read: past that the rest is left to libfcgi's
 * lingering close, and nginx, still sending it, never keeps that
 * connection.
 */
#define STREAM_DRAIN_MAX (1024 * 1024)

int api_req_end_input(struct api_req *r)
{
	FCGX_Request *f = r->fcgi;
	size_t left = api_route_streams(r->method, r->path) ? STREAM_DRAIN_MAX : SIZE_MAX;
	char scratch[16384];
	int n;

	if (!f || f->ipcFd < 0 || !f->in || FCGX_GetError(f->in) != 0)
		return 0;
	while (FCGX_HasSeenEOF(f->in) != EOF) {
		if ((n = FCGX_GetStr(scratch, sizeof(scratch), f->in)) <= 0)
			break;
		if ((size_t)n >= left)
			goto unread;
		left -= (size_t)n;
	}
	if (FCGX_GetError(f->in) == 0 && FCGX_HasSeenEOF(f->in) == EOF)
		return 1;
unread:
	f->keepConnection = 0;
	return 0;
}

int api_req_client_gone(struct api_req *r)
{
	struct pollfd p = { .events = POLLRDHUP };

	if (!r->fcgi || r->fcgi->ipcFd < 0)
		return 0;                /* an in-process subrequest (replay_subreq.c) */
	p.fd = r->fcgi->ipcFd;
	if (poll(&p, 1, 0) <= 0)
		return 0;
	return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

int api_req_json_body(json_object **out, struct api_req *r)
{
	json_object *o = NULL;

	if (orc_json_parse_object(&o, orc_buf_cstr(&r->body), r->body.len, API_ERRBUF(r)) < 0)
		return api_reply_failed(r, API_EBADREQ);
	*out = api_own_json(r, o);
	return 0;
}

int api_req_json_body_opt(json_object **out, struct api_req *r)
{
	if (r->body.len == 0) {
		*out = api_own_json(r, json_object_new_object());
		return 0;
	}
	return api_req_json_body(out, r);
}

static const char *reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 201: return "Created";
	case 202: return "Accepted";
	case 204: return "No Content";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 409: return "Conflict";
	case 413: return "Payload Too Large";
	case 422: return "Unprocessable Entity";
	case 429: return "Too Many Requests";
	case 500: return "Internal Server Error";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	default: return "Unknown";
	}
}

void api_req_write(struct api_req *r, int status, const char *extra_headers,
		   const char *body, size_t len)
{
	struct orc_buf h = ORC_BUF_INIT;

	if (r->replied)
		return;
	r->replied = 1;
	r->status = status;
	orc_buf_addf(&h, "Status: %d %s\r\n", status, reason(status));
	if (status != 204)
		orc_buf_addf(&h, "Content-Type: application/json\r\nContent-Length: %zu\r\n", len);
	orc_buf_adds(&h, extra_headers ? extra_headers : "");
	orc_buf_add(&h, r->headers.ptr, r->headers.len);
	orc_buf_adds(&h, "\r\n");
	FCGX_PutStr(h.ptr, (int)h.len, r->fcgi->out);
	if (status != 204 && len)
		FCGX_PutStr(body, (int)len, r->fcgi->out);
	orc_buf_release(&h);
}

void api_req_add_header(struct api_req *r, const char *name, const char *fmt, ...)
{
	va_list ap;

	orc_buf_addf(&r->headers, "%s: ", name);
	va_start(ap, fmt);
	orc_buf_vaddf(&r->headers, fmt, ap);
	va_end(ap);
	orc_buf_adds(&r->headers, "\r\n");
}

void api_req_release(struct api_req *r)
{
	int i;

	orc_buf_release(&r->headers);
	for (i = 0; i < r->njson; i++)
		json_object_put(r->owned_json[i]);
	for (i = 0; i < r->npg; i++)
		PQclear(r->owned_pg[i]);
	for (i = 0; i < r->nmem; i++)
		free(r->owned_mem[i]);
	for (i = 0; i < r->nquery; i++) {
		free(r->query[i].key);
		free(r->query[i].value);
	}
	orc_buf_release(&r->body);
	free(r->path_copy);
	r->njson = r->npg = r->nmem = r->nquery = 0;
	r->path_copy = NULL;
}
