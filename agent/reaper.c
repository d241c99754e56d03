#include "reaper.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/wait.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "log.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct agent_child *watched;

void agent_reaper_lock(void)
{
	pthread_mutex_lock(&lock);
}

void agent_reaper_unlock(void)
{
	pthread_mutex_unlock(&lock);
}

int agent_child_watch_locked(struct agent_child *c, pid_t pid)
{
	int p[2];

	if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0)
		return ORC_ERROR;
	c->pid = pid;
	c->status = 0;
	c->exited = 0;
	c->fd = p[0];
	c->notify_w = p[1];
	c->next = watched;
	watched = c;
	return 0;
}

int agent_child_exited(struct agent_child *c, int *status_out)
{
	int done;

	pthread_mutex_lock(&lock);
	done = c->exited;
	if (done)
		*status_out = c->status;
	pthread_mutex_unlock(&lock);
	return done;
}

int agent_child_kill_group(struct agent_child *c, int sig)
{
	int sent = 0;

	pthread_mutex_lock(&lock);
	/* pid > 1 so a bug can never become kill(-1) or kill(0). */
	if (!c->exited && c->pid > 1 && kill(-c->pid, sig) == 0)
		sent = 1;
	pthread_mutex_unlock(&lock);
	return sent;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

void agent_child_release(struct agent_child *c)
{
	struct agent_child **pp;

	pthread_mutex_lock(&lock);
	for (pp = &watched; *pp; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	}
	c->next = NULL;
	close_fd(&c->fd);
	close_fd(&c->notify_w);
	pthread_mutex_unlock(&lock);
}

void agent_reaper_reap(void)
{
	struct agent_child *c;
	int status;
	pid_t pid;

	pthread_mutex_lock(&lock);
	for (;;) {
		pid = waitpid(-1, &status, WNOHANG);
		if (pid < 0 && errno == EINTR)
			continue;
		if (pid <= 0)
			break;
		for (c = watched; c; c = c->next) {
			if (c->pid == pid && !c->exited) {
				ssize_t w;
				c->exited = 1;
				c->status = status;
				do
					w = write(c->notify_w, "x", 1);
				while (w < 0 && errno == EINTR);
				break;
			}
		}
	}
	pthread_mutex_unlock(&lock);
}

/*
 * SIGCHLD is blocked in every thread; this one takes it. None is missed:
 * a child that exits after the last waitpid() leaves SIGCHLD pending, and
 * sigtimedwait() returns at once. The tick is only a backstop, and long,
 * because a thousand idle sandboxes each waking every second cost about 1 %
 * of the host's CPU. A thread of its own, so reaping goes on while the main
 * thread is busy stopping the server.
 */
static void *reaper_main(void *arg)
{
	struct timespec tick = { 60, 0 };
	sigset_t set;

	(void)arg;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	for (;;) {
		sigtimedwait(&set, NULL, &tick);
		agent_reaper_reap();
	}
	return NULL;
}

int agent_reaper_start(void)
{
	pthread_attr_t attr;
	pthread_t t;
	int rc;

	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&t, &attr, reaper_main, NULL);
	pthread_attr_destroy(&attr);
	if (rc != 0) {
		orc_log(ORC_LOG_ERROR, "starting the reaper thread failed", NULL);
		return ORC_ERROR;
	}
	return 0;
}
