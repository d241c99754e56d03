/*
 * orchardctl exec and jobs logs -f, output live: the exec is sent with
 * "stream": true and the server answers NDJSON as the command writes
 * (docs/openapi.yaml, execCommand): {"type":"job"},
 * {"type":"stdout"|"stderr","data":base64} lines copied to our stdout and
 * stderr at once, then {"type":"exit","job":{...}}. A server that does not
 * stream answers the job as one JSON object; it is returned as it is, for
 * the caller to print.
 *
 * An answer that ends without a finished job (a dropped connection, an api
 * restart, a wait that gave up) goes on with GET /v1/jobs/{id}/stream
 * (streamJob) from the bytes of each stream written so far, reconnecting
 * until the job has ended: nothing is missed and nothing written twice.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base64.h"
#include "err.h"
#include "io.h"
#include "json.h"
#include "transfer.h"

#define LINE_MAX_BYTES (1u << 20)
/* Reconnecting gives up after this many failures in a row without a byte. */
#define FOLLOW_ATTEMPTS 40
#define FOLLOW_PAUSE_MAX_S 5
/* The server sends a line at least every 15 s while the job runs. */
#define FOLLOW_STALL_S 60

struct exec_stream {
	struct orc_buf line;
	json_object *job;         /* the final job, or a plain answer */
	char job_id[128];         /* from the {"type":"job"} line */
	int64_t have[2];          /* bytes of stdout, stderr written */
	int progress;             /* output came in this answer */
	int streamed;             /* NDJSON lines came */
	int failed;               /* writing our output failed */
};

/* Write the bytes of line past what we have of its stream: a line's
 * "offset" (the job stream's) says where its data starts. */
static int output_line(struct exec_stream *x, int i, json_object *line)
{
	struct orc_buf bytes = ORC_BUF_INIT;
	json_object *data, *v;
	int64_t off = x->have[i], skip;
	int err = 0;

	if (json_object_object_get_ex(line, "offset", &v) && json_object_is_type(v, json_type_int))
		off = json_object_get_int64(v);
	if (json_object_object_get_ex(line, "data", &data) && json_object_is_type(data, json_type_string) &&
	    orc_base64_decode(&bytes, json_object_get_string(data),
			      (size_t)json_object_get_string_len(data)) == 0 &&
	    off <= x->have[i] && off + (int64_t)bytes.len > x->have[i]) {
		skip = x->have[i] - off;
		err = orc_write_all(i ? STDERR_FILENO : STDOUT_FILENO, bytes.ptr + skip, bytes.len - (size_t)skip);
		x->have[i] = off + (int64_t)bytes.len;
		x->progress = 1;
	}
	orc_buf_release(&bytes);
	if (err < 0)
		x->failed = 1;
	return err;
}

static int take_line(struct exec_stream *x, const char *text, size_t n)
{
	json_object *o = NULL, *v;
	const char *type;

	if (n == 0)
		return 0;
	if (orc_json_parse_object(&o, text, n, NULL, 0) < 0)
		return 0;   /* not ours to judge: the final job decides */
	type = cli_field_text(o, "type");
	if (!strcmp(type, "-") && json_object_object_get_ex(o, "job_id", NULL)) {
		json_object_put(x->job);           /* a server that does not stream */
		x->job = o;
		return 0;
	}
	x->streamed = 1;
	if (!strcmp(type, "job") && !x->job_id[0])
		snprintf(x->job_id, sizeof(x->job_id), "%s", cli_field_text(o, "job_id"));
	if (!strcmp(type, "stdout") || !strcmp(type, "stderr")) {
		int err = output_line(x, !strcmp(type, "stderr"), o);
		json_object_put(o);
		return err;
	}
	if (!strcmp(type, "exit") && json_object_object_get_ex(o, "job", &v) &&
	    json_object_is_type(v, json_type_object)) {
		json_object_put(x->job);
		x->job = json_object_get(v);
	} else if (!strcmp(type, "error")) {
		x->progress = 1;   /* a new answer may go on */
	}
	json_object_put(o);
	return 0;
}

static int on_data(void *arg, const char *data, size_t n)
{
	struct exec_stream *x = arg;
	const char *nl;

	while (n) {
		if (!(nl = memchr(data, '\n', n)))
			return orc_buf_add(&x->line, data, n);
		if (orc_buf_add(&x->line, data, (size_t)(nl - data)) < 0)
			return ORC_ETOOBIG;
		if (take_line(x, x->line.ptr ? x->line.ptr : "", x->line.len) < 0)
			return ORC_ERROR;
		orc_buf_reset(&x->line);
		n -= (size_t)(nl - data) + 1;
		data = nl + 1;
	}
	return 0;
}

/* One request; its lines go through x. */
static int stream_once(struct cli_response *r, struct exec_stream *x, const struct cli_config *cfg,
		       const struct cli_request *req, long stall_s)
{
	struct cli_stream s;
	int err;

	cli_stream_init(&s);
	s.out_fn = on_data;
	s.out_arg = x;
	s.stall_s = stall_s;
	orc_buf_reset(&x->line);
	err = cli_http_stream(r, cfg, req, &s);
	if (err == 0 && x->line.len)   /* a last line without its newline */
		take_line(x, x->line.ptr, x->line.len);
	if (err < 0 && x->failed)
		cli_error("writing the command's output failed");
	else if (err < 0 && s.out_errno)
		cli_error("the server's answer was not NDJSON lines of at most %u bytes", LINE_MAX_BYTES);
	return err;
}

static int job_done(json_object *job)
{
	return job && json_object_object_get_ex(job, "status", NULL) && cli_job_is_done(job);
}

/* GET /v1/jobs/{id}/stream from x->have until the job's exit line. */
static int follow(struct exec_stream *x, const struct cli_config *cfg)
{
	struct cli_request req = { "GET", NULL, NULL, NULL, -1, NULL, NULL };
	struct cli_response r = CLI_RESPONSE_INIT;
	struct orc_buf path = ORC_BUF_INIT;
	char *base = cli_path("/v1/jobs", x->job_id, "/stream"), num[24];
	int failures = 0, err;

	for (;;) {
		orc_buf_reset(&path);
		orc_buf_add(&path, base, strlen(base));
		snprintf(num, sizeof(num), "%" PRId64, x->have[0]);
		cli_path_add_query(&path, "stdout_offset", num);
		snprintf(num, sizeof(num), "%" PRId64, x->have[1]);
		cli_path_add_query(&path, "stderr_offset", num);
		req.path = path.ptr;
		x->progress = 0;
		cli_response_release(&r);
		err = stream_once(&r, x, cfg, &req, FOLLOW_STALL_S);
		if (x->failed)
			break;
		if (err == 0 && r.status >= 400 && r.status != 502 && r.status != 503 && r.status != 504) {
			cli_report_response(&r);
			err = ORC_ERROR;
			break;
		}
		if (err == 0 && job_done(x->job))
			break;
		/* the connection dropped or the api restarted: go on from here */
		failures = x->progress ? 0 : failures + 1;
		if (failures >= FOLLOW_ATTEMPTS) {
			cli_error("lost job %s's output stream %d times in a row; giving up", x->job_id, failures);
			err = ORC_ERROR;
			break;
		}
		sleep(failures < FOLLOW_PAUSE_MAX_S ? (unsigned)failures : FOLLOW_PAUSE_MAX_S);
	}
	cli_response_release(&r);
	orc_buf_release(&path);
	free(base);
	return err < 0 ? ORC_ERROR : 0;
}

int cli_job_follow(json_object **job, const struct cli_config *cfg, const char *job_id)
{
	struct exec_stream x;
	int err;

	memset(&x, 0, sizeof(x));
	orc_buf_init(&x.line, LINE_MAX_BYTES);
	snprintf(x.job_id, sizeof(x.job_id), "%s", job_id);
	if ((err = follow(&x, cfg)) == 0) {
		*job = x.job;
		x.job = NULL;
	}
	json_object_put(x.job);
	orc_buf_release(&x.line);
	return err;
}

int cli_exec_stream(json_object **job, int *streamed, const struct cli_config *cfg,
		    const struct cli_request *req, long stall_s)
{
	struct cli_response r = CLI_RESPONSE_INIT;
	struct exec_stream x;
	int err;

	memset(&x, 0, sizeof(x));
	orc_buf_init(&x.line, LINE_MAX_BYTES);
	err = stream_once(&r, &x, cfg, req, stall_s);
	if (err == 0 && (r.status < 200 || r.status > 299)) {
		cli_report_response(&r);
		err = ORC_ERROR;
	} else if (x.job_id[0] && !x.failed && !job_done(x.job)) {
		/* accepted, but the answer ended before the job did */
		err = follow(&x, cfg);
	} else if (err == 0 && !x.job) {
		cli_error("unexpected response to exec: no job");
		err = ORC_ERROR;
	}
	if (err == 0) {
		*job = x.job;
		*streamed = x.streamed;
		x.job = NULL;
	} else if (err > 0) {
		err = ORC_ERROR;
	}
	json_object_put(x.job);
	orc_buf_release(&x.line);
	cli_response_release(&r);
	return err;
}
