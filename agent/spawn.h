#ifndef AGENT_SPAWN_H
#define AGENT_SPAWN_H
#include <stddef.h>
#include <sys/types.h>

#include "reaper.h"
/*
 * Start one command in the manner of git's run-command: every allocation
 * (resolved program path, fallback argv) happens first; the child starts
 * its own session (so its process group can be killed as a whole). Plain
 * commands go through posix_spawn (vfork-like, no page-table copy); one
 * that takes a controlling terminal (PTY) is forked, its child making only
 * async-signal-safe calls and reporting a failure to chdir or exec over a
 * CLOEXEC pipe.
 */
struct agent_spawn {
	const char *path;        /* NULL: argv[0] looked up in envp's PATH */
	char *const *argv;
	char *const *envp;
	const char *cwd;         /* NULL: /workspace, else / */
	int stdin_fd;            /* becomes fd 0 */
	int stdout_fd;           /* becomes fd 1 */
	int stderr_fd;           /* becomes fd 2 */
	int fd3;                 /* becomes fd 3, or -1 */
	int ctty;                /* stdin is a terminal: make it the controlling one */
};

/*
 * Start the command; c watches it (reaper.h). Returns 0 when it was
 * started, ORC_ERROR when fork or the pipe failed. When the command could
 * not be executed, returns 0 with *failure_out set to a malloc'd message
 * ("command not found: \"x\"", ...) and *failure_code_out to 127 or 126;
 * the child (if one was forked) is still watched and must be waited for.
 */
int agent_spawn_start(struct agent_child *c, char **failure_out, int *failure_code_out,
		      const struct agent_spawn *sp);
#endif
