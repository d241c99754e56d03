/*
 * The local driver's work off the reconcile loop (local.h,
 * "local_job.c"): a checkpoint's copy (checkpoint_local.c) and a fork's
 * launch (local_create.c) each run in a helper process, a fork of the
 * controller that runs one function, writes its result to a pipe of its
 * own, closes it and then writes a byte to the driver's wake pipe. The
 * loop polls the wake pipe (ops->jobs_fd), so a result is read as soon as
 * it is there, and serves every other sandbox meanwhile. The result goes
 * through a pipe rather than the exit status because ctl_spawn_reap()
 * collects every child. The helpers, and the commands they run with
 * local_job_run_cps(), die with the controller (PR_SET_PDEATHSIG), so a
 * crash leaves no writer in what the next controller removes or takes
 * again.
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

#define RESULT_MAX 65536
#define CP_BIN "/bin/cp"

extern char **environ;

struct local_job {
	enum local_job_kind kind;
	char *key;          /* the checkpoint (a copy) or the sandbox (a launch) */
	char *sandbox;
	pid_t pid;
	int fd;             /* read end of the helper's result pipe */
	int froze;          /* a copy froze the sandbox: thaw when done */
	struct orc_buf out; /* what the helper wrote so far */
};

int local_job_wake_open(struct local *l)
{
	if (pipe2(l->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
		l->wake[0] = l->wake[1] = -1;
		return ORC_ERROR;
	}
	return 0;
}

int local_jobs_fd(struct ctl_driver *d)
{
	return L(d)->wake[0];
}

void local_jobs_drain(struct ctl_driver *d)
{
	char buf[256];

	if (L(d)->wake[0] < 0)
		return;
	while (read(L(d)->wake[0], buf, sizeof(buf)) > 0 || errno == EINTR)
		;
}

int local_job_run_cps(char ***argvs, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		int status;
		pid_t pid = fork();
		if (pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			execve(CP_BIN, argvs[i], environ);
			_exit(127);
		}
		while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		if (pid < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
			return (int)i + 1;
	}
	return 0;
}

void local_job_write(int fd, const char *data, size_t len)
{
	ssize_t w;

	while (len) {
		if ((w = write(fd, data, len)) < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		data += w;
		len -= (size_t)w;
	}
}

static void helper(struct local *l, pid_t parent, int wfd, local_job_fn fn, void *arg)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(1);
	/* The parent's bookkeeping of other jobs and watches is not ours to
	 * act on (a destroy here must not cancel a sibling). */
	l->njobs = 0;
	l->nwatches = 0;
	fn(wfd, arg);
	/* EOF on the result first, then the wake-up: the loop that wakes
	 * finds the result complete. */
	close(wfd);
	local_job_write(l->wake[1], "", 1);
	_exit(0);
}

int local_job_start(struct local *l, char **why, enum local_job_kind kind, const char *key,
		    const char *sandbox, int froze, local_job_fn fn, void *arg)
{
	struct local_job *j;
	pid_t pid, parent = getpid();
	int p[2];

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
		/* blocking writes: the parent reads while we run */
		fcntl(p[1], F_SETFL, 0);
		helper(l, parent, p[1], fn, arg);
	}
	close(p[1]);
	if (l->njobs == l->ajobs) {
		l->ajobs = l->ajobs ? orc_mul_size(l->ajobs, 2) : 4;
		l->jobs = xrealloc(l->jobs, orc_mul_size(l->ajobs, sizeof(*l->jobs)));
	}
	j = &l->jobs[l->njobs++];
	j->kind = kind;
	j->key = xstrdup(key);
	j->sandbox = xstrdup(sandbox);
	j->pid = pid;
	j->fd = p[0];
	j->froze = froze;
	orc_buf_init(&j->out, RESULT_MAX);
	return 0;
}

static struct local_job *find(struct local *l, enum local_job_kind kind, const char *key,
			      const char *sandbox)
{
	size_t i;

	for (i = 0; i < l->njobs; i++)
		if (l->jobs[i].kind == kind && ((key && !strcmp(l->jobs[i].key, key)) ||
		    (sandbox && !strcmp(l->jobs[i].sandbox, sandbox))))
			return &l->jobs[i];
	return NULL;
}

int local_job_busy(struct local *l, enum local_job_kind kind, const char *key, const char *sandbox)
{
	struct local_job *j = find(l, kind, key, NULL);

	if (!j && sandbox)
		j = find(l, kind, NULL, sandbox);
	return j ? (strcmp(j->key, key) ? 2 : 1) : 0;
}

size_t local_job_count(struct local *l, enum local_job_kind kind)
{
	size_t i, n = 0;

	for (i = 0; i < l->njobs; i++)
		n += l->jobs[i].kind == kind;
	return n;
}

static void job_free(struct local *l, struct local_job *j, int *froze_out, char **sandbox_out,
		     struct orc_buf *out)
{
	close(j->fd);
	waitpid(j->pid, NULL, WNOHANG);
	if (froze_out)
		*froze_out = j->froze;
	if (sandbox_out)
		*sandbox_out = j->sandbox;
	else
		free(j->sandbox);
	if (out) {
		orc_buf_release(out);
		*out = j->out;
	} else {
		orc_buf_release(&j->out);
	}
	free(j->key);
	*j = l->jobs[--l->njobs];
}

int local_job_poll(struct local *l, struct orc_buf *out, int *froze_out, enum local_job_kind kind,
		   const char *key)
{
	struct local_job *j = find(l, kind, key, NULL);
	char buf[4096];
	ssize_t got;

	if (!j)
		return ORC_ENOTFOUND;
	for (;;) {
		got = read(j->fd, buf, sizeof(buf));
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0 && errno == EAGAIN)
			return 1;
		if (got <= 0)
			break;   /* EOF: the helper is done (or died before it answered) */
		orc_buf_add(&j->out, buf, (size_t)got);   /* past RESULT_MAX: cut */
	}
	job_free(l, j, froze_out, NULL, out);
	return 0;
}

char *local_job_cancel(struct local *l, int *froze_out, enum local_job_kind kind, const char *key)
{
	struct local_job *j = find(l, kind, key, NULL);
	char *sandbox = NULL;
	pid_t pid;

	*froze_out = 0;
	if (!j)
		return NULL;
	pid = j->pid;
	kill(pid, SIGKILL);
	job_free(l, j, froze_out, &sandbox, NULL);
	/* Gone before the caller removes what it was writing (its own
	 * children die with it). */
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
	return sandbox;
}

void local_job_release(struct local *l)
{
	/* The helpers die with the controller (PR_SET_PDEATHSIG); a job left
	 * unfinished is the next controller's to remove or take again. */
	while (l->njobs)
		job_free(l, &l->jobs[l->njobs - 1], NULL, NULL, NULL);
	free(l->jobs);
	l->jobs = NULL;
	l->ajobs = 0;
	if (l->wake[0] >= 0)
		close(l->wake[0]);
	if (l->wake[1] >= 0)
		close(l->wake[1]);
	l->wake[0] = l->wake[1] = -1;
}
