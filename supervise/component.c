/*
 * One supervised process: adopt, start, notice its end, restart with a
 * backoff, stop.
 */
#include "supervise.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "err.h"
#include "io.h"
#include "log.h"
#include "procstat.h"
#include "strutil.h"

/* ---- pid files ---------------------------------------------------------- */

static void pidfile_path(char *buf, size_t len, const char *name, const char *suffix)
{
	snprintf(buf, len, "%s/%s.pid%s", sv_config.run_dir, name, suffix);
}

int sv_pidfile_write(const char *name, pid_t pid, uint64_t starttime)
{
	char path[4096], tmp[4096], line[64];
	int fd, n, err = ORC_ERROR;

	pidfile_path(path, sizeof(path), name, "");
	pidfile_path(tmp, sizeof(tmp), name, ".tmp");
	n = snprintf(line, sizeof(line), "%d %llu\n", (int)pid, (unsigned long long)starttime);
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0) {
		orc_logf(ORC_LOG_ERROR, "open() \"%s\" failed: %s", tmp, strerror(errno));
		return ORC_ERROR;
	}
	if (orc_write_all(fd, line, (size_t)n) < 0) {
		orc_logf(ORC_LOG_ERROR, "write() \"%s\" failed: %s", tmp, strerror(errno));
		goto done;
	}
	if (rename(tmp, path) < 0) {
		orc_logf(ORC_LOG_ERROR, "rename() \"%s\" failed: %s", tmp, strerror(errno));
		goto done;
	}
	err = 0;
done:
	close(fd);
	if (err < 0)
		unlink(tmp);
	return err;
}

/* The first line of path: "<pid>" or "<pid> <starttime>" (starttime 0
 * when absent). */
static int read_pid_line(const char *path, pid_t *pid, uint64_t *starttime)
{
	char buf[256], *end;
	unsigned long long st = 0;
	long v;

	if (orc_read_small(path, buf, sizeof(buf)) <= 0)
		return ORC_ENOTFOUND;
	errno = 0;
	v = strtol(buf, &end, 10);
	if (errno || end == buf || v <= 1 || v > 0x3fffffff)
		return ORC_EINVALID;
	if (*end == ' ') {
		st = strtoull(end + 1, &end, 10);
		if (errno)
			return ORC_EINVALID;
	}
	if (*end != '\n' && *end != '\0')
		return ORC_EINVALID;
	*pid = (pid_t)v;
	*starttime = st;
	return 0;
}

int sv_pidfile_read(const char *name, pid_t *pid, uint64_t *starttime)
{
	char path[4096];

	pidfile_path(path, sizeof(path), name, "");
	return read_pid_line(path, pid, starttime);
}

void sv_pidfile_remove(const char *name)
{
	char path[4096];

	pidfile_path(path, sizeof(path), name, "");
	if (unlink(path) < 0 && errno != ENOENT)
		orc_logf(ORC_LOG_WARN, "unlink() \"%s\" failed: %s", path, strerror(errno));
}

/* ---- adopting ----------------------------------------------------------- */

/* Whether pid's NUL-separated command line holds want as one argument. */
static int cmdline_has(pid_t pid, const char *want)
{
	char path[64], buf[8192];
	ssize_t n;
	size_t off, len;

	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	if ((n = orc_read_small(path, buf, sizeof(buf))) <= 0)
		return 0;
	for (off = 0; off < (size_t)n; off += len + 1) {
		len = strlen(buf + off);
		if (!strcmp(buf + off, want))
			return 1;
	}
	return 0;
}

/* The process c's files name, when it is alive and c's: its pid and start
 * time, else 0. */
static pid_t find_running(const struct sv_component *c, uint64_t *starttime)
{
	struct orc_proc_stat st;
	pid_t pid;
	uint64_t t;

	if (sv_pidfile_read(c->name, &pid, &t) == 0 && t && orc_proc_is(pid, t)) {
		*starttime = t;
		return pid;
	}
	/* Started by someone else (pg_ctl restart): the program's own pid
	 * file, trusted only for a process whose command line names ours. */
	if (c->adopt_file && read_pid_line(c->adopt_file, &pid, &t) == 0 &&
	    orc_proc_stat(&st, pid) == 0 && st.state != 'Z' && st.state != 'X' &&
	    (!c->adopt_match || cmdline_has(pid, c->adopt_match))) {
		*starttime = st.starttime;
		return pid;
	}
	return 0;
}

int sv_component_adopt(struct sv_component *c)
{
	uint64_t starttime = 0;
	pid_t pid;
	int fd;

	if (!(pid = find_running(c, &starttime)))
		return 0;
	if ((fd = pidfd_open(pid, 0)) < 0)
		return 0;
	/* The pidfd pins the pid: check that it is still the same process. */
	if (!orc_proc_is(pid, starttime) || sv_pidfile_write(c->name, pid, starttime) < 0) {
		close(fd);
		return 0;
	}
	c->pid = pid;
	c->starttime = starttime;
	c->pidfd = fd;
	c->child = 0;
	c->held = 0;
	c->started_ms = orc_mono_ms();
	orc_log(ORC_LOG_INFO, "adopted a running process", "process", c->name,
		ORC_LOG_INT("pid", pid), NULL);
	return 1;
}

/* ---- starting ----------------------------------------------------------- */

static void schedule(struct sv_component *c)
{
	int64_t now = orc_mono_ms(), delay = sv_config.backoff_ms;
	unsigned i;

	if (c->started_ms && now - c->started_ms >= sv_config.stable_ms)
		c->failures = 0;
	for (i = 0; i < c->failures && delay < sv_config.backoff_max_ms; i++)
		delay *= 2;
	if (delay > sv_config.backoff_max_ms)
		delay = sv_config.backoff_max_ms;
	c->failures++;
	c->next_start_ms = now + delay;
}

/*
 * Between fork and exec only async-signal-safe calls. The child waits for
 * the parent's go-ahead, sent once the pid file names it: a supervisor
 * killed in between leaves no unrecorded process (the child reads EOF and
 * exits). An exec failure goes back over a CLOEXEC pipe.
 */
static void child_exec(const char *path, char *const argv[], const int go[2], int report_fd)
{
	struct sigaction dfl;
	sigset_t none;
	char b = 0;
	int e, s;

	setsid();
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	for (s = 1; s < NSIG; s++)
		sigaction(s, &dfl, NULL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	close(go[1]);   /* else our own copy would keep the pipe from EOF */
	while (read(go[0], &b, 1) < 0 && errno == EINTR)
		;
	if (b != 'g')
		_exit(0);
	execv(path, argv);
	e = errno;
	while (write(report_fd, &e, sizeof(e)) < 0 && errno == EINTR)
		;
	_exit(127);
}

int sv_component_start(struct sv_component *c)
{
	char *const argv[] = { c->start, NULL };
	int go[2] = { -1, -1 }, report[2] = { -1, -1 }, fd = -1, err = ORC_ERROR, e = 0;
	struct orc_proc_stat st;
	pid_t pid;
	ssize_t n;

	if (pipe2(go, O_CLOEXEC) < 0 || pipe2(report, O_CLOEXEC) < 0) {
		orc_logf(ORC_LOG_ERROR, "pipe2() failed: %s", strerror(errno));
		goto done;
	}
	if ((pid = fork()) < 0) {
		orc_logf(ORC_LOG_ERROR, "fork() failed: %s", strerror(errno));
		goto done;
	}
	if (pid == 0)
		child_exec(c->start, argv, go, report[1]);
	close(report[1]);
	report[1] = -1;
	if (orc_proc_stat(&st, pid) < 0 || (fd = pidfd_open(pid, 0)) < 0 ||
	    sv_pidfile_write(c->name, pid, st.starttime) < 0) {
		orc_log(ORC_LOG_ERROR, "could not record the new process", "process", c->name,
			ORC_LOG_INT("pid", pid), NULL);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		goto done;
	}
	c->pid = pid;
	c->starttime = st.starttime;
	c->pidfd = fd;
	c->child = 1;
	c->started_ms = orc_mono_ms();
	fd = -1;
	if (orc_write_all(go[1], "g", 1) < 0)
		orc_logf(ORC_LOG_ERROR, "write() to the child failed: %s", strerror(errno));
	while ((n = read(report[0], &e, sizeof(e))) < 0 && errno == EINTR)
		;
	if (n == (ssize_t)sizeof(e)) {
		orc_log(ORC_LOG_ERROR, "exec failed", "process", c->name, "start", c->start,
			"error", strerror(e), NULL);
		goto done;   /* the child exits 127: sv_component_exited reaps it */
	}
	orc_log(ORC_LOG_INFO, c->restarts ? "restarted" : "started", "process", c->name,
		ORC_LOG_INT("pid", pid), ORC_LOG_INT("restarts", c->restarts), NULL);
	err = 0;
done:
	if (fd >= 0)
		close(fd);
	for (e = 0; e < 2; e++) {
		if (go[e] >= 0)
			close(go[e]);
		if (report[e] >= 0)
			close(report[e]);
	}
	if (err < 0 && !c->pid)
		schedule(c);
	return err;
}

/* ---- ending ------------------------------------------------------------- */

/* Clear c's process; with group, SIGKILL what is left of its process
 * group (a SIGKILLed nginx master's workers hold the port; PostgreSQL's
 * backends its shared memory). Nothing new can take the group's id while
 * it has members. */
static void forget(struct sv_component *c)
{
	if (c->group)
		kill(-c->pid, SIGKILL);
	close(c->pidfd);
	c->pidfd = -1;
	c->pid = 0;
}

void sv_component_exited(struct sv_component *c)
{
	int status = 0, known = 0;
	int64_t up = orc_mono_ms() - c->started_ms;

	if (c->child) {
		while (waitpid(c->pid, &status, 0) < 0 && errno == EINTR)
			;
		known = 1;
	}
	forget(c);
	if (known && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
		/* Its clean exit on a stop signal: someone stopped it on
		 * purpose. stack.sh up (SIGHUP) starts it again. */
		c->held = 1;
		c->failures = 0;
		sv_pidfile_remove(c->name);
		orc_log(ORC_LOG_WARN, "exited 0; left stopped until scripts/stack.sh up",
			"process", c->name, ORC_LOG_INT("uptime_ms", up), NULL);
		return;
	}
	schedule(c);
	c->restarts++;
	orc_log(ORC_LOG_WARN, "exited; restarting", "process", c->name,
		"how", !known ? "unknown (adopted, not our child)" :
		WIFSIGNALED(status) ? "signal" : "exit status",
		ORC_LOG_INT("code", !known ? -1 : WIFSIGNALED(status) ? WTERMSIG(status) :
			    WEXITSTATUS(status)),
		ORC_LOG_INT("uptime_ms", up),
		ORC_LOG_INT("restart_in_ms", c->next_start_ms - orc_mono_ms()),
		ORC_LOG_INT("restarts", c->restarts), NULL);
}

/* Wait up to ms for c's process to end: 1 when it has. */
static int wait_end(const struct sv_component *c, int64_t ms)
{
	struct pollfd p = { c->pidfd, POLLIN, 0 };
	int64_t deadline = orc_mono_ms() + ms, left;
	int r;

	while ((left = deadline - orc_mono_ms()) > 0) {
		r = poll(&p, 1, (int)(left > 1000 ? 1000 : left));
		if (r > 0)
			return 1;
		if (r < 0 && errno != EINTR)
			break;
	}
	return poll(&p, 1, 0) > 0;
}

void sv_component_stop(struct sv_component *c)
{
	if (!c->pid)
		return;
	orc_log(ORC_LOG_INFO, "stopping", "process", c->name, ORC_LOG_INT("pid", c->pid),
		"signal", strsignal(c->stop_signal), NULL);
	kill(c->pid, c->stop_signal);
	if (!wait_end(c, c->grace_ms)) {
		orc_log(ORC_LOG_WARN, "did not stop in time; killing it", "process", c->name,
			ORC_LOG_INT("pid", c->pid), ORC_LOG_INT("grace_ms", c->grace_ms), NULL);
		kill(c->pid, SIGKILL);
		if (!wait_end(c, 10000))
			orc_log(ORC_LOG_ERROR, "survived SIGKILL", "process", c->name,
				ORC_LOG_INT("pid", c->pid), NULL);
	}
	if (c->child)
		waitpid(c->pid, NULL, WNOHANG);   /* a zombie by now, unless it survived */
	forget(c);
	c->held = 1;
	sv_pidfile_remove(c->name);
}
