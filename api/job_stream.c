/*
 * Reading an agent's streaming exec answer (docs/agent-protocol.md,
 * "Streaming exec"): NDJSON lines {"type":"stdout"|"stderr","data":b64},
 * then {"type":"exit",...} or {"type":"error",...}; or the one result
 * object of an agent that does not stream. Each output line goes
 * on to the sink (the client) as it is, and its bytes are kept, up to the
 * cap, for the job row; the exit line becomes the job's result. A non-200
 * answer is one JSON object {"error": "..."}, read the same way.
 */
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "base64.h"
#include "err.h"
#include "json.h"
#include "strutil.h"

/* An output line holds at most 64 KiB of data, base64'd, plus its frame;
 * the answer of an agent that does not stream holds both streams
 * JSON-escaped: at most 6 bytes (\u00XX) for each byte kept. */
#define LINE_MAX_BYTES(cap) (12 * (size_t)(cap) + (1u << 20))

void api_job_stream_init(struct api_job_stream *s, const struct api_job_sink *sink, size_t cap,
			 const char *job_id)
{
	memset(s, 0, sizeof(*s));
	s->sink = sink;
	s->cap = cap;
	s->job_id = job_id;
	s->flushed_ms = orc_mono_ms();
	orc_buf_init(&s->line, LINE_MAX_BYTES(cap));
}

/* Keep bytes of stream, up to the cap. */
static void keep_bytes(struct api_job_stream *s, const char *stream, const char *bytes, size_t n)
{
	struct orc_buf *to = stream[3] == 'o' ? &s->out : &s->err;
	size_t room;

	if (to->len >= s->cap || !n)
		return;
	room = s->cap - to->len;
	orc_buf_add(to, bytes, n < room ? n : room);
}

/*
 * Store what was kept since the last time for attached readers
 * (job_output.c), both streams in one statement, once
 * API_JOB_OUTPUT_FLUSH_MS have passed since the start or the last time.
 * A job that ends sooner stores nothing here: its output goes into the
 * job row with its result (job_run.c). One statement and one commit per
 * interval, not per piece of output: every piece used to be a
 * transaction with its WAL flush and a NOTIFY (bench/README.md,
 * "CPU per exec").
 */
int api_job_stream_tick(void *arg)
{
	struct api_job_stream *s = arg;
	size_t on = s->out.len - s->flushed[0], en = s->err.len - s->flushed[1];

	if (!s->job_id || (!on && !en) || orc_mono_ms() - s->flushed_ms < API_JOB_OUTPUT_FLUSH_MS)
		return 0;
	api_job_output_append(s->job_id, s->flushed[0], on ? s->out.ptr + s->flushed[0] : NULL, on,
			      s->flushed[1], en ? s->err.ptr + s->flushed[1] : NULL, en);
	s->flushed[0] = s->out.len;
	s->flushed[1] = s->err.len;
	s->flushed_ms = orc_mono_ms();
	return 0;
}

static void keep_output(struct api_job_stream *s, const char *stream, const char *b64, size_t n)
{
	struct orc_buf bytes = ORC_BUF_INIT;

	if (orc_base64_decode(&bytes, b64, n) < 0)
		snprintf(s->error, sizeof(s->error), "the agent sent output that is not base64");
	else
		keep_bytes(s, stream, bytes.ptr, bytes.len);
	orc_buf_release(&bytes);
}

/* An agent that does not stream answers the result at once, its output
 * as JSON strings (docs/agent-protocol.md, "exec"). */
static void take_plain(struct api_job_stream *s, json_object *o)
{
	static const char *const streams[] = { "stdout", "stderr" };
	json_object *v;
	size_t i;

	for (i = 0; i < 2; i++)
		if (json_object_object_get_ex(o, streams[i], &v) && json_object_is_type(v, json_type_string))
			keep_bytes(s, streams[i], json_object_get_string(v), (size_t)json_object_get_string_len(v));
	s->exit = json_object_get(o);
}

static void take_line(struct api_job_stream *s, const char *text, size_t n)
{
	json_object *o = NULL, *v = NULL;
	const char *type = NULL;

	if (n == 0)
		return;
	if (orc_json_parse_object(&o, text, n, NULL, 0) < 0) {
		snprintf(s->error, sizeof(s->error), "the agent sent a malformed stream line");
		return;
	}
	if (json_object_object_get_ex(o, "type", &v) && json_object_is_type(v, json_type_string))
		type = json_object_get_string(v);
	if (type && (!strcmp(type, "stdout") || !strcmp(type, "stderr"))) {
		if (json_object_object_get_ex(o, "data", &v) && json_object_is_type(v, json_type_string))
			keep_output(s, type, json_object_get_string(v),
				    (size_t)json_object_get_string_len(v));
		if (!s->client_gone && s->sink && s->sink->line(s->sink->arg, text, n) < 0)
			s->client_gone = 1;   /* the job still runs to its end and is stored */
	} else if (type && !strcmp(type, "exit") && !s->exit) {
		s->exit = json_object_get(o);
	} else if (!type && !s->exit && json_object_object_get_ex(o, "exit_code", NULL)) {
		take_plain(s, o);
	} else if (!type || !strcmp(type, "error")) {
		/* {"type":"error","error":...} or a refusal {"error": ...} */
		if (json_object_object_get_ex(o, "error", &v) && json_object_is_type(v, json_type_string))
			snprintf(s->error, sizeof(s->error), "agent error: %.400s", json_object_get_string(v));
		else
			snprintf(s->error, sizeof(s->error), "the agent sent an unknown stream line");
	}
	json_object_put(o);
}

int api_job_stream_feed(void *arg, const char *data, size_t n)
{
	struct api_job_stream *s = arg;
	const char *nl;

	while (n) {
		if (!(nl = memchr(data, '\n', n))) {
			if (orc_buf_add(&s->line, data, n) < 0)
				goto toolong;
			return 0;
		}
		if (orc_buf_add(&s->line, data, (size_t)(nl - data)) < 0)
			goto toolong;
		take_line(s, s->line.ptr ? s->line.ptr : "", s->line.len);
		orc_buf_reset(&s->line);
		n -= (size_t)(nl - data) + 1;
		data = nl + 1;
	}
	return api_job_stream_tick(s);
toolong:
	snprintf(s->error, sizeof(s->error), "the agent sent a stream line over %zu bytes", LINE_MAX_BYTES(s->cap));
	return ORC_ETOOBIG;
}

json_object *api_job_stream_result(struct api_job_stream *s)
{
	json_object *o;

	if (s->line.len) {   /* a last line without its newline (an error answer) */
		take_line(s, s->line.ptr, s->line.len);
		orc_buf_reset(&s->line);
	}
	if (!s->exit) {
		if (!s->error[0])
			snprintf(s->error, sizeof(s->error), "the agent's stream ended without an exit line");
		return NULL;
	}
	o = s->exit;
	s->exit = NULL;
	json_object_object_add(o, "stdout", json_object_new_string_len(s->out.ptr ? s->out.ptr : "",
									 (int)s->out.len));
	json_object_object_add(o, "stderr", json_object_new_string_len(s->err.ptr ? s->err.ptr : "",
									 (int)s->err.len));
	return o;
}

void api_job_stream_release(struct api_job_stream *s)
{
	orc_buf_release(&s->line);
	orc_buf_release(&s->out);
	orc_buf_release(&s->err);
	json_object_put(s->exit);
	s->exit = NULL;
}
