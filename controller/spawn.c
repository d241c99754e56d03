/*
 * Launching a sandbox process that is not our child: fork, setsid, fork
 * again, exec. The grandchild is reparented to init (or the nearest
 * subreaper), has its own session, and lives on when the controller dies.
 * We wait only for the intermediate process, never for the sandbox.
 *
 * Between fork and exec only async-signal-safe calls; a failure before
 * exec is written to the sandbox's log, whose last line the controller
 * reports when the sandbox is found dead.
 */
#include "local.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "err.h"
#include "log.h"
#include "strutil.h"

#define SECCOMP_FD CTL_SPAWN_SECCOMP_FD

static const char *const stage_names[] = {
	"?", "dup2", "dropping privileges", "no_new_privs", "execve", "fork", "joining its cgroup",
};

/* Report why we could not exec on fd (the sandbox's log, read by the
 * controller's diagnose) and die; async-signal-safe. */
static void child_fail(int fd, int stage)
{
	char msg[160], num[16];
	size_t len = 0, n;
	int e = errno, i = 0;
	const char *parts[3] = { "orchard-controller: sandbox launch failed: ", stage_names[stage],
				 " (errno " };

	for (size_t k = 0; k < 3; k++) {
		n = strlen(parts[k]);
		if (len + n < sizeof(msg)) {
			memcpy(msg + len, parts[k], n);
			len += n;
		}
	}
	do
		num[i++] = (char)('0' + e % 10);
	while ((e /= 10) > 0 && i < (int)sizeof(num));
	while (i > 0 && len < sizeof(msg) - 3)
		msg[len++] = num[--i];
	msg[len++] = ')';
	msg[len++] = '\n';
	while (write(fd, msg, len) < 0 && errno == EINTR)
		;
	_exit(127);
}

/* The grandchild: set up fds, cgroups, identity and signals, then exec. */
static void child_exec(const struct ctl_spawn *sp, int devnull)
{
	struct sigaction sa;
	sigset_t none;
	int hi_null, hi_log, hi_sc = -1;
	int sig;

	/* Move everything above the target numbers first so dup2 cannot
	 * clobber a source. */
	if ((hi_log = fcntl(sp->log_fd, F_DUPFD_CLOEXEC, 16)) < 0)
		_exit(127);
	if ((hi_null = fcntl(devnull, F_DUPFD_CLOEXEC, 16)) < 0 ||
	    (sp->seccomp_fd >= 0 && (hi_sc = fcntl(sp->seccomp_fd, F_DUPFD_CLOEXEC, 16)) < 0))
		child_fail(hi_log, 1);
	if (dup2(hi_null, 0) < 0 || dup2(hi_log, 1) < 0 || dup2(hi_log, 2) < 0 ||
	    (hi_sc >= 0 && dup2(hi_sc, SECCOMP_FD) < 0))
		child_fail(hi_log, 1);
	if (hi_sc < 0)
		close(SECCOMP_FD);
	if (close_range(SECCOMP_FD + 1, ~0U, 0) < 0) {
		for (int fd = SECCOMP_FD + 1; fd < 1024; fd++)
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
			child_fail(2, 6);
		close(fd);
	}
	if (sp->drop_privileges) {
		if (setgroups(0, NULL) < 0 || setgid(sp->gid) < 0 || setuid(sp->uid) < 0)
			child_fail(2, 2);
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		child_fail(2, 3);
	execve(sp->argv[0], sp->argv, sp->envp);
	child_fail(2, 4);
}

int ctl_spawn_detached(pid_t *out, const struct ctl_spawn *sp)
{
	int pidp[2] = { -1, -1 };
	int devnull = -1, status, err = 0;
	pid_t a, b = -1;
	ssize_t r;

	if ((devnull = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0 || pipe2(pidp, O_CLOEXEC) < 0) {
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
		if (b == 0)
			child_exec(sp, devnull);
		/* Tell the controller who the sandbox's process is (or -1). */
		do
			r = write(pidp[1], &b, sizeof(b));
		while (r < 0 && errno == EINTR);
		_exit(0);
	}
	while (waitpid(a, &status, 0) < 0 && errno == EINTR)
		;
	close(pidp[1]);
	pidp[1] = -1;
	/*
	 * Not waiting for the exec: joining cgroup v1 hierarchies costs an RCU
	 * grace period each (tens of ms), so the grandchild does that and the
	 * rest on its own while we launch the next sandbox. A failure before
	 * exec is written to the sandbox's log and the process exits, which
	 * the caller sees as a sandbox that exited before it became ready.
	 */
	do
		r = read(pidp[0], &b, sizeof(b));
	while (r < 0 && errno == EINTR);
	if (r != (ssize_t)sizeof(b) || b <= 1) {
		orc_log(ORC_LOG_ERROR, "sandbox launch: fork() failed in the launcher", NULL);
		err = ORC_ERROR;
		goto done;
	}
	*out = b;
done:
	if (devnull >= 0)
		close(devnull);
	for (int i = 0; i < 2; i++)
		if (pidp[i] >= 0)
			close(pidp[i]);
	return err;
}
