#ifndef ORC_FUZZ_REQ_H
#define ORC_FUZZ_REQ_H
/*
 * For the api targets of query, path and body parsers (fuzz_api_files.c,
 * fuzz_api_git.c, fuzz_api_admin.c, fuzz_api_replay.c, fuzz_api_params.c,
 * fuzz_api_route.c). Include this first, then the handler files.
 *
 * It includes api/request.c, so a request is made by the real code:
 * parse_query (percent-decoding, bounds), api_req_query, api_req_json_body,
 * api_own_* and api_req_release. reply.c (which writes to FastCGI) is
 * replaced by api_reply_error(_h) below: they format the message (so ASan
 * and UBSan see a bad argument), require a negative error code and at
 * most one answer per request, and record the answer in r->replied,
 * r->status (the error code) and fuzz_reply_msg. Nothing here touches the
 * database: the handlers that would are dropped by --gc-sections.
 *
 * fuzz_req_init: the input's first line is the query string as nginx
 * passes it (still percent-encoded), the rest is the body.
 */
#include "../../api/request.c"

#include <stdarg.h>
#include <stdio.h>

#include "fuzz.h"

static char fuzz_reply_msg[1024];

static inline int fuzz_reply(struct api_req *r, int err, const char *fmt, va_list ap)
{
	FUZZ_ASSERT(err < 0);
	FUZZ_ASSERT(!r->replied);
	vsnprintf(fuzz_reply_msg, sizeof(fuzz_reply_msg), fmt, ap);
	FUZZ_ASSERT(fuzz_reply_msg[0]);
	r->replied = 1;
	r->status = err;
	return err;
}

int api_reply_error(struct api_req *r, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err = fuzz_reply(r, err, fmt, ap);
	va_end(ap);
	return err;
}

int api_reply_error_h(struct api_req *r, int err, const char *headers, const char *fmt, ...)
{
	va_list ap;

	FUZZ_ASSERT(headers && strlen(headers) >= 2 && !strcmp(headers + strlen(headers) - 2, "\r\n"));
	va_start(ap, fmt);
	err = fuzz_reply(r, err, fmt, ap);
	va_end(ap);
	return err;
}

/* A 4xx refusal of a parser: bad request, invalid, not found, too big. */
static inline int fuzz_refusal(int err)
{
	return err == API_EBADREQ || err == ORC_EINVALID || err == ORC_ENOTFOUND || err == ORC_ETOOBIG;
}

/* Forget the answer, to try another parser on the same request. */
static inline void fuzz_req_rearm(struct api_req *r)
{
	r->replied = 0;
	r->status = 0;
}

/*
 * A request of tenant 1 on sandbox "sb-1" from the input: the first line
 * through parse_query, the rest as the body. Returns parse_query's result
 * (a refusal is replied, and must be a 400).
 */
static inline int fuzz_req_init(struct api_req *r, const uint8_t *data, size_t size)
{
	const uint8_t *nl = memchr(data, '\n', size);
	size_t qlen = nl ? (size_t)(nl - data) : size;
	char *qs = fuzz_cstr(data, qlen);
	int err;

	memset(r, 0, sizeof(*r));
	r->method = "POST";
	r->path = "/fuzz";
	r->request_id = "";
	r->tenant_id = 1;
	r->role = "user";
	r->id = "sb-1";
	err = parse_query(r, qs);
	free(qs);
	if (err < 0) {
		FUZZ_ASSERT(r->replied && r->status == API_EBADREQ);
		return err;
	}
	FUZZ_ASSERT(!r->replied && r->nquery <= API_MAX_QUERY);
	orc_buf_init(&r->body, API_BODY_MAX);
	if (nl)
		FUZZ_ASSERT(orc_buf_add(&r->body, nl + 1, size - qlen - 1) == 0);
	return 0;
}

/* The body as a JSON object (owned by r), or NULL when api_req_json_body refused it (400). */
static inline json_object *fuzz_req_body(struct api_req *r)
{
	json_object *body = NULL;

	fuzz_req_rearm(r);
	if (api_req_json_body(&body, r) < 0) {
		FUZZ_ASSERT(r->replied && r->status == API_EBADREQ);
		return NULL;
	}
	FUZZ_ASSERT(body && json_object_is_type(body, json_type_object) && !r->replied);
	return body;
}

/* s is a JSON string of o's field key, without NUL bytes. */
static inline int fuzz_is_field(json_object *o, const char *key, const char *s)
{
	json_object *v = NULL;

	return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string) &&
	       json_object_get_string(v) == s && strlen(s) == (size_t)json_object_get_string_len(v);
}

/* The query string qs ("KEY=ESCAPED[&...]", as built for the agent) read
 * back by parse_query gives want for key: the agent reads what the api
 * meant. (Past QUERY_MAX only the agent reads it; not checked.) */
static inline void fuzz_query_round_trip(const char *qs, const char *key, const char *want)
{
	struct api_req again;

	if (strlen(qs) > QUERY_MAX)
		return;
	memset(&again, 0, sizeof(again));
	FUZZ_ASSERT(parse_query(&again, qs) == 0);
	FUZZ_ASSERT(api_req_query(&again, key) && !strcmp(api_req_query(&again, key), want));
	api_req_release(&again);
}
#endif
