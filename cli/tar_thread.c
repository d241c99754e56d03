/*
 * The thread of a tar stream, shared by tar_create.c (it writes a pipe
 * that curl reads as the request body) and tar_extract.c (it reads a pipe
 * that curl writes the answer into): starting it on its end of a pipe,
 * its first failure message, and waiting for its verdict.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "transfer.h"

#define PIPE_SIZE (1 << 20)

void cli_tar_fail(struct cli_tar *t, const char *fmt, ...)
{
	va_list ap;

	if (t->msg[0])
		return;
	va_start(ap, fmt);
	vsnprintf(t->msg, sizeof(t->msg), fmt, ap);
	va_end(ap);
}

int cli_tar_thread_start(struct cli_tar *t, int *other_fd, int writes, void *(*fn)(void *))
{
	int fds[2], mine, other;

	t->fd = -1;
	signal(SIGPIPE, SIG_IGN);
	if (pipe2(fds, O_CLOEXEC) < 0) {
		cli_error("pipe() failed: %s", strerror(errno));
		return ORC_ERROR;
	}
	mine = writes ? fds[1] : fds[0];
	other = writes ? fds[0] : fds[1];
	(void)fcntl(mine, F_SETPIPE_SZ, PIPE_SIZE);
	t->fd = mine;
	if ((errno = pthread_create(&t->thread, NULL, fn, t)) != 0) {
		cli_error("pthread_create() failed: %s", strerror(errno));
		close(fds[0]);
		close(fds[1]);
		t->fd = -1;
		return ORC_ERROR;
	}
	t->started = 1;
	*other_fd = other;
	return 0;
}

int cli_tar_in_end(void *arg)
{
	struct cli_tar *t = arg;

	return __atomic_load_n(&t->failed, __ATOMIC_SEQ_CST) ? ORC_ERROR : 0;
}

int cli_tar_finish(struct cli_tar *t)
{
	int failed = 0;

	if (t->started) {
		pthread_join(t->thread, NULL);
		t->started = 0;
		failed = t->failed;
	}
	free(t->dir);
	t->dir = NULL;
	if (failed && !t->msg[0])
		snprintf(t->msg, sizeof(t->msg), "the tar stream failed");
	return failed ? ORC_ERROR : 0;
}
