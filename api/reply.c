/*
 * Responses. This file is the one place where an error code becomes an
 * HTTP status and a machine-readable "code" (STYLE.md): handlers return
 * orc_err / api_err values and never pick statuses themselves.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "err.h"
#include "json.h"
#include "log.h"

static const struct {
	int err;
	int status;
	const char *code;
	const char *headers;
} err_map[] = {
	{ ORC_ENOTFOUND,   404, "not_found", NULL },
	{ ORC_ECONFLICT,   409, "conflict", NULL },
	{ ORC_EINVALID,    422, "invalid", NULL },
	{ ORC_EUNAUTH,     401, "unauthorized", NULL },
	{ ORC_EFORBIDDEN,  403, "forbidden", NULL },
	{ ORC_EUNAVAIL,    503, "unavailable", "Retry-After: 5\r\n" },
	{ ORC_ETOOBIG,     413, "too_large", NULL },
	{ ORC_ETIMEOUT,    408, "timeout", NULL },
	{ ORC_EQUOTA,      429, "quota_exceeded", "Retry-After: 5\r\n" },
	{ API_EBADREQ,     400, "bad_request", NULL },
	{ API_EMETHOD,     405, "method_not_allowed", NULL },
	{ API_ENOTREADY,   409, "not_ready", NULL },
	{ API_EAGENT,      502, "agent_error", NULL },
	{ API_EPRECOND,    412, "precondition_failed", NULL },
	{ API_ERATE,       429, "rate_limited", NULL },
	{ ORC_ERROR,       500, "internal", NULL },
};

static int lookup(int err)
{
	size_t i;

	for (i = 0; i < sizeof(err_map) / sizeof(*err_map); i++)
		if (err_map[i].err == err)
			return (int)i;
	return (int)(sizeof(err_map) / sizeof(*err_map)) - 1; /* internal */
}

int api_err_status(int err)
{
	return err_map[lookup(err)].status;
}

void api_reply_ndjson_begin(struct api_req *r)
{
	static const char head[] =
		"Status: 200 OK\r\n"
		"Content-Type: application/x-ndjson\r\n"
		"Cache-Control: no-store\r\n"
		"X-Accel-Buffering: no\r\n";  /* nginx passes lines on as they come */

	r->replied = 1;
	r->status = 200;
	FCGX_PutStr(head, (int)sizeof(head) - 1, r->fcgi->out);
	FCGX_PutStr(r->headers.ptr ? r->headers.ptr : "", (int)r->headers.len, r->fcgi->out);
	FCGX_PutStr("\r\n", 2, r->fcgi->out);
}

int api_reply_ndjson_line(struct api_req *r, const char *s, size_t n, int flush)
{
	if (n > INT32_MAX - 1 || FCGX_PutStr(s, (int)n, r->fcgi->out) < 0 ||
	    FCGX_PutChar('\n', r->fcgi->out) < 0 || (flush && FCGX_FFlush(r->fcgi->out) < 0))
		return ORC_EUNAVAIL;
	return 0;
}

int api_reply_json(struct api_req *r, int status, json_object *o)
{
	size_t len = 0;
	const char *s = orc_json_str(o, &len);

	api_req_write(r, status, NULL, s, len);
	return 0;
}

static int reply_error_v(struct api_req *r, int err, const char *extra_headers,
			 const char *fmt, va_list ap)
{
	struct orc_buf hdr = ORC_BUF_INIT;
	json_object *o = json_object_new_object();
	char detail[1024];
	const char *body;
	size_t len = 0;
	int i = lookup(err);

	vsnprintf(detail, sizeof(detail), fmt, ap);
	/* detail may quote client input cut mid-character: keep it valid UTF-8 */
	json_object_object_add(o, "detail", orc_json_new_text(detail, strlen(detail)));
	json_object_object_add(o, "code", json_object_new_string(err_map[i].code));
	json_object_object_add(o, "request_id", json_object_new_string(r->request_id));
	body = orc_json_str(o, &len);
	/* the caller's headers replace the defaults (its own Retry-After) */
	if (err_map[i].headers && !extra_headers)
		orc_buf_adds(&hdr, err_map[i].headers);
	if (extra_headers)
		orc_buf_adds(&hdr, extra_headers);
	api_req_write(r, err_map[i].status, hdr.ptr, body, len);
	if (err_map[i].status >= 500)
		orc_log(ORC_LOG_WARN, "request failed", "method", r->method, "path", r->path,
			"code", err_map[i].code, "detail", detail, NULL);
	json_object_put(o);
	orc_buf_release(&hdr);
	return err < 0 ? err : ORC_ERROR;
}

int api_reply_error(struct api_req *r, int err, const char *fmt, ...)
{
	va_list ap;
	int ret;

	va_start(ap, fmt);
	ret = reply_error_v(r, err, NULL, fmt, ap);
	va_end(ap);
	return ret;
}

int api_reply_error_h(struct api_req *r, int err, const char *headers, const char *fmt, ...)
{
	va_list ap;
	int ret;

	va_start(ap, fmt);
	ret = reply_error_v(r, err, headers, fmt, ap);
	va_end(ap);
	return ret;
}
