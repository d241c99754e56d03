#include "pty_proto.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "err.h"
#include "json.h"
#include "base64.h"
#include "xalloc.h"

typedef int (*parse_fn)(struct pty_msg *m, char *err, size_t errlen);

static int fail(char *err, size_t errlen, const char *what)
{
	snprintf(err, errlen, "%s", what);
	return ORC_EINVALID;
}

/* A string without NUL bytes. */
static int c_string(const char **out, json_object *v)
{
	if (!v || !json_object_is_type(v, json_type_string) ||
	    strlen(json_object_get_string(v)) != (size_t)json_object_get_string_len(v))
		return ORC_EINVALID;
	*out = json_object_get_string(v);
	return 0;
}

static int get_size(unsigned *out, json_object *root, const char *key, int required,
		    char *err, size_t errlen)
{
	int64_t v = 0;
	int rc = orc_json_get_int(root, key, &v, 1, 65535, err, errlen);

	if (rc < 0)
		return rc;
	if (rc > 0) {
		if (required) {
			snprintf(err, errlen, "field '%s' is required", key);
			return ORC_EINVALID;
		}
		return 0;
	}
	*out = (unsigned)v;
	return 0;
}

static int parse_argv(struct pty_msg *m, char *err, size_t errlen)
{
	json_object *v = NULL;
	size_t i, n;

	if (!json_object_object_get_ex(m->root, "cmd", &v) || !v)
		return 0;
	if (!json_object_is_type(v, json_type_array))
		return fail(err, errlen, "field 'cmd' must be an array of strings");
	n = json_object_array_length(v);
	if (n == 0 || n > PTY_MAX_ARGS)
		return fail(err, errlen, "field 'cmd' must have 1 to 4096 items");
	m->argv = xcalloc(n + 1, sizeof(*m->argv));
	for (i = 0; i < n; i++)
		if (c_string(&m->argv[i], json_object_array_get_idx(v, i)) < 0)
			return fail(err, errlen, "field 'cmd' must hold strings without NUL bytes");
	m->argc = n;
	return 0;
}

static int parse_env(struct pty_msg *m, char *err, size_t errlen)
{
	json_object *env = NULL;
	size_t n, i = 0;
	int rc;

	if ((rc = orc_json_get_object(m->root, "env", &env, err, errlen)) != 0)
		return rc < 0 ? rc : 0;
	n = (size_t)json_object_object_length(env);
	if (n > PTY_MAX_ENV)
		return fail(err, errlen, "field 'env' has too many variables (at most 4096)");
	m->env_keys = xcalloc(n + 1, sizeof(*m->env_keys));
	m->env_vals = xcalloc(n + 1, sizeof(*m->env_vals));
	json_object_object_foreach(env, key, val) {
		if (!*key || strchr(key, '='))
			return fail(err, errlen, "field 'env' has a name that is empty or contains '='");
		if (c_string(&m->env_vals[i], val) < 0)
			return fail(err, errlen, "field 'env' must map names to strings without NUL bytes");
		m->env_keys[i++] = key;
	}
	m->nenv = i;
	return 0;
}

static int parse_init(struct pty_msg *m, char *err, size_t errlen)
{
	json_object *v = NULL;
	int rc;

	m->rows = PTY_DEFAULT_ROWS;
	m->cols = PTY_DEFAULT_COLS;
	if ((rc = parse_argv(m, err, errlen)) < 0 || (rc = parse_env(m, err, errlen)) < 0 ||
	    (rc = get_size(&m->rows, m->root, "rows", 0, err, errlen)) < 0 ||
	    (rc = get_size(&m->cols, m->root, "cols", 0, err, errlen)) < 0 ||
	    (rc = orc_json_get_bool(m->root, "login_shell", &m->login_shell, err, errlen)) < 0)
		return rc;
	if (json_object_object_get_ex(m->root, "cwd", &v) && v &&
	    (c_string(&m->cwd, v) < 0 || !*m->cwd))
		return fail(err, errlen, "field 'cwd' must be a non-empty path without NUL bytes");
	return 0;
}

static int parse_stdin(struct pty_msg *m, char *err, size_t errlen)
{
	json_object *v = NULL;

	if (!json_object_object_get_ex(m->root, "data", &v) || !v ||
	    !json_object_is_type(v, json_type_string))
		return fail(err, errlen, "field 'data' must be a base64 string");
	if (orc_base64_decode(&m->data, json_object_get_string(v),
			     (size_t)json_object_get_string_len(v)) < 0)
		return fail(err, errlen, "field 'data' is not valid base64");
	return 0;
}

static int parse_resize(struct pty_msg *m, char *err, size_t errlen)
{
	int rc;

	if ((rc = get_size(&m->rows, m->root, "rows", 1, err, errlen)) < 0 ||
	    (rc = get_size(&m->cols, m->root, "cols", 1, err, errlen)) < 0)
		return rc;
	return 0;
}

static const struct {
	const char *name;
	int sig;
} signals[] = {
	{ "TERM", SIGTERM }, { "KILL", SIGKILL }, { "INT", SIGINT },
	{ "HUP", SIGHUP }, { "QUIT", SIGQUIT },
};

static int parse_signal(struct pty_msg *m, char *err, size_t errlen)
{
	const char *name = NULL;
	size_t i;

	if (orc_json_get_str(m->root, "sig", &name, err, errlen) != 0 || !name)
		return fail(err, errlen, "field 'sig' must be one of TERM, KILL, INT, HUP, QUIT");
	if (!strncmp(name, "SIG", 3))
		name += 3;
	for (i = 0; i < sizeof(signals) / sizeof(*signals); i++) {
		if (!strcmp(name, signals[i].name)) {
			m->sig = signals[i].sig;
			return 0;
		}
	}
	return fail(err, errlen, "field 'sig' must be one of TERM, KILL, INT, HUP, QUIT");
}

static int parse_close(struct pty_msg *m, char *err, size_t errlen)
{
	(void)m;
	(void)err;
	(void)errlen;
	return 0;
}

static const struct {
	const char *type;
	enum pty_msg_type code;
	parse_fn parse;
} types[] = {
	{ "init", PTY_MSG_INIT, parse_init },
	{ "stdin", PTY_MSG_STDIN, parse_stdin },
	{ "resize", PTY_MSG_RESIZE, parse_resize },
	{ "signal", PTY_MSG_SIGNAL, parse_signal },
	{ "close", PTY_MSG_CLOSE, parse_close },
};

int pty_msg_parse(struct pty_msg *m, const char *text, size_t n, char *err, size_t errlen)
{
	const char *type = NULL;
	size_t i;

	if (orc_json_parse_object(&m->root, text, n, err, errlen) < 0)
		return ORC_EINVALID;
	if (orc_json_get_str(m->root, "type", &type, err, errlen) != 0 || !type)
		return fail(err, errlen, "field 'type' must be a string");
	for (i = 0; i < sizeof(types) / sizeof(*types); i++) {
		if (!strcmp(type, types[i].type)) {
			m->type = types[i].code;
			return types[i].parse(m, err, errlen);
		}
	}
	snprintf(err, errlen, "unknown frame type \"%.32s\"", type);
	return ORC_EINVALID;
}

void pty_msg_release(struct pty_msg *m)
{
	free(m->argv);
	free(m->env_keys);
	free(m->env_vals);
	orc_buf_release(&m->data);
	json_object_put(m->root);
	m->argv = NULL;
	m->env_keys = m->env_vals = NULL;
	m->root = NULL;
}

void pty_frame_ready(struct orc_buf *out, long pid, const char *session_id, unsigned long long offset)
{
	orc_buf_addf(out, "{\"type\":\"ready\",\"pid\":%ld,\"session_id\":\"%s\",\"offset\":%llu}",
		     pid, session_id, offset);
}

void pty_frame_stdout(struct orc_buf *out, const char *data, size_t n)
{
	orc_buf_adds(out, "{\"type\":\"stdout\",\"data\":\"");
	orc_base64_encode(out, data, n);
	orc_buf_adds(out, "\"}");
}

void pty_frame_exit(struct orc_buf *out, int code)
{
	orc_buf_addf(out, "{\"type\":\"exit\",\"code\":%d}", code);
}

void pty_frame_error(struct orc_buf *out, const char *message)
{
	orc_buf_adds(out, "{\"type\":\"error\",\"message\":");
	orc_json_quote(out, message);
	orc_buf_addc(out, '}');
}
