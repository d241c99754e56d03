/*
 * Launching a sandbox process that is not our child: fork, setsid, fork
 * again, exec. The grandchild is reparented to init (or the nearest
 * subreaper), has its own session, and lives on when the controller dies.
 *
 * Between fork and exec only async-signal-safe calls; an exec failure is
 * reported over a CLOEXEC pipe (git's run-command).
 */
#include "local.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "err.h"
#include "log.h"
#include "strutil.h"

#define INFO_FD 3
#define ERR_FD 4
#define INFO_MAX 4096

static void child_fail(int fd, int stage)
{
	int e[2] = { stage, errno };
	ssize_t r;

	do
		r = write(fd, e, sizeof(e));
	while (r < 0 && errno == EINTR);
	_exit(127);
}

/* The grandchild: set up fds, identity and signals, then exec. */
static void child_exec(const struct ctl_spawn *sp, int devnull, int info_w, int err_w)
{
	struct sigaction sa;
	sigset_t none;
	int hi_null, hi_log, hi_info, hi_err;
	int sig;

	/* Move everything above the target numbers first so dup2 cannot
	 * clobber a source. */
	hi_err = fcntl(err_w, F_DUPFD_CLOEXEC, 16);
	if (hi_err < 0)
		_exit(127);
	if ((hi_null = fcntl(devnull, F_DUPFD_CLOEXEC, 16)) < 0 ||
	    (hi_log = fcntl(sp->log_fd, F_DUPFD_CLOEXEC, 16)) < 0 ||
	    (hi_info = fcntl(info_w, F_DUPFD_CLOEXEC, 16)) < 0)
		child_fail(hi_err, 1);
	if (dup2(hi_null, 0) < 0 || dup2(hi_log, 1) < 0 || dup2(hi_log, 2) < 0 ||
	    dup2(hi_info, INFO_FD) < 0 || dup3(hi_err, ERR_FD, O_CLOEXEC) < 0)
		child_fail(hi_err, 1);
	if (close_range(ERR_FD + 1, ~0U, 0) < 0) {
		for (int fd = ERR_FD + 1; fd < 1024; fd++)
			close(fd);
	}

	/* The controller blocks SIGTERM/SIGINT and ignores SIGPIPE; none of
	 * that may leak into the sandbox. */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	for (sig = 1; sig < NSIG; sig++)
		sigaction(sig, &sa, NULL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);

	/* Into the sandbox's cgroups ("0": this process) before anything of
	 * the sandbox runs, and while we may still write there. */
	for (char *const *cg = sp->cgroup_procs; cg && *cg; cg++) {
		int fd = open(*cg, O_WRONLY | O_CLOEXEC);
		if (fd < 0 || write(fd, "0", 1) != 1)
			child_fail(ERR_FD, 6);
		close(fd);
	}
	if (sp->drop_privileges) {
		if (setgroups(0, NULL) < 0 || setgid(sp->gid) < 0 || setuid(sp->uid) < 0)
			child_fail(ERR_FD, 2);
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		child_fail(ERR_FD, 3);
	execve(sp->argv[0], sp->argv, sp->envp);
	child_fail(ERR_FD, 4);
}

static const char *const stage_names[] = {
	"?", "dup2", "dropping privileges", "no_new_privs", "execve", "fork", "joining its cgroup",
};

/* 0 when exec happened (EOF), ORC_ERROR with the child's report. */
static int read_exec_status(int fd, const char *prog)
{
	int e[2];
	ssize_t r;
	char msg[64];

	do
		r = read(fd, e, sizeof(e));
	while (r < 0 && errno == EINTR);
	if (r == 0)
		return 0;
	if (r == (ssize_t)sizeof(e) && e[0] > 0 && e[0] < (int)(sizeof(stage_names) / sizeof(*stage_names))) {
		orc_log(ORC_LOG_ERROR, "sandbox launch failed", "stage", stage_names[e[0]],
			"program", prog, "error", strerror(e[1]), NULL);
	} else {
		snprintf(msg, sizeof(msg), "%zd", r);
		orc_log(ORC_LOG_ERROR, "sandbox launch failed", "program", prog, "read", msg, NULL);
	}
	return ORC_ERROR;
}

/* Parse "child-pid": N out of bwrap's info JSON. */
static int info_child_pid(pid_t *out, const char *s)
{
	const char *p = strstr(s, "\"child-pid\"");
	char *end;
	long v;

	if (!p || !(p = strchr(p, ':')))
		return ORC_EINVALID;
	errno = 0;
	v = strtol(p + 1, &end, 10);
	if (errno || end == p + 1 || v <= 1 || v > 0x3fffffff)
		return ORC_EINVALID;
	*out = (pid_t)v;
	return 0;
}

static int read_info(pid_t *out, int fd, int64_t timeout_ms)
{
	char buf[INFO_MAX];
	size_t len = 0;
	int64_t deadline = orc_mono_ms() + timeout_ms, left;
	struct pollfd pfd = { fd, POLLIN, 0 };
	ssize_t r;
	int pr;

	for (;;) {
		left = deadline - orc_mono_ms();
		if (left <= 0)
			return ORC_ETIMEOUT;
		pr = poll(&pfd, 1, (int)left);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr < 0)
			return ORC_ERROR;
		if (pr == 0)
			return ORC_ETIMEOUT;
		r = read(fd, buf + len, sizeof(buf) - 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;  /* EOF: bwrap finished writing, or died */
		len += (size_t)r;
		buf[len] = '\0';
		/* bwrap writes one object; its closing brace ends it. */
		if (strchr(buf, '}') || len == sizeof(buf) - 1)
			break;
	}
	buf[len] = '\0';
	return info_child_pid(out, buf);
}

int ctl_spawn_detached(pid_t *out, const struct ctl_spawn *sp)
{
	int info[2] = { -1, -1 }, errp[2] = { -1, -1 };
	int devnull = -1, status, err = 0;
	pid_t a, b, ns_init;

	if ((devnull = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0 ||
	    pipe2(info, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0) {
		orc_log(ORC_LOG_ERROR, "sandbox launch: pipe() failed", "error", strerror(errno), NULL);
		err = ORC_ERROR;
		goto done;
	}
	a = fork();
	if (a < 0) {
		orc_log(ORC_LOG_ERROR, "sandbox launch: fork() failed", "error", strerror(errno), NULL);
		err = ORC_ERROR;
		goto done;
	}
	if (a == 0) {
		setsid();
		b = fork();
		if (b < 0)
			child_fail(errp[1], 5);
		if (b == 0)
			child_exec(sp, devnull, info[1], errp[1]);
		_exit(0);
	}
	while (waitpid(a, &status, 0) < 0 && errno == EINTR)
		;
	close(info[1]);
	info[1] = -1;
	close(errp[1]);
	errp[1] = -1;
	if ((err = read_exec_status(errp[0], sp->argv[0])) < 0)
		goto done;
	if ((err = read_info(&ns_init, info[0], sp->timeout_ms)) < 0) {
		orc_log(ORC_LOG_ERROR, "sandbox launch: bwrap did not report its child pid",
			"error", orc_err_name(err), NULL);
		err = err == ORC_ETIMEOUT ? err : ORC_ERROR;
		goto done;
	}
	*out = ns_init;
done:
	if (devnull >= 0)
		close(devnull);
	for (int i = 0; i < 2; i++) {
		if (info[i] >= 0)
			close(info[i]);
		if (errp[i] >= 0)
			close(errp[i]);
	}
	return err;
}
