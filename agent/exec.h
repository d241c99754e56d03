#ifndef AGENT_EXEC_H
#define AGENT_EXEC_H
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
/*
 * The process runner behind POST /exec, independent of HTTP.
 *
 * agent_exec_run() starts argv in its own session and process group with
 * stdin, stdout, stderr (and optionally fd 3) set up, collects both output
 * streams with poll() up to a cap while counting every byte, kills the whole
 * process group with SIGKILL at the timeout, and returns once the direct
 * child has exited — not when every descendant has closed its output (a
 * `sleep 100 &` left behind does not hold the call; what it writes later is
 * lost).
 *
 * A command that cannot be started (program not found, not executable, bad
 * cwd) is not an error of agent_exec_run: the result says so with exit code
 * 127 (126 for "not executable"), the reason in stderr and in `error`.
 * agent_exec_run returns ORC_ERROR only when the agent itself failed (no
 * pipes, fork failed), ORC_EUNAVAIL once agent_exec_stop_all was called.
 *
 * The caller must have started the reaper (reaper.h); children are waited
 * for through it.
 */
struct agent_job;

/*
 * Streaming: where output goes as it arrives instead of into the result.
 * output gets the kept bytes (the cap still applies; the counts stay
 * exact). While ready returns 0 the pipes are not read, so a slow consumer
 * holds the command back (its writes block) while the timeout still runs;
 * wake_fd becomes readable when ready may have changed.
 */
struct agent_exec_sink {
	void (*output)(void *arg, int fd, const char *data, size_t n); /* fd 1 or 2 */
	int (*ready)(void *arg);
	int wake_fd;
	void *arg;
};

struct agent_exec_spec {
	const char *path;         /* program to run; NULL: argv[0] in envp's PATH */
	char *const *argv;
	char *const *envp;        /* the complete environment of the command */
	const char *cwd;          /* NULL: /workspace, or / when that is missing */
	const char *stdin_data;   /* NULL: stdin is /dev/null */
	size_t stdin_len;
	const char *fd3_data;     /* NULL: no fd 3; else a file on fd 3 (scripts) */
	size_t fd3_len;
	double timeout_s;         /* > 0 */
	size_t max_output;        /* cap per stream */
	struct agent_job *job;    /* cancellable (cancel.h), or NULL */
	const struct agent_exec_sink *sink; /* NULL: output into the result */
};

struct agent_exec_result {
	int exit_code;            /* 128+N for signal N, 124 on timeout */
	int signal;               /* 0 when not killed by a signal (or timed out) */
	int timed_out;
	int cancelled;            /* killed by POST /exec/cancel */
	struct orc_buf out, err;  /* at most max_output bytes each (empty with a sink) */
	uint64_t out_bytes, err_bytes; /* all bytes produced */
	int out_truncated, err_truncated;
	char *error;              /* why the command could not start, or NULL */
	double started_at;        /* epoch seconds */
	double finished_at;
	double duration_ms;
	/* While it ran, the sandbox's OOM killer killed a process / its pids
	 * limit refused a fork (cglimits.h; any process of the sandbox). */
	int oom_killed;
	int pids_limited;
};

#define AGENT_EXEC_RESULT_INIT { 0, 0, 0, 0, ORC_BUF_INIT, ORC_BUF_INIT, 0, 0, 0, 0, NULL, 0, 0, 0, 0, 0 }

int agent_exec_run(struct agent_exec_result *out, const struct agent_exec_spec *spec);
void agent_exec_result_release(struct agent_exec_result *r);
/* At shutdown: kill every running command's process group (within about a
 * second); agent_exec_run then returns ORC_EUNAVAIL without starting one. */
void agent_exec_stop_all(void);
#endif
