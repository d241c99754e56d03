#ifndef AGENT_REAPER_H
#define AGENT_REAPER_H
#include <sys/types.h>
/*
 * The one place that calls waitpid(). The agent may be PID 1 of its pid
 * namespace, so orphans re-parented to it must be reaped; doing that with
 * waitpid(-1) must not steal the exit status of a command an exec is
 * waiting for. So children are "watched": the reaper records the status of
 * a watched pid and wakes its waiter through a pipe; any other pid is just
 * reaped and forgotten.
 *
 *   struct agent_child c = AGENT_CHILD_INIT;
 *   agent_reaper_lock();
 *   pid = fork();                      // child: only async-signal-safe calls
 *   agent_child_watch_locked(&c, pid); // before the reaper can see it exit
 *   agent_reaper_unlock();
 *   poll() on c.fd ...; agent_child_exited(&c, &status);
 *   agent_child_release(&c);
 *
 * agent_reaper_start() starts the thread that reaps on SIGCHLD (and every
 * second); SIGCHLD must be blocked in every thread before it is called.
 */
struct agent_child {
	pid_t pid;
	int status;
	int exited;
	int fd;                /* readable once the child has been reaped */
	int notify_w;
	struct agent_child *next;
};

#define AGENT_CHILD_INIT { 0, 0, 0, -1, -1, NULL }

void agent_reaper_lock(void);
void agent_reaper_unlock(void);

/* With the lock held, right after fork(). ORC_ERROR if no pipe could be
 * made (the caller should kill the child). */
int agent_child_watch_locked(struct agent_child *c, pid_t pid);
/* 1 and the wait status when the child has been reaped, else 0. */
int agent_child_exited(struct agent_child *c, int *status_out);
/* Send sig to the child's process group unless the child has already been
 * reaped (its pid, and so its group id, may then belong to someone else).
 * Returns 1 when the signal was sent. */
int agent_child_kill_group(struct agent_child *c, int sig);
/* Stop watching and close the pipe; harmless twice. An unreaped child is
 * left to be reaped as an orphan. */
void agent_child_release(struct agent_child *c);

/* Reap every child that has exited (waitpid(-1, WNOHANG) until none). */
void agent_reaper_reap(void);
int agent_reaper_start(void);
#endif
