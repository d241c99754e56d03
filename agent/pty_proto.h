#ifndef AGENT_PTY_PROTO_H
#define AGENT_PTY_PROTO_H
#include <stddef.h>
#include <json-c/json.h>

#include "buf.h"
/*
 * The client's frames of the PTY WebSocket (docs/agent-protocol.md),
 * parsed and validated; the frames the agent sends are built by the
 * pty_frame_* functions. Every frame is a JSON object with a "type".
 *
 *   struct pty_msg m = PTY_MSG_BLANK;
 *   if (pty_msg_parse(&m, text, n, err, sizeof(err)) < 0) ... // err says why
 *   switch (m.type) ...
 *   pty_msg_release(&m);
 */
#define PTY_MAX_ARGS 4096
#define PTY_MAX_ENV 4096
#define PTY_DEFAULT_ROWS 24
#define PTY_DEFAULT_COLS 80

enum pty_msg_type { PTY_MSG_INIT = 1, PTY_MSG_STDIN, PTY_MSG_RESIZE, PTY_MSG_SIGNAL, PTY_MSG_CLOSE };

struct pty_msg {
	enum pty_msg_type type;
	/* init (strings borrowed from root) */
	const char **argv;         /* NULL: the default shell */
	size_t argc;
	const char **env_keys, **env_vals;
	size_t nenv;
	const char *cwd;           /* NULL: /workspace, else / */
	int login_shell;           /* -1 when not given */
	/* init and resize */
	unsigned rows, cols;
	/* stdin: decoded bytes */
	struct orc_buf data;
	/* signal */
	int sig;
	json_object *root;
};

#define PTY_MSG_BLANK { 0, NULL, 0, NULL, NULL, 0, NULL, -1, 0, 0, ORC_BUF_INIT, 0, NULL }

int pty_msg_parse(struct pty_msg *m, const char *text, size_t n, char *err, size_t errlen);
void pty_msg_release(struct pty_msg *m);

/* Server frames, appended to out as one JSON text. */
void pty_frame_ready(struct orc_buf *out, long pid, const char *session_id, unsigned long long offset);
void pty_frame_stdout(struct orc_buf *out, const char *data, size_t n);
void pty_frame_exit(struct orc_buf *out, int code);
void pty_frame_error(struct orc_buf *out, const char *message);
#endif
