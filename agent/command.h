#ifndef AGENT_COMMAND_H
#define AGENT_COMMAND_H
#include <stddef.h>

#include "exec.h"
/*
 * How an exec request becomes a process (docs/agent-protocol.md):
 *
 * - A string command runs as `bash -c CMD` (`sh -c CMD` where neither
 *   /bin/bash nor /usr/bin/bash exists). Past AGENT_SCRIPT_INLINE_MAX bytes
 *   the script does not fit in argv (the kernel limits one argument to
 *   128 KiB), so it is handed over on fd 3 (a memfd) and bash reads and
 *   evals it: `$0`, positional parameters and exit semantics stay those of
 *   `bash -c`, and the command's own stdin is untouched.
 * - login_shell runs `bash --login -i -c CMD`: the login files are read
 *   (Debian's and Ubuntu's ~/.profile source ~/.bashrc, and being
 *   interactive gets past .bashrc's "not interactive: return" guard); when
 *   there is no ~/.bash_profile, ~/.bash_login or ~/.profile, ~/.bashrc is
 *   sourced directly. Bash's two job-control warnings about having no
 *   terminal are removed from the start of stderr (see
 *   agent_command_fixup_result).
 * - An array command is argv, executed directly (no shell).
 *
 * The environment is the agent's own minus every ORCHARD_* variable, with
 * the request's variables laid over it.
 */
#define AGENT_SCRIPT_INLINE_MAX (64 * 1024)

struct agent_command {
	char *path;                /* the shell, or NULL to search argv[0] */
	char **argv;               /* NULL-terminated; strings owned */
	char **envp;               /* NULL-terminated; strings owned */
	const char *script;        /* borrowed: passed on fd 3, or NULL */
	size_t script_len;
	int login_shell;           /* strip bash's no-tty warnings */
};

#define AGENT_COMMAND_INIT { NULL, NULL, NULL, NULL, 0, 0 }

/* cmd must stay valid while the command is used (it may be borrowed). */
void agent_command_shell(struct agent_command *c, const char *cmd, size_t len, int login_shell);
/* args[0..n) are copied; n >= 1. */
void agent_command_argv(struct agent_command *c, const char *const *args, size_t n);
/*
 * A PTY session's program: with args (n >= 1), args itself, or with
 * login_shell > 0 `SHELL -l -c 'exec "$@"' SHELL args...` (the login files
 * are read, then the program replaces the shell). Without args, the login
 * shell `bash -l` (`sh -l` without bash), or a plain one when login_shell
 * is 0.
 */
void agent_command_pty(struct agent_command *c, const char *const *args, size_t n, int login_shell);
/* Build envp from the agent's environment and the pairs keys[i]=vals[i],
 * plus SHELL when neither sets it. */
void agent_command_env(struct agent_command *c, const char *const *keys,
		       const char *const *vals, size_t n);
/* Fill the argv/env/script fields of an exec spec. */
void agent_command_spec(struct agent_exec_spec *spec, const struct agent_command *c);
/* Post-process a result (the login shell's warnings). */
void agent_command_fixup_result(const struct agent_command *c, struct agent_exec_result *r);
/* Whether data (the start of a login shell's stderr) begins with one of
 * bash's no-terminal warnings: 1 and *line_len when it does, 0 when it
 * does not, -1 when more bytes are needed to tell. For streaming, where
 * the output cannot be fixed up afterwards. */
int agent_command_match_warning(const char *data, size_t n, size_t *line_len);
void agent_command_release(struct agent_command *c);
#endif
