/*
 * orchard-watchdog: the first process of every local sandbox.
 *
 *   orchard-watchdog --ttl SECONDS [--user UID:GID] [--cgroup PROCS_FILE]...
 *                    [--slirp4netns PATH] -- PROGRAM [ARG]...
 *
 * The controller starts it with posix_spawn, which does not copy the
 * controller's address space, and it does what must happen after the
 * controller has let go but before anything of the sandbox runs:
 *
 *  1. join the sandbox's cgroups (writing "0" to each cgroup.procs file,
 *     while still privileged). Joining a cgroup v1 hierarchy waits for an
 *     RCU grace period; here that wait is the sandbox's, not the
 *     controller's;
 *  2. with --slirp4netns, move into a network namespace of the sandbox's
 *     own with egress only through slirp4netns (netns.c), which PROGRAM
 *     inherits;
 *  3. drop to the sandbox's unprivileged identity and set no_new_privs;
 *  4. start PROGRAM with posix_spawn (bubblewrap, with --die-with-parent: the sandbox dies
 *     when we do, so killing this process kills the sandbox);
 *  5. kill PROGRAM with SIGKILL when the TTL runs out. That is the TTL's
 *     enforcement while the controller is down (issue 5 §4).
 *
 * SIGTERM, SIGINT, SIGHUP and SIGQUIT are passed on to PROGRAM. We exit
 * with PROGRAM's status (128 + signal when it was killed). Every failure
 * is one line on stderr, which is the sandbox's log, whose last line the
 * controller reports.
 *
 * It is static and uses libc alone: it starts in a fraction of the time
 * of a dynamically linked coreutils timeout(1), which this replaces.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "watchdog.h"

#define MAX_CGROUPS 16
#define MAX_TTL_S   (10LL * 365 * 86400)

struct watchdog {
	long long ttl_s;
	int drop;              /* --user given */
	uid_t uid;
	gid_t gid;
	const char *cgroups[MAX_CGROUPS];
	size_t ncgroups;
	char *slirp4netns;         /* --slirp4netns: a network namespace of its own */
	char **argv;           /* PROGRAM and its arguments */
};

void watchdog_die(const char *what, int err)
{
	if (err)
		fprintf(stderr, "orchard-watchdog: %s: %s\n", what, strerror(err));
	else
		fprintf(stderr, "orchard-watchdog: %s\n", what);
	exit(127);
}

static int parse_ll(long long *out, const char *s, long long lo, long long hi)
{
	char *end;
	long long v;

	if (!s || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

static int parse_user(struct watchdog *w, const char *s)
{
	const char *colon = s ? strchr(s, ':') : NULL;
	char uidbuf[16];
	long long uid, gid;

	if (!colon || (size_t)(colon - s) >= sizeof(uidbuf))
		return -1;
	memcpy(uidbuf, s, (size_t)(colon - s));
	uidbuf[colon - s] = '\0';
	if (parse_ll(&uid, uidbuf, 0, 0x7fffffff) < 0 || parse_ll(&gid, colon + 1, 0, 0x7fffffff) < 0)
		return -1;
	w->uid = (uid_t)uid;
	w->gid = (gid_t)gid;
	w->drop = 1;
	return 0;
}

static void parse_args(struct watchdog *w, int argc, char **argv)
{
	int i;

	w->ttl_s = -1;
	for (i = 1; i < argc; i++) {
		const char *opt = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(opt, "--")) {
			i++;
			break;
		}
		if (!strcmp(opt, "--ttl")) {
			if (parse_ll(&w->ttl_s, val, 1, MAX_TTL_S) < 0)
				watchdog_die("--ttl wants a number of seconds (1 or more)", 0);
		} else if (!strcmp(opt, "--user")) {
			if (parse_user(w, val) < 0)
				watchdog_die("--user wants UID:GID", 0);
		} else if (!strcmp(opt, "--slirp4netns")) {
			if (!val || val[0] != '/')
				watchdog_die("--slirp4netns wants an absolute path", 0);
			w->slirp4netns = argv[i + 1];
		} else if (!strcmp(opt, "--cgroup")) {
			if (!val || w->ncgroups == MAX_CGROUPS)
				watchdog_die("--cgroup wants a cgroup.procs file (at most 16)", 0);
			w->cgroups[w->ncgroups++] = val;
		} else {
			watchdog_die("usage: orchard-watchdog --ttl SECONDS [--user UID:GID] "
			    "[--cgroup PROCS_FILE]... [--slirp4netns PATH] -- PROGRAM [ARG]...", 0);
		}
		i++;
	}
	if (w->ttl_s < 0)
		watchdog_die("--ttl is required", 0);
	if (i >= argc || argv[i][0] != '/')
		watchdog_die("PROGRAM (an absolute path) is required after --", 0);
	w->argv = argv + i;
}

/* Steps 1 to 3: cgroups and the network while privileged, then the
 * sandbox's identity. */
static void enter_sandbox_identity(const struct watchdog *w)
{
	for (size_t i = 0; i < w->ncgroups; i++) {
		int fd = open(w->cgroups[i], O_WRONLY | O_CLOEXEC);
		ssize_t n;

		if (fd < 0)
			watchdog_die("joining its cgroup: open() failed", errno);
		do
			n = write(fd, "0", 1);
		while (n < 0 && errno == EINTR);
		if (n != 1)
			watchdog_die("joining its cgroup: write() failed", errno);
		close(fd);
	}
	if (w->slirp4netns)
		watchdog_netns_enter(w->slirp4netns);
	if (w->drop && (setgroups(0, NULL) < 0 || setgid(w->gid) < 0 || setuid(w->uid) < 0))
		watchdog_die("dropping privileges failed", errno);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		watchdog_die("no_new_privs failed", errno);
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int exit_code(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 127;
}

/* Steps 4 and 5. */
static int supervise(const struct watchdog *w)
{
	static const int passed_on[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT };
	int64_t deadline = mono_ms() + w->ttl_s * 1000;
	posix_spawnattr_t attr;
	sigset_t waitset, old;
	int status, rc;
	pid_t pid;

	/* Inherited SIG_IGN would reap PROGRAM behind our back. */
	signal(SIGCHLD, SIG_DFL);
	sigemptyset(&waitset);
	sigaddset(&waitset, SIGCHLD);
	for (size_t i = 0; i < sizeof(passed_on) / sizeof(*passed_on); i++)
		sigaddset(&waitset, passed_on[i]);
	sigprocmask(SIG_BLOCK, &waitset, &old);

	/* posix_spawn (clone with CLONE_VM|CLONE_VFORK): no page tables to
	 * copy and no copy-on-write faults afterwards; the child gets back
	 * the signal mask we were started with. */
	if (posix_spawnattr_init(&attr) != 0 ||
	    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK) != 0 ||
	    posix_spawnattr_setsigmask(&attr, &old) != 0)
		watchdog_die("posix_spawnattr failed", errno);
	rc = posix_spawn(&pid, w->argv[0], NULL, &attr, w->argv, environ);
	posix_spawnattr_destroy(&attr);
	if (rc != 0) {
		fprintf(stderr, "orchard-watchdog: execve() \"%s\" failed: %s\n", w->argv[0], strerror(rc));
		exit(127);
	}
	for (;;) {
		int64_t left;
		struct timespec ts;
		int sig;

		if (waitpid(pid, &status, WNOHANG) == pid)
			return exit_code(status);
		left = deadline - mono_ms();
		if (left <= 0)
			break;
		ts.tv_sec = (time_t)(left / 1000);
		ts.tv_nsec = (long)(left % 1000) * 1000000;
		sig = sigtimedwait(&waitset, NULL, &ts);
		if (sig > 0 && sig != SIGCHLD)
			kill(pid, sig);
	}
	fprintf(stderr, "orchard-watchdog: the sandbox's TTL (%llds) ran out: killing it\n", w->ttl_s);
	kill(pid, SIGKILL);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return exit_code(status);
}

int main(int argc, char **argv)
{
	struct watchdog w;

	memset(&w, 0, sizeof(w));
	parse_args(&w, argc, argv);
	enter_sandbox_identity(&w);
	return supervise(&w);
}
