#include "server.h"

#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <microhttpd.h>

#include "cancel.h"
#include "command.h"
#include "err.h"
#include "exec.h"
#include "json.h"
#include "log.h"
#include "stream_exec.h"
#include "xalloc.h"

/* POST /exec: the JSON edge of the process runner (docs/agent-protocol.md). */

#define DEFAULT_TIMEOUT_S 300.0
#define MAX_TIMEOUT_S (7.0 * 86400)
#define DEFAULT_MAX_OUTPUT (8 * 1024 * 1024)
#define MAX_MAX_OUTPUT (64 * 1024 * 1024)
#define MAX_ARGS 65536
#define MAX_ENV 4096
#define TRIM_AFTER (256 * 1024)        /* output bytes */

struct exec_request {
	const char *cmd;            /* string command, or NULL */
	size_t cmd_len;
	const char **args;          /* array command */
	size_t nargs;
	const char *cwd;
	const char *cwd_fallback;   /* run here when cwd is not a directory */
	const char **env_keys;
	const char **env_vals;
	size_t nenv;
	const char *stdin_data;
	size_t stdin_len;
	double timeout_s;
	int login_shell;
	size_t max_output;
	const char *job_id;
	int stream;
};

static int fail(char *msg, size_t msglen, const char *fmt, const char *field)
{
	snprintf(msg, msglen, fmt, field);
	return ORC_EINVALID;
}

/* A string without NUL bytes (they cannot reach argv, env or a path). */
static int c_string(const char **out, json_object *v)
{
	const char *s = json_object_get_string(v);

	if (strlen(s) != (size_t)json_object_get_string_len(v))
		return ORC_EINVALID;
	*out = s;
	return 0;
}

static int parse_command(struct exec_request *r, json_object *root, char *msg, size_t msglen)
{
	json_object *v = NULL, *item;
	size_t i, n;

	if (!json_object_object_get_ex(root, "command", &v) || !v)
		return fail(msg, msglen, "field '%s' is required", "command");
	if (json_object_is_type(v, json_type_string)) {
		if (c_string(&r->cmd, v) < 0)
			return fail(msg, msglen, "field '%s' must not contain NUL bytes", "command");
		r->cmd_len = (size_t)json_object_get_string_len(v);
		return 0;
	}
	if (!json_object_is_type(v, json_type_array))
		return fail(msg, msglen, "field '%s' must be a string or an array of strings", "command");
	n = json_object_array_length(v);
	if (n == 0 || n > MAX_ARGS)
		return fail(msg, msglen, "field '%s' must be a non-empty array (at most 65536 items)", "command");
	r->args = xcalloc(n, sizeof(*r->args));
	r->nargs = n;
	for (i = 0; i < n; i++) {
		item = json_object_array_get_idx(v, i);
		if (!json_object_is_type(item, json_type_string) || c_string(&r->args[i], item) < 0) {
			snprintf(msg, msglen, "field 'command' item %zu must be a string without NUL bytes", i);
			return ORC_EINVALID;
		}
	}
	return 0;
}

static int parse_env(struct exec_request *r, json_object *root, char *msg, size_t msglen)
{
	json_object *env = NULL;
	size_t n, i = 0;
	int err;

	if ((err = orc_json_get_object(root, "env", &env, msg, msglen)) != 0)
		return err < 0 ? err : 0;
	n = (size_t)json_object_object_length(env);
	if (n > MAX_ENV)
		return fail(msg, msglen, "field '%s' has too many variables (at most 4096)", "env");
	r->env_keys = xcalloc(n + 1, sizeof(*r->env_keys));
	r->env_vals = xcalloc(n + 1, sizeof(*r->env_vals));
	json_object_object_foreach(env, key, val) {
		if (!*key || strchr(key, '='))
			return fail(msg, msglen, "field '%s' has a variable name that is empty or contains '='", "env");
		if (!val || !json_object_is_type(val, json_type_string) || c_string(&r->env_vals[i], val) < 0)
			return fail(msg, msglen, "field '%s' must map names to strings without NUL bytes", "env");
		r->env_keys[i++] = key;
	}
	r->nenv = i;
	return 0;
}

static int parse_request(struct exec_request *r, json_object *root, char *msg, size_t msglen)
{
	json_object *v = NULL;
	int64_t max_output = DEFAULT_MAX_OUTPUT;
	int err;

	r->timeout_s = DEFAULT_TIMEOUT_S;
	if ((err = parse_command(r, root, msg, msglen)) < 0 ||
	    (err = parse_env(r, root, msg, msglen)) < 0)
		return err;
	if ((err = orc_json_get_str(root, "cwd", &r->cwd, msg, msglen)) < 0)
		return err;
	if (r->cwd && (!*r->cwd || (json_object_object_get_ex(root, "cwd", &v) && c_string(&r->cwd, v) < 0)))
		return fail(msg, msglen, "field '%s' must be a non-empty path without NUL bytes", "cwd");
	if ((err = orc_json_get_str(root, "cwd_fallback", &r->cwd_fallback, msg, msglen)) < 0)
		return err;
	if (r->cwd_fallback && (!*r->cwd_fallback || (json_object_object_get_ex(root, "cwd_fallback", &v) &&
						       c_string(&r->cwd_fallback, v) < 0)))
		return fail(msg, msglen, "field '%s' must be a non-empty path without NUL bytes", "cwd_fallback");
	if ((err = orc_json_get_bytes(root, "stdin", &r->stdin_data, &r->stdin_len, msg, msglen)) < 0)
		return err;
	if ((err = orc_json_get_number(root, "timeout_seconds", &r->timeout_s, 0, MAX_TIMEOUT_S, msg, msglen)) < 0)
		return err;
	if (r->timeout_s <= 0)
		return fail(msg, msglen, "field '%s' must be greater than 0", "timeout_seconds");
	if ((err = orc_json_get_bool(root, "login_shell", &r->login_shell, msg, msglen)) < 0)
		return err;
	if ((err = orc_json_get_int(root, "max_output_bytes", &max_output, 0, MAX_MAX_OUTPUT, msg, msglen)) < 0)
		return err;
	r->max_output = (size_t)max_output;
	if ((err = orc_json_get_str(root, "job_id", &r->job_id, msg, msglen)) < 0)
		return err;
	if (r->job_id && !agent_job_id_valid(r->job_id))
		return fail(msg, msglen, "field '%s' must be 1 to 64 characters of [A-Za-z0-9-]", "job_id");
	if ((err = orc_json_get_bool(root, "stream", &r->stream, msg, msglen)) < 0)
		return err;
	return 0;
}

/* Orchard runs a command whose cwd does not exist in / instead: with
 * cwd_fallback, a cwd that is not a directory gives way to it. */
static const char *effective_cwd(const struct exec_request *r)
{
	struct stat st;

	if (r->cwd && r->cwd_fallback && (stat(r->cwd, &st) < 0 || !S_ISDIR(st.st_mode)))
		return r->cwd_fallback;
	return r->cwd;
}

static void exec_request_release(struct exec_request *r)
{
	free(r->args);
	free(r->env_keys);
	free(r->env_vals);
}

static json_object *fixed3(double ms)
{
	char s[32];

	snprintf(s, sizeof(s), "%.3f", ms);
	return json_object_new_double_s(ms, s);
}

/* The result; with_output adds the stdout/stderr bodies (not in streams). */
static json_object *result_json(const struct agent_exec_result *res, int with_output)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "exit_code", json_object_new_int(res->exit_code));
	json_object_object_add(o, "signal", res->signal ? json_object_new_int(res->signal) : NULL);
	json_object_object_add(o, "timed_out", json_object_new_boolean(res->timed_out));
	json_object_object_add(o, "cancelled", json_object_new_boolean(res->cancelled));
	json_object_object_add(o, "oom_killed", json_object_new_boolean(res->oom_killed));
	json_object_object_add(o, "pids_limited", json_object_new_boolean(res->pids_limited));
	if (with_output) {
		json_object_object_add(o, "stdout", orc_json_new_text(orc_buf_cstr(&res->out), res->out.len));
		json_object_object_add(o, "stderr", orc_json_new_text(orc_buf_cstr(&res->err), res->err.len));
	}
	json_object_object_add(o, "stdout_bytes", json_object_new_int64((int64_t)res->out_bytes));
	json_object_object_add(o, "stderr_bytes", json_object_new_int64((int64_t)res->err_bytes));
	json_object_object_add(o, "stdout_truncated", json_object_new_boolean(res->out_truncated));
	json_object_object_add(o, "stderr_truncated", json_object_new_boolean(res->err_truncated));
	json_object_object_add(o, "duration_ms", fixed3(res->duration_ms));
	json_object_object_add(o, "started_at", fixed3(res->started_at));
	json_object_object_add(o, "finished_at", fixed3(res->finished_at));
	json_object_object_add(o, "error", res->error ? json_object_new_string(res->error) : NULL);
	return o;
}

/* A job cancelled while it waited: it never ran. */
static json_object *cancelled_json(int with_output)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "exit_code", NULL);
	json_object_object_add(o, "signal", NULL);
	json_object_object_add(o, "timed_out", json_object_new_boolean(0));
	json_object_object_add(o, "cancelled", json_object_new_boolean(1));
	if (with_output) {
		json_object_object_add(o, "stdout", json_object_new_string(""));
		json_object_object_add(o, "stderr", json_object_new_string(""));
	}
	json_object_object_add(o, "stdout_bytes", json_object_new_int64(0));
	json_object_object_add(o, "stderr_bytes", json_object_new_int64(0));
	json_object_object_add(o, "stdout_truncated", json_object_new_boolean(0));
	json_object_object_add(o, "stderr_truncated", json_object_new_boolean(0));
	json_object_object_add(o, "duration_ms", fixed3(0));
	json_object_object_add(o, "started_at", NULL);
	json_object_object_add(o, "finished_at", NULL);
	json_object_object_add(o, "error", json_object_new_string("cancelled before it started"));
	return o;
}

/* One exec: what the request asked for, owned together so that a
 * streaming exec can hand it to its runner thread. */
struct exec_call {
	json_object *root;         /* the request; r borrows from it */
	struct exec_request r;
	struct agent_command cmd;
	struct agent_exec_spec spec;
	struct agent_job job;
};

static void exec_call_free(void *arg)
{
	struct exec_call *c = arg;

	agent_job_finish(&c->job);
	agent_command_release(&c->cmd);
	exec_request_release(&c->r);
	json_object_put(c->root);
	free(c);
}

/* Wait for the turn, run: 0, AGENT_JOB_CANCELLED, ORC_EUNAVAIL or ORC_ERROR. */
static int exec_call_run(struct exec_call *c, struct agent_exec_result *res)
{
	int err;

	if (agent_job_wait_turn(&c->job) == AGENT_JOB_CANCELLED)
		return AGENT_JOB_CANCELLED;
	err = agent_exec_run(res, &c->spec);
	agent_job_finish(&c->job);
	return err;
}

static const char *run_error(int err, unsigned *status)
{
	*status = err == ORC_EUNAVAIL ? 503 : 500;
	return err == ORC_EUNAVAIL ? "the agent is shutting down" : "the agent could not start the command";
}

/* The runner thread of a streaming exec. */
static void stream_run(struct agent_stream *s, void *arg)
{
	struct exec_call *c = arg;
	struct agent_exec_result res = AGENT_EXEC_RESULT_INIT;
	json_object *o;
	unsigned status;
	size_t dropped;
	int err;

	c->spec.sink = agent_stream_sink(s);
	if (c->cmd.login_shell)
		agent_stream_filter_warnings(s);
	err = exec_call_run(c, &res);
	if (err == AGENT_JOB_CANCELLED) {
		o = cancelled_json(0);
	} else if (err < 0) {
		o = json_object_new_object();
		json_object_object_add(o, "error", json_object_new_string(run_error(err, &status)));
		json_object_object_add(o, "status", json_object_new_int((int)status));
	} else {
		dropped = agent_stream_dropped(s);
		res.err_bytes -= dropped < res.err_bytes ? dropped : res.err_bytes;
		o = result_json(&res, 0);
	}
	/* "type" first, for readers that look at the start of a line */
	{
		json_object *line = json_object_new_object();
		json_object_object_add(line, "type", json_object_new_string(err < 0 ? "error" : "exit"));
		json_object_object_foreach(o, key, val)
			json_object_object_add(line, key, json_object_get(val));
		agent_stream_line(s, line);
		json_object_put(line);
	}
	json_object_put(o);
	agent_exec_result_release(&res);
}

static int wants_stream(const struct exec_request *r, const struct agent_request *req)
{
	const char *accept = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND,
							 MHD_HTTP_HEADER_ACCEPT);

	return r->stream || (accept && strstr(accept, "application/x-ndjson"));
}

void agent_handle_exec(struct agent_reply *reply, const struct agent_request *req)
{
	struct exec_call *c = xcalloc(1, sizeof(*c));
	struct agent_exec_result res = AGENT_EXEC_RESULT_INIT;
	struct agent_job job_init = AGENT_JOB_INIT;
	struct agent_command cmd_init = AGENT_COMMAND_INIT;
	json_object *o;
	char msg[256] = "";
	unsigned status;
	int err, big;

	c->job = job_init;
	c->cmd = cmd_init;
	if (orc_json_parse_object(&c->root, req->body, req->body_len, msg, sizeof(msg)) < 0 ||
	    parse_request(&c->r, c->root, msg, sizeof(msg)) < 0) {
		agent_reply_error(reply, 400, msg);
		goto done;
	}
	if (c->r.cmd)
		agent_command_shell(&c->cmd, c->r.cmd, c->r.cmd_len, c->r.login_shell);
	else
		agent_command_argv(&c->cmd, c->r.args, c->r.nargs);
	agent_command_env(&c->cmd, c->r.env_keys, c->r.env_vals, c->r.nenv);
	agent_command_spec(&c->spec, &c->cmd);
	c->spec.cwd = effective_cwd(&c->r);
	c->spec.stdin_data = c->r.stdin_data;
	c->spec.stdin_len = c->r.stdin_len;
	c->spec.timeout_s = c->r.timeout_s;
	c->spec.max_output = c->r.max_output;
	c->spec.job = &c->job;

	/* Queued now: the place in line is the request's arrival. */
	if (agent_job_enqueue(&c->job, c->r.job_id) < 0) {
		agent_reply_error(reply, 409, "field 'job_id' names a job that is still queued or running");
		goto done;
	}
	if (wants_stream(&c->r, req)) {
		if (agent_stream_start(reply, stream_run, c, exec_call_free) < 0)
			agent_reply_error(reply, 500, "the agent could not start a streaming exec");
		return; /* c belongs to the stream now (or was freed) */
	}
	err = exec_call_run(c, &res);
	if (err == AGENT_JOB_CANCELLED) {
		o = cancelled_json(1);
	} else if (err < 0) {
		agent_reply_error(reply, 0, run_error(err, &status));
		reply->status = status;
		goto done;
	} else {
		agent_command_fixup_result(&c->cmd, &res);
		o = result_json(&res, 1);
	}
	agent_reply_json(reply, 200, o);
	json_object_put(o);
done:
	big = res.out.len + res.err.len >= TRIM_AFTER;
	agent_exec_result_release(&res);
	exec_call_free(c);
	/* glibc keeps large freed buffers once it has raised its mmap
	 * threshold: give them back so an idle agent stays small. */
	if (big)
		malloc_trim(0);
}
