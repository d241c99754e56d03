/*
 * An interactive session on the PTY WebSocket (docs/agent-protocol.md,
 * "GET /pty"), for `shell` and `exec -t`: an init frame with the command,
 * environment, directory and window size; then keys from stdin go out as
 * stdin frames, stdout frames come back to stdout, window changes go as
 * resize frames, until the exit frame gives the status. The local terminal
 * is raw only between ready and the end, and restored on every way out
 * (term.c).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base64.h"
#include "err.h"
#include "io.h"
#include "json.h"
#include "term.h"
#include "ws.h"
#include "xalloc.h"

#define KEYS_CHUNK 16384

struct session {
	struct cli_ws ws;
	struct orc_buf msg, bytes;
	int ready, exited, exit_code, raw;
	char error[512];             /* the last error frame */
	unsigned close_code;
};

static int send_json(struct session *s, json_object *o)
{
	const char *text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
	int err = cli_ws_send(&s->ws, CLI_WS_TEXT, text, strlen(text));

	json_object_put(o);
	return err;
}

static int send_init(struct session *s, const struct cli_pty_opts *o)
{
	json_object *init = json_object_new_object(), *cmd, *env;
	const char *term = getenv("TERM");
	int rows, cols, i;

	json_object_object_add(init, "type", json_object_new_string("init"));
	if (o->argc > 0) {
		cmd = json_object_new_array();
		for (i = 0; i < o->argc; i++)
			json_object_array_add(cmd, json_object_new_string(o->argv[i]));
		json_object_object_add(init, "cmd", cmd);
	}
	env = o->env ? json_object_get(o->env) : json_object_new_object();
	if (term && *term && isatty(STDIN_FILENO) && !json_object_object_get_ex(env, "TERM", NULL))
		json_object_object_add(env, "TERM", json_object_new_string(term));
	json_object_object_add(init, "env", env);
	if (o->cwd)
		json_object_object_add(init, "cwd", json_object_new_string(o->cwd));
	cli_term_size(&rows, &cols);
	json_object_object_add(init, "rows", json_object_new_int(rows));
	json_object_object_add(init, "cols", json_object_new_int(cols));
	json_object_object_add(init, "login_shell", json_object_new_boolean(o->login));
	return send_json(s, init);
}

static int send_resize(struct session *s)
{
	json_object *o = json_object_new_object();
	int rows, cols;

	if (cli_term_size(&rows, &cols) < 0) {
		json_object_put(o);
		return 0;
	}
	json_object_object_add(o, "type", json_object_new_string("resize"));
	json_object_object_add(o, "rows", json_object_new_int(rows));
	json_object_object_add(o, "cols", json_object_new_int(cols));
	return send_json(s, o);
}

static int send_keys(struct session *s, const char *data, size_t n)
{
	json_object *o = json_object_new_object();
	struct orc_buf b64 = ORC_BUF_INIT;

	orc_base64_encode(&b64, data, n);
	json_object_object_add(o, "type", json_object_new_string("stdin"));
	json_object_object_add(o, "data", json_object_new_string(orc_buf_cstr(&b64)));
	orc_buf_release(&b64);
	return send_json(s, o);
}

/* One message from the agent. */
static int on_message(struct session *s, const char *text, size_t len)
{
	json_object *m = NULL, *v;
	const char *type, *data;
	int err = 0;

	if (orc_json_parse_object(&m, text, len, NULL, 0) < 0 ||
	    !json_object_object_get_ex(m, "type", &v) || !json_object_is_type(v, json_type_string)) {
		err = ORC_EINVALID;
		goto done;
	}
	type = json_object_get_string(v);
	if (!strcmp(type, "stdout")) {
		if (!json_object_object_get_ex(m, "data", &v) || !json_object_is_type(v, json_type_string)) {
			err = ORC_EINVALID;
			goto done;
		}
		data = json_object_get_string(v);
		orc_buf_reset(&s->bytes);
		if ((err = orc_base64_decode(&s->bytes, data, strlen(data))) < 0)
			goto done;
		if (s->bytes.len && orc_write_all(STDOUT_FILENO, s->bytes.ptr, s->bytes.len) < 0)
			err = ORC_ERROR;
	} else if (!strcmp(type, "ready")) {
		s->ready = 1;
	} else if (!strcmp(type, "exit")) {
		s->exited = 1;
		s->exit_code = json_object_object_get_ex(m, "code", &v) ? json_object_get_int(v) : 1;
	} else if (!strcmp(type, "error")) {
		snprintf(s->error, sizeof(s->error), "%s", cli_field_text(m, "message"));
	}
done:
	if (m)
		json_object_put(m);
	return err;
}

/* Everything the socket has: 0, 1 when the session ended, < 0 on a failure. */
static int on_socket(struct session *s)
{
	int op, n, err;

	if ((err = cli_ws_fill(&s->ws)) < 0 && err != ORC_EUNAVAIL)
		return err;
	while ((n = cli_ws_next(&s->ws, &op, &s->msg)) > 0) {
		if (op == CLI_WS_CLOSE) {
			s->close_code = s->msg.len >= 2 ?
				(unsigned)((unsigned char)s->msg.ptr[0] << 8 | (unsigned char)s->msg.ptr[1]) : 1005;
			cli_ws_send_close(&s->ws, s->close_code == 1005 ? 1000 : s->close_code);
			return 1;
		}
		if ((err = on_message(s, s->msg.ptr, s->msg.len)) < 0)
			return err;
	}
	if (n < 0)
		return n;
	return s->ws.eof ? 1 : 0;
}

/* stdin has something: keys to send; at its end (not a terminal) ^D, once. */
static int on_keys(struct session *s, int *stdin_open)
{
	char buf[KEYS_CHUNK];
	ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));

	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return 0;
	if (n <= 0) {
		*stdin_open = 0;
		return s->raw ? 0 : send_keys(s, "\x04", 1);
	}
	return send_keys(s, buf, (size_t)n);
}

static int loop(struct session *s)
{
	struct pollfd p[3];
	int winch = cli_term_winch_fd(), stdin_open = 1, n, err;

	for (;;) {
		p[0] = (struct pollfd){ s->ws.fd, POLLIN, 0 };
		p[1] = (struct pollfd){ s->ready && stdin_open ? STDIN_FILENO : -1, POLLIN, 0 };
		p[2] = (struct pollfd){ winch, POLLIN, 0 };
		n = poll(p, 3, -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return ORC_ERROR;
		if (p[0].revents && (err = on_socket(s)) != 0)
			return err < 0 ? err : 0;
		if (!s->raw && s->ready && isatty(STDIN_FILENO) && cli_term_raw() == 0)
			s->raw = 1;
		if (p[1].revents && (err = on_keys(s, &stdin_open)) < 0)
			return err;
		if (p[2].revents) {
			cli_term_winch_drain();
			if (s->ready && (err = send_resize(s)) < 0)
				return err;
		}
	}
}

int cli_pty_run(const struct cli_config *cfg, const struct cli_pty_opts *o)
{
	struct session s;
	char *route = cli_path("/v1/sandboxes", o->id, "/exec/pty");
	int err, rc = CLI_FAIL;

	memset(&s, 0, sizeof(s));
	s.ws = (struct cli_ws)CLI_WS_INIT;
	orc_buf_init(&s.bytes, CLI_WS_MESSAGE_MAX);
	if (cli_ws_connect(&s.ws, cfg, route) < 0)
		goto done;
	if ((err = send_init(&s, o)) < 0) {
		cli_error("sending to the sandbox failed");
		goto done;
	}
	err = loop(&s);
	cli_term_restore();
	if (s.exited) {
		rc = s.exit_code >= 0 ? (s.exit_code > 255 ? 255 : s.exit_code) : 128 + (-s.exit_code & 127);
		goto done;
	}
	if (s.error[0])
		cli_error("%s", s.error);
	if (err == ORC_EINVALID || err == ORC_ETOOBIG)
		cli_error("the sandbox's terminal broke the protocol");
	else if (err < 0)
		cli_error("the connection to the sandbox failed");
	else if (!s.error[0])
		cli_error("the connection to the sandbox closed before the command ended (code %u)",
			  s.close_code);
done:
	cli_term_restore();
	if (s.ws.curl && !s.ws.close_sent)
		cli_ws_send_close(&s.ws, 1000);
	cli_ws_release(&s.ws);
	orc_buf_release(&s.msg);
	orc_buf_release(&s.bytes);
	free(route);
	return rc;
}
