/*
 * pty_msg_parse (agent/pty_proto.c): every frame a client sends on the PTY
 * WebSocket (init, stdin, resize, signal, close).
 *
 * Properties: success means a known type and fields within their bounds
 * (argv 1..4096 strings, env names non-empty without '=', rows and cols
 * 1..65535, a known signal, non-empty cwd, no embedded NUL anywhere);
 * failure always says why; pty_msg_release frees everything either way
 * (LeakSanitizer checks), as agent/pty_session.c calls it on both paths.
 */
#include <signal.h>

#include "fuzz.h"

#include "err.h"
#include "pty_proto.h"

static void check_init(const struct pty_msg *m)
{
	size_t i;

	FUZZ_ASSERT(m->rows >= 1 && m->rows <= 65535 && m->cols >= 1 && m->cols <= 65535);
	FUZZ_ASSERT((m->argv == NULL) == (m->argc == 0));
	FUZZ_ASSERT(m->argc <= PTY_MAX_ARGS && m->nenv <= PTY_MAX_ENV);
	for (i = 0; i < m->argc; i++)
		FUZZ_ASSERT(m->argv[i] != NULL);
	if (m->argv)
		FUZZ_ASSERT(m->argv[m->argc] == NULL);
	for (i = 0; i < m->nenv; i++) {
		FUZZ_ASSERT(m->env_keys[i] && m->env_keys[i][0] && !strchr(m->env_keys[i], '='));
		FUZZ_ASSERT(m->env_vals[i] != NULL);
	}
	FUZZ_ASSERT(!m->cwd || m->cwd[0]);
	FUZZ_ASSERT(m->login_shell >= -1 && m->login_shell <= 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pty_msg m = PTY_MSG_BLANK;
	char err[256] = "";

	if (pty_msg_parse(&m, (const char *)data, size, err, sizeof(err)) < 0) {
		FUZZ_ASSERT(err[0]);
		pty_msg_release(&m);
		return 0;
	}
	switch (m.type) {
	case PTY_MSG_INIT:
		check_init(&m);
		break;
	case PTY_MSG_STDIN:
		FUZZ_ASSERT(m.data.len == 0 || m.data.ptr);
		break;
	case PTY_MSG_RESIZE:
		FUZZ_ASSERT(m.rows >= 1 && m.rows <= 65535 && m.cols >= 1 && m.cols <= 65535);
		break;
	case PTY_MSG_SIGNAL:
		FUZZ_ASSERT(m.sig == SIGTERM || m.sig == SIGKILL || m.sig == SIGINT ||
			    m.sig == SIGHUP || m.sig == SIGQUIT);
		break;
	case PTY_MSG_CLOSE:
		break;
	default:
		FUZZ_ASSERT(!"unknown type returned as success");
	}
	pty_msg_release(&m);
	return 0;
}
