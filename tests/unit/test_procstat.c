/*
 * lib/procstat.c: a process's identity (pid and start time) read from
 * /proc, so that a pid file naming a reused pid is not trusted. A child
 * with a command name full of parentheses and spaces is read, then seen
 * as a zombie and as gone.
 */
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "err.h"
#include "procstat.h"
#include "unit.h"

static void procstat_identity_of_a_child(void)
{
	struct orc_proc_stat st, again;
	int go[2], status;
	pid_t pid;
	char b;

	if (pipe(go) < 0) {
		CHECK(!"pipe");
		return;
	}
	if ((pid = fork()) == 0) {
		prctl(PR_SET_NAME, "a) b (c) 1 2", 0, 0, 0);
		setsid();   /* a session of its own, as the agent's commands */
		close(go[0]);
		if (write(go[1], "r", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(go[1]);
	CHECK(read(go[0], &b, 1) == 1);
	close(go[0]);

	CHECK(orc_proc_stat(&st, pid) == 0);
	CHECK_STR(st.comm, "a) b (c) 1 2");
	CHECK(st.ppid == getpid());
	CHECK(st.session == pid && st.session != getsid(0));
	CHECK(st.state != 'Z' && st.starttime > 0);
	CHECK(orc_proc_stat(&again, getpid()) == 0 && again.starttime <= st.starttime);
	CHECK(orc_proc_is(pid, st.starttime) == 1);
	CHECK(orc_proc_is(pid, st.starttime + 1) == 0);   /* another process with that pid */
	CHECK(orc_proc_is(0, st.starttime) == 0);

	kill(pid, SIGKILL);
	while (orc_proc_stat(&again, pid) == 0 && again.state != 'Z')
		usleep(1000);
	CHECK(orc_proc_is(pid, st.starttime) == 0);        /* a zombie is not alive */
	CHECK(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status));
	CHECK(orc_proc_stat(&again, pid) == ORC_ENOTFOUND);
	CHECK(orc_proc_is(pid, st.starttime) == 0);
}

const struct unit_test procstat_tests[] = {
	{ "procstat_identity_of_a_child", procstat_identity_of_a_child },
	{ NULL, NULL },
};
