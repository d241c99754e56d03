#include "exec.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cglimits.h"
#include "cancel.h"
#include "err.h"
#include "log.h"
#include "reaper.h"
#include "sweep.h"
#include "spawn.h"
#include "strutil.h"
#include "xalloc.h"

/*
 * After the direct child exits, output still in the pipes is read, and a
 * little more time is given for the last bytes of its descendants; then the
 * pipes are abandoned (a background process may hold them open forever).
 */
#define EXIT_GRACE_MS 20
/* A SIGKILLed group that has not gone after this long is abandoned. */
#define KILL_GIVE_UP_MS 10000
/* Reads per stream per wakeup, so one chatty stream cannot starve the loop. */
#define READS_PER_WAKEUP 16

/* Set at shutdown: running commands are killed so the server can stop. */
static atomic_int stopping;

struct stream {
	int fd;
	int which;                 /* 1 stdout, 2 stderr */
	struct orc_buf *buf;
	uint64_t *count;
	int *truncated;
	size_t max;
	size_t kept;
	const struct agent_exec_sink *sink;
};

static double mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* A memfd holding data at offset 0: stdin and scripts are files, so the
 * agent never has to feed a pipe (and cannot deadlock against a command
 * that writes before it reads). */
static int data_fd(int *out, const char *name, const char *data, size_t len)
{
	size_t off = 0;
	ssize_t w;
	int fd;

	if ((fd = memfd_create(name, MFD_CLOEXEC)) < 0)
		return ORC_ERROR;
	while (off < len) {
		w = write(fd, data + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			close(fd);
			return ORC_ERROR;
		}
		off += (size_t)w;
	}
	if (lseek(fd, 0, SEEK_SET) < 0) {
		close(fd);
		return ORC_ERROR;
	}
	*out = fd;
	return 0;
}

/* Read what is available; closes the stream at EOF or on error. */
static void stream_read(struct stream *s, int max_reads)
{
	char chunk[65536];
	ssize_t n;
	size_t keep;

	while (s->fd >= 0 && max_reads-- != 0) {
		n = read(s->fd, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			close_fd(&s->fd);
			return;
		}
		*s->count += (uint64_t)n;
		keep = s->kept < s->max ? s->max - s->kept : 0;
		if (keep > (size_t)n)
			keep = (size_t)n;
		s->kept += keep;
		if (keep && s->sink)
			s->sink->output(s->sink->arg, s->which, chunk, keep);
		else if (keep)
			orc_buf_add(s->buf, chunk, keep);
		if (keep < (size_t)n)
			*s->truncated = 1;
	}
}

static void set_status(struct agent_exec_result *r, int status)
{
	if (WIFEXITED(status)) {
		r->exit_code = WEXITSTATUS(status);
	} else if (WIFSIGNALED(status)) {
		r->signal = WTERMSIG(status);
		r->exit_code = 128 + r->signal;
	} else {
		r->exit_code = 255;
	}
}

/*
 * Collect output until the child has exited (and the grace has passed or
 * both streams ended). Kills the process group at the deadline.
 */
static void collect(struct agent_exec_result *r, struct agent_child *c, struct stream *st,
		    double start, double timeout_ms, const struct agent_exec_sink *sink)
{
	double now, deadline = start + timeout_ms, grace_end = 0, killed_at = 0;
	struct pollfd pfd[4];
	int exited = 0, killed = 0, status = 0, wait_ms, n, i, reading;
	char drain[64];

	for (;;) {
		now = mono_ms();
		if (!exited && agent_child_exited(c, &status)) {
			exited = 1;
			grace_end = now + EXIT_GRACE_MS;
			for (i = 0; i < 2; i++)
				stream_read(&st[i], 64); /* what is already in the pipe */
		}
		if (exited && ((st[0].fd < 0 && st[1].fd < 0) || now >= grace_end))
			break;
		/* Not sent means it exited just now: the next round sees that. */
		if (!exited && !killed && (now >= deadline || atomic_load(&stopping)) &&
		    agent_child_kill_group(c, SIGKILL)) {
			killed = 1;
			killed_at = now;
			if (now >= deadline)
				r->timed_out = 1;
			else
				r->error = xstrdup("the agent is shutting down");
		}
		if (!exited && killed && now - killed_at >= KILL_GIVE_UP_MS) {
			orc_log(ORC_LOG_WARN, "killed command did not exit; abandoning it", NULL);
			break;
		}
		if (exited)
			wait_ms = (int)(grace_end - now) + 1;
		else if (killed)
			wait_ms = 100;
		else
			wait_ms = deadline - now > 1000 ? 1000 : (int)(deadline - now) + 1;
		if (wait_ms < 0)
			wait_ms = 0; /* never an infinite poll */

		n = 0;
		/* A consumer that is behind holds the reading back. */
		reading = !sink || sink->ready(sink->arg);
		for (i = 0; i < 2 && reading; i++)
			if (st[i].fd >= 0)
				pfd[n++] = (struct pollfd){ .fd = st[i].fd, .events = POLLIN };
		if (!reading && sink->wake_fd >= 0)
			pfd[n++] = (struct pollfd){ .fd = sink->wake_fd, .events = POLLIN };
		if (!exited)
			pfd[n++] = (struct pollfd){ .fd = c->fd, .events = POLLIN };
		if (poll(pfd, (nfds_t)n, wait_ms) < 0 && errno != EINTR)
			break;
		for (i = 0; i < n; i++) {
			if (!pfd[i].revents)
				continue;
			if (pfd[i].fd == c->fd || (sink && pfd[i].fd == sink->wake_fd)) {
				while (read(pfd[i].fd, drain, sizeof(drain)) > 0)
					;
			} else {
				stream_read(&st[pfd[i].fd == st[0].fd ? 0 : 1], READS_PER_WAKEUP);
			}
		}
	}
	if (r->timed_out) {
		r->exit_code = 124;
	} else if (exited) {
		set_status(r, status);
	} else if (killed) { /* abandoned after SIGKILL */
		r->signal = SIGKILL;
		r->exit_code = 128 + SIGKILL;
	} else {
		orc_log(ORC_LOG_ERROR, "waiting for the command failed", NULL);
		r->exit_code = 255;
	}
}

void agent_exec_stop_all(void)
{
	atomic_store(&stopping, 1);
}

int agent_exec_run(struct agent_exec_result *out, const struct agent_exec_spec *spec)
{
	struct agent_exec_result r = AGENT_EXEC_RESULT_INIT;
	struct agent_child c = AGENT_CHILD_INIT;
	struct agent_spawn sp = { 0 };
	struct agent_cglimits before, after;
	struct stream st[2];
	int opipe[2] = { -1, -1 }, epipe[2] = { -1, -1 };
	int in_fd = -1, fd3 = -1, failure_code = 0, err = 0, i, status;
	char *failure = NULL, **envp = NULL, tag[AGENT_SWEEP_ENTRY_MAX];
	double start;

	if (atomic_load(&stopping))
		return ORC_EUNAVAIL;
	if (spec->stdin_data)
		err = data_fd(&in_fd, "orchard-stdin", spec->stdin_data, spec->stdin_len);
	else if ((in_fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
		err = ORC_ERROR;
	if (err < 0)
		goto done;
	if (spec->fd3_data && (err = data_fd(&fd3, "orchard-script", spec->fd3_data, spec->fd3_len)) < 0)
		goto done;
	if (pipe2(opipe, O_CLOEXEC) < 0 || pipe2(epipe, O_CLOEXEC) < 0) {
		err = ORC_ERROR;
		goto done;
	}
	fcntl(opipe[0], F_SETFL, O_NONBLOCK);
	fcntl(epipe[0], F_SETFL, O_NONBLOCK);

	sp.path = spec->path;
	sp.argv = spec->argv;
	agent_sweep_entry(tag);
	envp = agent_sweep_envp(tag, spec->envp);
	sp.envp = envp;
	sp.cwd = spec->cwd;
	sp.stdin_fd = in_fd;
	sp.stdout_fd = opipe[1];
	sp.stderr_fd = epipe[1];
	sp.fd3 = fd3;

	agent_cglimits_read(&before);
	r.started_at = orc_now();
	start = mono_ms();
	if ((err = agent_spawn_start(&c, &failure, &failure_code, &sp)) < 0)
		goto done;
	if (c.fd >= 0)
		agent_job_attach_child(spec->job, &c);
	/* Only the child may hold the write ends, or EOF never comes. */
	close_fd(&opipe[1]);
	close_fd(&epipe[1]);
	close_fd(&in_fd);
	close_fd(&fd3);

	if (failure) {
		/* Wait for the child that reported it (if one was forked). */
		while (c.fd >= 0 && !agent_child_exited(&c, &status)) {
			struct pollfd p = { .fd = c.fd, .events = POLLIN };
			poll(&p, 1, 100);
		}
		r.exit_code = failure_code;
		orc_buf_addf(&r.err, "orchard-agent: %s\n", failure);
		r.err_bytes = r.err.len;
		if (spec->sink) {
			spec->sink->output(spec->sink->arg, 2, r.err.ptr, r.err.len);
			orc_buf_reset(&r.err);
		}
		r.error = failure;
		failure = NULL;
	} else {
		st[0] = (struct stream){ opipe[0], 1, &r.out, &r.out_bytes, &r.out_truncated,
					 spec->max_output, 0, spec->sink };
		st[1] = (struct stream){ epipe[0], 2, &r.err, &r.err_bytes, &r.err_truncated,
					 spec->max_output, 0, spec->sink };
		collect(&r, &c, st, start, spec->timeout_s * 1000.0, spec->sink);
		opipe[0] = st[0].fd;
		epipe[0] = st[1].fd;
	}
	r.cancelled = agent_job_detach_child(spec->job);
	/* The group is dead; what left it (setsid) goes too. */
	if ((r.timed_out || r.cancelled) && (i = agent_sweep_kill(tag)) > 0)
		orc_logf(ORC_LOG_INFO, "killed %d processes the command left outside its group", i);
	agent_cglimits_read(&after);
	r.oom_killed = after.oom_kills > before.oom_kills;
	r.pids_limited = after.pids_refused > before.pids_refused;
	r.finished_at = orc_now();
	r.duration_ms = mono_ms() - start;
	*out = r;
	memset(&r, 0, sizeof(r));
done:
	agent_child_release(&c);
	for (i = 0; i < 2; i++) {
		close_fd(&opipe[i]);
		close_fd(&epipe[i]);
	}
	close_fd(&in_fd);
	close_fd(&fd3);
	free(failure);
	free(envp);
	agent_exec_result_release(&r);
	return err;
}

void agent_exec_result_release(struct agent_exec_result *r)
{
	orc_buf_release(&r->out);
	orc_buf_release(&r->err);
	free(r->error);
	r->error = NULL;
}
