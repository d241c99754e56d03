#ifndef SV_SUPERVISE_H
#define SV_SUPERVISE_H
/*
 * orchard-supervise: keeps the local stack's processes (PostgreSQL,
 * orchard-api, orchard-controller, nginx) running. scripts/stack.sh starts
 * it; docs/operations.md, "The supervisor", says what it does.
 *
 * Each component is an executable start script that execs the program
 * (so the pid the supervisor forks is the program's), a pid file
 * <run_dir>/<name>.pid holding "<pid> <starttime>" (the process's identity:
 * lib/procstat.h), and how to stop it. A component found running at start
 * (the pid file names that very process) is adopted, not started twice.
 */
#include <stdint.h>
#include <sys/types.h>

struct sv_component {
	/* configuration (command line) */
	const char *name;
	char *start;                /* executable that execs the program */
	int stop_signal;            /* SIGTERM unless told */
	int64_t grace_ms;           /* after stop_signal, before SIGKILL */
	int group;                  /* SIGKILL what is left of its process group */
	const char *adopt_file;     /* a pid file the program writes itself ... */
	const char *adopt_match;    /* ... trusted when its cmdline holds this */

	/* state */
	pid_t pid;                  /* 0: not running */
	uint64_t starttime;
	int pidfd;                  /* -1 when not running */
	int child;                  /* ours to wait for (else adopted) */
	int held;                   /* exited 0: stays stopped until SIGHUP */
	unsigned failures;          /* quick deaths in a row (the backoff) */
	unsigned restarts;
	int64_t started_ms;         /* monotonic */
	int64_t next_start_ms;      /* when not running and not held */
};

struct sv_config {
	const char *run_dir;
	int64_t backoff_ms;         /* first delay after a death */
	int64_t backoff_max_ms;
	int64_t stable_ms;          /* uptime after which the backoff starts over */
};

extern struct sv_config sv_config;

/* Adopt c's process if its pid file (or adopt_file) names a live process
 * of c's: 1 adopted, 0 none. */
int sv_component_adopt(struct sv_component *c);
/* Fork and exec c's start script, recording its pid file first: 0, or
 * negative (logged; c is scheduled again with the backoff). */
int sv_component_start(struct sv_component *c);
/* c's process has ended (its pidfd is readable): reap it, log why, and
 * schedule the restart, or hold c when it exited 0. */
void sv_component_exited(struct sv_component *c);
/* Stop c: stop_signal, up to grace_ms, then SIGKILL; removes its pid file. */
void sv_component_stop(struct sv_component *c);

/* "<run_dir>/<name>.pid" written atomically with "<pid> <starttime>\n",
 * and read back: 0, or negative when missing or malformed. */
int sv_pidfile_write(const char *name, pid_t pid, uint64_t starttime);
int sv_pidfile_read(const char *name, pid_t *pid, uint64_t *starttime);
void sv_pidfile_remove(const char *name);
#endif
