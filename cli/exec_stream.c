/*
 * orchardctl exec, output live: the exec is sent with "stream": true and
 * the server answers NDJSON as the command writes (docs/openapi.yaml,
 * execCommand): {"type":"job"}, {"type":"stdout"|"stderr","data":base64}
 * lines copied to our stdout and stderr at once, then {"type":"exit",
 * "job":{...}}. A server that does not stream answers the job as one JSON
 * object; it is returned as it is, for the caller to print.
 */
#include <string.h>
#include <unistd.h>

#include "base64.h"
#include "err.h"
#include "io.h"
#include "json.h"
#include "transfer.h"

#define LINE_MAX_BYTES (1u << 20)

struct exec_stream {
	struct orc_buf line;
	json_object *job;         /* the final job, or a plain answer */
	int streamed;             /* NDJSON lines came */
	int failed;               /* writing our output failed */
};

static int output_line(struct exec_stream *x, int fd, json_object *line)
{
	struct orc_buf bytes = ORC_BUF_INIT;
	json_object *data;
	int err = 0;

	if (json_object_object_get_ex(line, "data", &data) && json_object_is_type(data, json_type_string) &&
	    orc_base64_decode(&bytes, json_object_get_string(data),
			      (size_t)json_object_get_string_len(data)) == 0 && bytes.len)
		err = orc_write_all(fd, bytes.ptr, bytes.len);
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
	if (!strcmp(type, "stdout") || !strcmp(type, "stderr")) {
		int err = output_line(x, !strcmp(type, "stdout") ? STDOUT_FILENO : STDERR_FILENO, o);
		json_object_put(o);
		return err;
	}
	if (!strcmp(type, "exit") && json_object_object_get_ex(o, "job", &v) &&
	    json_object_is_type(v, json_type_object)) {
		json_object_put(x->job);
		x->job = json_object_get(v);
	} else if (!strcmp(type, "error")) {
		cli_error("the server could not finish the answer: %s", cli_field_text(o, "error"));
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

int cli_exec_stream(json_object **job, int *streamed, const struct cli_config *cfg,
		    const struct cli_request *req, long stall_s)
{
	struct cli_response r = CLI_RESPONSE_INIT;
	struct exec_stream x;
	struct cli_stream s;
	int err;

	memset(&x, 0, sizeof(x));
	orc_buf_init(&x.line, LINE_MAX_BYTES);
	cli_stream_init(&s);
	s.out_fn = on_data;
	s.out_arg = &x;
	s.stall_s = stall_s;
	err = cli_http_stream(&r, cfg, req, &s);
	if (err == 0 && x.line.len)   /* a last line without its newline */
		take_line(&x, x.line.ptr, x.line.len);
	if (err < 0 && x.failed) {
		cli_error("writing the command's output failed");
	} else if (err < 0 && s.out_errno) {
		cli_error("the server's answer was not NDJSON lines of at most %u bytes", LINE_MAX_BYTES);
	} else if (err == 0 && (r.status < 200 || r.status > 299)) {
		cli_report_response(&r);
		err = ORC_ERROR;
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
