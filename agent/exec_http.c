#include "server.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "command.h"
#include "err.h"
#include "exec.h"
#include "json.h"
#include "log.h"
#include "xalloc.h"

/* POST /exec: the JSON edge of the process runner (docs/agent-protocol.md). */

#define DEFAULT_TIMEOUT_S 300.0
#define MAX_TIMEOUT_S (7.0 * 86400)
#define DEFAULT_MAX_OUTPUT (8 * 1024 * 1024)
#define MAX_MAX_OUTPUT (64 * 1024 * 1024)
#define MAX_ARGS 65536
#define MAX_ENV 4096

struct exec_request {
	const char *cmd;            /* string command, or NULL */
	size_t cmd_len;
	const char **args;          /* array command */
	size_t nargs;
	const char *cwd;
	const char **env_keys;
	const char **env_vals;
	size_t nenv;
	const char *stdin_data;
	size_t stdin_len;
	double timeout_s;
	int login_shell;
	size_t max_output;
};

/*
 * Commands run one at a time, in the order their requests arrived: a
 * ticket lock, so a waiting request cannot be overtaken.
 */
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t queue_cond = PTHREAD_COND_INITIALIZER;
static unsigned long queue_next, queue_serving;

static void queue_enter(void)
{
	unsigned long ticket;

	pthread_mutex_lock(&queue_lock);
	ticket = queue_next++;
	while (ticket != queue_serving)
		pthread_cond_wait(&queue_cond, &queue_lock);
	pthread_mutex_unlock(&queue_lock);
}

static void queue_leave(void)
{
	pthread_mutex_lock(&queue_lock);
	queue_serving++;
	pthread_cond_broadcast(&queue_cond);
	pthread_mutex_unlock(&queue_lock);
}

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
	if ((err = orc_json_get_str(root, "stdin", &r->stdin_data, msg, msglen)) < 0)
		return err;
	if (r->stdin_data && json_object_object_get_ex(root, "stdin", &v))
		r->stdin_len = (size_t)json_object_get_string_len(v);
	if ((err = orc_json_get_number(root, "timeout_seconds", &r->timeout_s, 0, MAX_TIMEOUT_S, msg, msglen)) < 0)
		return err;
	if (r->timeout_s <= 0)
		return fail(msg, msglen, "field '%s' must be greater than 0", "timeout_seconds");
	if ((err = orc_json_get_bool(root, "login_shell", &r->login_shell, msg, msglen)) < 0)
		return err;
	if ((err = orc_json_get_int(root, "max_output_bytes", &max_output, 0, MAX_MAX_OUTPUT, msg, msglen)) < 0)
		return err;
	r->max_output = (size_t)max_output;
	return 0;
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

static json_object *result_json(const struct agent_exec_result *res)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "exit_code", json_object_new_int(res->exit_code));
	json_object_object_add(o, "signal", res->signal ? json_object_new_int(res->signal) : NULL);
	json_object_object_add(o, "timed_out", json_object_new_boolean(res->timed_out));
	json_object_object_add(o, "stdout", orc_json_new_text(orc_buf_cstr(&res->out), res->out.len));
	json_object_object_add(o, "stderr", orc_json_new_text(orc_buf_cstr(&res->err), res->err.len));
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

void agent_handle_exec(struct agent_reply *reply, const struct agent_request *req)
{
	struct exec_request r;
	struct agent_command cmd = AGENT_COMMAND_INIT;
	struct agent_exec_spec spec;
	struct agent_exec_result res = AGENT_EXEC_RESULT_INIT;
	json_object *root = NULL, *o;
	char msg[256] = "";
	int err;

	memset(&r, 0, sizeof(r));
	memset(&spec, 0, sizeof(spec));
	if (orc_json_parse_object(&root, req->body, req->body_len, msg, sizeof(msg)) < 0 ||
	    parse_request(&r, root, msg, sizeof(msg)) < 0) {
		agent_reply_error(reply, 400, msg);
		goto done;
	}
	if (r.cmd)
		agent_command_shell(&cmd, r.cmd, r.cmd_len, r.login_shell);
	else
		agent_command_argv(&cmd, r.args, r.nargs);
	agent_command_env(&cmd, r.env_keys, r.env_vals, r.nenv);
	agent_command_spec(&spec, &cmd);
	spec.cwd = r.cwd;
	spec.stdin_data = r.stdin_data;
	spec.stdin_len = r.stdin_len;
	spec.timeout_s = r.timeout_s;
	spec.max_output = r.max_output;

	queue_enter();
	err = agent_exec_run(&res, &spec);
	queue_leave();
	if (err == ORC_EUNAVAIL) {
		agent_reply_error(reply, 503, "the agent is shutting down");
		goto done;
	}
	if (err < 0) {
		agent_reply_error(reply, 500, "the agent could not start the command");
		goto done;
	}
	agent_command_fixup_result(&cmd, &res);
	o = result_json(&res);
	agent_reply_json(reply, 200, o);
	json_object_put(o);
done:
	agent_exec_result_release(&res);
	agent_command_release(&cmd);
	exec_request_release(&r);
	json_object_put(root);
}
