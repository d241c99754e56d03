/*
 * Jobs, as exec and the jobs commands see them: waiting on one, writing its
 * output to our streams, its exit status as ours, and a table of several.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "err.h"
#include "strutil.h"
#include "xalloc.h"

/* Each server-side wait; the client loops until done or its own timeout. */
#define JOB_WAIT_S 60
#define COMMAND_TEXT_MAX 60

int cli_job_is_done(json_object *job)
{
	const char *st = cli_field_text(job, "status");

	return strcmp(st, "queued") && strcmp(st, "running");
}

int cli_job_wait(json_object **job, const struct cli_config *cfg, long timeout_s)
{
	struct cli_request req = { "GET", NULL, NULL, NULL, 0, NULL, NULL };
	int64_t deadline = orc_mono_ms() + (int64_t)timeout_s * 1000, left;
	const char *id = cli_field_text(*job, "job_id");
	char suffix[48], *jid, *path = NULL;
	json_object *next;
	int err = 0;

	if (!strcmp(id, "-")) {
		cli_error("the server did not finish the command and gave no job_id to wait on");
		return ORC_ERROR;
	}
	jid = xstrdup(id);
	while (!cli_job_is_done(*job)) {
		left = JOB_WAIT_S;
		if (timeout_s > 0) {
			left = (deadline - orc_mono_ms() + 999) / 1000;
			if (left <= 0) {
				cli_error("job %s is still %s after %lds", jid, cli_field_text(*job, "status"),
					  timeout_s);
				err = ORC_ETIMEOUT;
				break;
			}
			if (left > JOB_WAIT_S)
				left = JOB_WAIT_S;
		}
		snprintf(suffix, sizeof(suffix), "/wait?timeout=%lld", (long long)left);
		free(path);
		path = cli_path("/v1/jobs", jid, suffix);
		req.path = path;
		req.timeout_s = (long)left + 30;
		next = NULL;
		if ((err = cli_call(&next, cfg, &req)) < 0)
			break;
		if (!json_object_is_type(next, json_type_object)) {
			json_object_put(next);
			cli_error("unexpected response while waiting for job %s", jid);
			err = ORC_ERROR;
			break;
		}
		json_object_put(*job);
		*job = next;
	}
	free(path);
	free(jid);
	return err;
}

/* Write a JSON string field's bytes (embedded NULs included) to f. */
static int write_stream(FILE *f, json_object *job, const char *key)
{
	json_object *v;
	size_t n;

	if (!json_object_object_get_ex(job, key, &v) || !json_object_is_type(v, json_type_string))
		return 0;
	n = (size_t)json_object_get_string_len(v);
	if (n && fwrite(json_object_get_string(v), 1, n, f) != n)
		return ORC_ERROR;
	return fflush(f) ? ORC_ERROR : 0;
}

static void warn_truncated(json_object *job, const char *stream)
{
	char flag[32], count[32];
	json_object *v;

	snprintf(flag, sizeof(flag), "%s_truncated", stream);
	snprintf(count, sizeof(count), "%s_bytes", stream);
	if (json_object_object_get_ex(job, flag, &v) && json_object_get_boolean(v))
		cli_error("%s was truncated by the server (%s bytes produced)", stream,
			  cli_field_text(job, count));
}

int cli_job_write_output(json_object *job, int streamed)
{
	if (!streamed && (write_stream(stdout, job, "stdout") < 0 || write_stream(stderr, job, "stderr") < 0)) {
		cli_error("writing the command's output failed");
		return ORC_ERROR;
	}
	warn_truncated(job, "stdout");
	warn_truncated(job, "stderr");
	return 0;
}

int cli_job_exit_status(json_object *job, long timeout_s)
{
	json_object *v;
	int64_t code;

	if (json_object_object_get_ex(job, "timed_out", &v) && json_object_get_boolean(v)) {
		if (json_object_object_get_ex(job, "timeout_seconds", &v) && json_object_is_type(v, json_type_int))
			timeout_s = (long)json_object_get_int64(v);
		cli_error("command timed out after %lds", timeout_s);
		return CLI_EXIT_TIMED_OUT;
	}
	if (json_object_object_get_ex(job, "exit_code", &v) && json_object_is_type(v, json_type_int)) {
		code = json_object_get_int64(v);
		return code >= 0 && code <= 255 ? (int)code : CLI_FAIL;
	}
	cli_error("the command did not run: %s",
		  strcmp(cli_field_text(job, "error"), "-") ? cli_field_text(job, "error") :
		  cli_field_text(job, "status"));
	return CLI_FAIL;
}

/* A command (string or argv array) on one line, shortened. */
static void command_text(char *out, size_t outlen, json_object *job)
{
	struct orc_buf b = ORC_BUF_INIT;
	json_object *cmd;
	size_t i, n;

	if (!json_object_object_get_ex(job, "command", &cmd) || !cmd) {
		snprintf(out, outlen, "-");
		return;
	}
	if (json_object_is_type(cmd, json_type_array)) {
		n = json_object_array_length(cmd);
		for (i = 0; i < n; i++)
			orc_buf_addf(&b, "%s%s", i ? " " : "",
				     json_object_get_string(json_object_array_get_idx(cmd, i)));
	} else {
		orc_buf_adds(&b, json_object_get_string(cmd));
	}
	if (b.len > COMMAND_TEXT_MAX && outlen > COMMAND_TEXT_MAX + 4)
		snprintf(out, outlen, "%.*s...", COMMAND_TEXT_MAX, orc_buf_cstr(&b));
	else
		snprintf(out, outlen, "%s", b.len ? orc_buf_cstr(&b) : "-");
	orc_buf_release(&b);
}

static int by_created(const void *a, const void *b)
{
	json_object *x = *(json_object *const *)a, *y = *(json_object *const *)b, *v;
	double tx = 0, ty = 0;

	if (json_object_object_get_ex(x, "created_at", &v))
		tx = json_object_get_double(v);
	if (json_object_object_get_ex(y, "created_at", &v))
		ty = json_object_get_double(v);
	return (tx > ty) - (tx < ty);
}

void cli_job_table(json_object *jobs, size_t last)
{
	static const char *const headers[] = { "JOB ID", "STATUS", "EXIT", "AGE", "COMMAND" };
	size_t i, n = json_object_array_length(jobs), from;
	char age[32], cmd[COMMAND_TEXT_MAX + 8];
	json_object **sorted, *created;
	struct cli_table t;

	sorted = xcalloc(n ? n : 1, sizeof(*sorted));
	for (i = 0; i < n; i++)
		sorted[i] = json_object_array_get_idx(jobs, i);
	qsort(sorted, n, sizeof(*sorted), by_created);
	from = last && n > last ? n - last : 0;
	cli_table_init(&t, 5, headers);
	for (i = from; i < n; i++) {
		const char *row[5];

		created = NULL;
		if (json_object_is_type(sorted[i], json_type_object))
			json_object_object_get_ex(sorted[i], "created_at", &created);
		cli_format_age(age, sizeof(age), created);
		command_text(cmd, sizeof(cmd), sorted[i]);
		row[0] = cli_field_text(sorted[i], "job_id");
		row[1] = cli_field_text(sorted[i], "status");
		row[2] = cli_field_text(sorted[i], "exit_code");
		row[3] = age;
		row[4] = cmd;
		cli_table_add(&t, row);
	}
	cli_table_print(&t);
	cli_table_release(&t);
	free(sorted);
}
