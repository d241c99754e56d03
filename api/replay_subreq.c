/*
 * Route handlers called in process (replay.h). A replay must create its
 * sandbox, run commands and write files exactly as a client's requests
 * would (quota, validation, lanes, events), so rather than a second path
 * into those internals it calls the handlers themselves with a request
 * built here: the caller's identity, the call's id, query and body, and a
 * FastCGI request whose streams are memory. The handler writes its answer
 * (status line, headers, body) into a buffer that is parsed back. nginx
 * never sees these; they are not logged as requests.
 *
 * fcgiapp's FCGX_Stream is a public struct with two callbacks (fill a
 * reader's buffer, empty a writer's), which is all a memory stream needs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "json.h"
#include "log.h"
#include "replay.h"
#include "strutil.h"
#include "xalloc.h"

#define SUBREQ_ANSWER_MAX (80u << 20)     /* a job with two 4 MiB outputs, escaped */
#define OUT_CHUNK 16384

struct subreq_io {
	FCGX_Request fcgi;
	FCGX_Stream in, out;
	unsigned char chunk[OUT_CHUNK];
	struct orc_buf answer;
	unsigned char *input;         /* a copy of a streamed body (the stream's buffer) */
	char *envp[2];
};

/* The writer's buffer is full or flushed: move it to the answer. */
static void out_empty(FCGX_Stream *s, int do_close)
{
	struct subreq_io *io = s->data;
	size_t n = (size_t)(s->wrNext - io->chunk);

	(void)do_close;
	if (n && orc_buf_add(&io->answer, io->chunk, n) < 0) {
		s->isClosed = 1;             /* FCGX_PutStr fails from now on */
		s->FCGI_errno = -1;
	}
	s->wrNext = io->chunk;
}

/* The reader has the whole body in its buffer: nothing more comes. */
static void in_fill(FCGX_Stream *s)
{
	s->isClosed = 1;
}

static void io_init(struct subreq_io *io, const struct api_subreq_call *call)
{
	memset(io, 0, sizeof(*io));
	orc_buf_init(&io->answer, SUBREQ_ANSWER_MAX);
	io->out.wrNext = io->chunk;
	io->out.stop = io->chunk + sizeof(io->chunk);
	io->out.rdNext = io->out.stop;
	io->out.emptyBuffProc = out_empty;
	io->out.data = io;
	io->in.isReader = 1;
	io->in.fillBuffProc = in_fill;
	io->in.data = io;
	if (call->stream && call->body) {
		io->input = xmalloc(call->body_len ? call->body_len : 1);
		memcpy(io->input, call->body, call->body_len);
		io->in.rdNext = io->in.stopUnget = io->input;
		io->in.stop = io->input + call->body_len;
		io->in.wrNext = io->in.stop;
		io->envp[0] = xasprintf("CONTENT_LENGTH=%zu", call->body_len);
	} else {
		io->in.isClosed = 1;
	}
	io->fcgi.in = &io->in;
	io->fcgi.out = &io->out;
	io->fcgi.err = &io->out;
	io->fcgi.envp = io->envp;
	io->fcgi.ipcFd = -1;
}

/* "Status: 200 OK\r\n...\r\n\r\nbody" into status and body. */
static int parse_answer(struct api_subreq *out, const struct orc_buf *a)
{
	const char *p = orc_buf_cstr(a), *end;
	int64_t status;
	char code[4];

	if (a->len < 12 || strncmp(p, "Status: ", 8) ||
	    !(end = strstr(p, "\r\n\r\n")))
		return ORC_ERROR;
	memcpy(code, p + 8, 3);
	code[3] = '\0';
	if (orc_parse_i64(&status, code, 100, 599) < 0)
		return ORC_ERROR;
	end += 4;
	out->status = (long)status;
	orc_buf_add(&out->body, end, a->len - (size_t)(end - p));
	if (out->body.len)
		orc_json_parse_object(&out->json, out->body.ptr, out->body.len, NULL, 0);
	return 0;
}

int api_subreq_run(struct api_subreq *out, struct api_req *parent, const struct api_subreq_call *call)
{
	struct subreq_io *io = xmalloc(sizeof(*io));
	struct api_req r;
	int err;

	io_init(io, call);
	memset(&r, 0, sizeof(r));
	r.fcgi = &io->fcgi;
	r.method = call->method;
	r.path = call->path;
	r.request_id = parent->request_id;
	r.tenant_id = parent->tenant_id;
	r.key_id = parent->key_id;
	r.role = parent->role;
	r.id = call->id;
	if (call->query_key) {
		r.query[0].key = xstrdup(call->query_key);
		r.query[0].value = xstrdup(call->query_value ? call->query_value : "");
		r.nquery = 1;
	}
	if (call->body && !call->stream)
		orc_buf_add(&r.body, call->body, call->body_len);
	call->handler(&r);
	if (!r.replied)
		api_reply_error(&r, ORC_ERROR, "handler sent no response");
	out_empty(&io->out, 1);
	api_req_release(&r);
	memset(out, 0, sizeof(*out));
	if ((err = io->out.isClosed ? ORC_ERROR : parse_answer(out, &io->answer)) < 0) {
		orc_log(ORC_LOG_ERROR, "replay: cannot read a route's answer", "method", call->method,
			"path", call->path, NULL);
		api_subreq_release(out);
	}
	free(io->envp[0]);
	free(io->input);
	orc_buf_release(&io->answer);
	free(io);
	return err;
}

void api_subreq_release(struct api_subreq *s)
{
	orc_buf_release(&s->body);
	json_object_put(s->json);
	s->json = NULL;
	s->status = 0;
}

int api_subreq_json(struct api_subreq *out, struct api_req *parent, const char *method,
		    const char *path, api_handler handler, const char *id, json_object *body)
{
	struct api_subreq_call call;

	memset(&call, 0, sizeof(call));
	call.method = method;
	call.path = path;
	call.handler = handler;
	call.id = id;
	if (body)
		call.body = orc_json_str(body, &call.body_len);
	return api_subreq_run(out, parent, &call);
}

int api_subreq_wait(struct api_subreq *out, struct api_req *parent, const char *id, int64_t timeout_s)
{
	struct api_subreq_call call;
	char timeout[24];

	snprintf(timeout, sizeof(timeout), "%lld", (long long)timeout_s);
	memset(&call, 0, sizeof(call));
	call.method = "GET";
	call.path = "/sandboxes/{id}/wait";
	call.handler = api_sandbox_wait;
	call.id = id;
	call.query_key = "timeout";
	call.query_value = timeout;
	return api_subreq_run(out, parent, &call);
}
