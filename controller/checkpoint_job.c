/*
 * The copy backend's checkpoint copies, run off the reconcile loop
 * (local.h, "checkpoint_job.c"): one helper process per checkpoint runs
 * the `cp` commands in order and reports through a pipe, so the loop
 * only polls. The result goes through the pipe rather than the exit
 * status because ctl_spawn_reap() collects every child. The helper and
 * its cp die with the controller (PR_SET_PDEATHSIG), so a crash leaves
 * no writer in a .partial that the next controller removes.
 */
#include "local.h"
#include "local_driver.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "xalloc.h"

#define CP_BIN "/bin/cp"

extern char **environ;

struct ckpt_job {
	char *ckpt;
	char *sandbox;
	pid_t pid;
	int fd;         /* read end: one byte (0 ok, else the failing step + 1), then EOF */
	int froze;      /* we froze the sandbox for it: thaw when done */
};

/* In the helper: only async-signal-safe calls from here on. */
static void helper(int wfd, char ***argvs, size_t n, int64_t delay_ms)
{
	struct timespec ts = { delay_ms / 1000, (delay_ms % 1000) * 1000000 };
	unsigned char rc = 0;
	size_t i;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() == 1)
		_exit(1);
	for (i = 0; i < n && !rc; i++) {
		int status;
		pid_t pid = fork();
		if (pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			execve(CP_BIN, argvs[i], environ);
			_exit(127);
		}
		if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
		    WEXITSTATUS(status) != 0)
			rc = (unsigned char)(i + 1);
	}
	/* ORCHARD_TEST_CHECKPOINT_DELAY_MS: copied, not yet answered */
	while (delay_ms > 0 && nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
	while (write(wfd, &rc, 1) < 0 && errno == EINTR)
		;
	_exit(0);
}

int local_copy_start(struct local *l, char **why, const char *ckpt, const char *sandbox,
		     int froze, char ***argvs, size_t n, int64_t delay_ms)
{
	struct ckpt_job *j;
	int p[2];
	pid_t pid;

	if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0) {
		*why = xasprintf("pipe() failed: %s", strerror(errno));
		return ORC_ERROR;
	}
	if ((pid = fork()) < 0) {
		*why = xasprintf("fork() failed: %s", strerror(errno));
		close(p[0]);
		close(p[1]);
		return ORC_ERROR;
	}
	if (pid == 0) {
		close(p[0]);
		helper(p[1], argvs, n, delay_ms);
	}
	close(p[1]);
	if (l->njobs == l->ajobs) {
		l->ajobs = l->ajobs ? orc_mul_size(l->ajobs, 2) : 4;
		l->jobs = xrealloc(l->jobs, orc_mul_size(l->ajobs, sizeof(*l->jobs)));
	}
	j = &l->jobs[l->njobs++];
	j->ckpt = xstrdup(ckpt);
	j->sandbox = xstrdup(sandbox);
	j->pid = pid;
	j->fd = p[0];
	j->froze = froze;
	return 0;
}

static struct ckpt_job *find(struct local *l, const char *ckpt, const char *sandbox)
{
	size_t i;

	for (i = 0; i < l->njobs; i++)
		if ((ckpt && !strcmp(l->jobs[i].ckpt, ckpt)) ||
		    (sandbox && !strcmp(l->jobs[i].sandbox, sandbox)))
			return &l->jobs[i];
	return NULL;
}

int local_copy_busy(struct local *l, const char *ckpt, const char *sandbox)
{
	struct ckpt_job *j = find(l, ckpt, NULL);

	if (!j)
		j = find(l, NULL, sandbox);
	return j ? (strcmp(j->ckpt, ckpt) ? 2 : 1) : 0;
}

static void job_free(struct local *l, struct ckpt_job *j, int *froze_out, char **sandbox_out)
{
	close(j->fd);
	waitpid(j->pid, NULL, WNOHANG);
	if (froze_out)
		*froze_out = j->froze;
	if (sandbox_out)
		*sandbox_out = j->sandbox;
	else
		free(j->sandbox);
	free(j->ckpt);
	*j = l->jobs[--l->njobs];
}

int local_copy_poll(struct local *l, int *froze_out, const char *ckpt)
{
	struct ckpt_job *j = find(l, ckpt, NULL);
	unsigned char rc = 1;
	ssize_t got;

	if (!j)
		return ORC_ERROR;
	while ((got = read(j->fd, &rc, 1)) < 0 && errno == EINTR)
		;
	if (got < 0 && errno == EAGAIN)
		return 1;
	/* got == 0: the helper died before it answered */
	job_free(l, j, froze_out, NULL);
	return got == 1 && rc == 0 ? 0 : ORC_ERROR;
}

char *local_copy_cancel(struct local *l, int *froze_out, const char *ckpt)
{
	struct ckpt_job *j = find(l, ckpt, NULL);
	char *sandbox = NULL;

	*froze_out = 0;
	if (!j)
		return NULL;
	kill(j->pid, SIGKILL);
	job_free(l, j, froze_out, &sandbox);
	return sandbox;
}

void local_copy_release(struct local *l)
{
	/* The helpers die with the controller (PR_SET_PDEATHSIG); a job left
	 * unfinished is the next controller's to remove. */
	while (l->njobs)
		job_free(l, &l->jobs[l->njobs - 1], NULL, NULL);
	free(l->jobs);
	l->jobs = NULL;
	l->ajobs = 0;
}
