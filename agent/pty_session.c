#include "pty_session.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>
#include <microhttpd.h>

#include "buf.h"
#include "command.h"
#include "err.h"
#include "log.h"
#include "pty_proto.h"
#include "spawn.h"
#include "sweep.h"
#include "strutil.h"
#include "xalloc.h"

/* One PTY session: its thread's loop (pty_session.h). */

#define RING_SIZE (1024 * 1024)        /* output kept for replay */
#define MAX_INPUT (1024 * 1024)        /* stdin not yet taken by the terminal */
#define SEND_BACKLOG (256 * 1024)      /* queued to the socket before pausing */
#define FRAME_BYTES (32 * 1024)        /* output bytes per stdout frame */
#define READ_BYTES (16 * 1024)
#define EXIT_DRAIN_MS 100              /* output read after the program exits */
#define EXIT_DRAIN_MAX_MS 5000         /* ... while a slow client holds reading back */
#define HANGUP_STEP_MS 1000           /* SIGHUP, then SIGTERM, then SIGKILL */
#define CLOSE_WAIT_MS 1000             /* for the client's close frame */
#define DEFAULT_PING_MS 5000           /* Orchard's sync client gives up after 10 s of silence */
#define DEFAULT_INIT_TIMEOUT_MS 10000
#define DEFAULT_GRACE_MS 60000

static int64_t config_ms(const char *name, int64_t def)
{
	const char *v = getenv(name);
	int64_t ms;

	if (v && orc_parse_i64(&ms, v, 1, 7 * 86400 * 1000LL) == 0)
		return ms;
	return def;
}

static int64_t init_timeout_ms(void)
{
	return config_ms("ORCHARD_AGENT_PTY_INIT_TIMEOUT_MS", DEFAULT_INIT_TIMEOUT_MS);
}

static int64_t grace_ms(void)
{
	return config_ms("ORCHARD_AGENT_PTY_GRACE_MS", DEFAULT_GRACE_MS);
}

static int64_t ping_ms(void)
{
	return config_ms("ORCHARD_AGENT_PTY_PING_MS", DEFAULT_PING_MS);
}

/* ---- frames to the client ---- */

static void send_frame(struct pty_client *c, struct orc_buf *b)
{
	if (!c->closing)
		agent_ws_send_text(c->ws, b->ptr, b->len);
	orc_buf_reset(b);
}

static void send_error(struct pty_client *c, const char *message)
{
	struct orc_buf b = ORC_BUF_INIT;

	pty_frame_error(&b, message);
	send_frame(c, &b);
	orc_buf_release(&b);
}

static void client_close(struct pty_client *c, uint16_t code, const char *reason)
{
	if (c->closing)
		return;
	agent_ws_close(c->ws, code, reason);
	c->closing = 1;
	c->close_deadline = orc_mono_ms() + CLOSE_WAIT_MS;
}

static void fail_close(struct pty_client *c, uint16_t code, const char *message)
{
	send_error(c, message);
	client_close(c, code, code == 4500 ? "spawn failed" : "bad init");
}

static void client_free(struct pty_client *c)
{
	if (!c)
		return;
	agent_ws_free(c->ws);
	free(c);
}

static void send_ready(struct pty_session *s, struct pty_client *c)
{
	struct orc_buf b = ORC_BUF_INIT;

	pty_frame_ready(&b, (long)s->child.pid, s->id, (unsigned long long)c->sent);
	send_frame(c, &b);
	orc_buf_release(&b);
	c->ready = 1;
}

/* ---- the program ---- */

/* The session's process group, and the terminal's foreground group when a
 * job-control shell has put a job there (what ^C would reach). */
static void kill_groups(struct pty_session *s, int sig)
{
	pid_t fg;

	if (s->state == S_INIT)
		return;
	agent_child_kill_group(&s->child, sig);
	if (s->master >= 0 && (fg = tcgetpgrp(s->master)) > 1 && fg != s->child.pid)
		kill(-fg, sig);
}

/* End the program as a terminal closing would: SIGHUP now, SIGTERM and then
 * SIGKILL a step later each while it is still there (tick() goes on). */
static void hang_up(struct pty_session *s, int64_t now)
{
	if (s->state != S_RUNNING || s->child_done || s->kill_at)
		return;
	kill_groups(s, SIGHUP);
	s->kill_sig = SIGTERM;
	s->kill_at = now + HANGUP_STEP_MS;
}

static int open_pty(int *master_out, int *slave_out, unsigned rows, unsigned cols)
{
	struct winsize ws = { (unsigned short)rows, (unsigned short)cols, 0, 0 };
	char name[128];
	int m, sl;

	if ((m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0)
		return ORC_ERROR;
	if (grantpt(m) < 0 || unlockpt(m) < 0 || ptsname_r(m, name, sizeof(name)) != 0 ||
	    (sl = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0) {
		close(m);
		return ORC_ERROR;
	}
	ioctl(m, TIOCSWINSZ, &ws);
	fcntl(m, F_SETFL, fcntl(m, F_GETFL) | O_NONBLOCK);
	*master_out = m;
	*slave_out = sl;
	return 0;
}

/* init: start the program on a new terminal. */
static void start_program(struct pty_session *s, struct pty_client *c, const struct pty_msg *m)
{
	struct agent_command cmd = AGENT_COMMAND_INIT;
	struct agent_spawn sp;
	const char **keys = NULL, **vals = NULL;
	char *failure = NULL, **envp = NULL;
	int slave = -1, code = 0;
	size_t n = m->nenv, i;
	int has_term = 0;

	for (i = 0; i < m->nenv; i++)
		has_term |= !strcmp(m->env_keys[i], "TERM");
	keys = xcalloc(n + 2, sizeof(*keys));
	vals = xcalloc(n + 2, sizeof(*vals));
	if (n) {
		memcpy(keys, m->env_keys, n * sizeof(*keys));
		memcpy(vals, m->env_vals, n * sizeof(*vals));
	}
	if (!has_term) {
		keys[n] = "TERM";
		vals[n++] = "xterm-256color";
	}
	agent_command_pty(&cmd, m->argv, m->argc, m->login_shell);
	agent_command_env(&cmd, keys, vals, n);

	if (open_pty(&s->master, &slave, m->rows, m->cols) < 0) {
		fail_close(c, 4500, "cannot open a pseudo-terminal");
		goto done;
	}
	memset(&sp, 0, sizeof(sp));
	sp.path = cmd.path;
	sp.argv = cmd.argv;
	agent_sweep_entry(s->tag);
	envp = agent_sweep_envp(s->tag, cmd.envp);
	sp.envp = envp;
	sp.cwd = m->cwd;
	sp.stdin_fd = sp.stdout_fd = sp.stderr_fd = slave;
	sp.fd3 = -1;
	sp.ctty = 1;
	if (agent_spawn_start(&s->child, &failure, &code, &sp) < 0) {
		fail_close(c, 4500, "the agent could not start the program");
		goto done;
	}
	if (failure) {
		/* A forked child that could not exec is reaped as an orphan. */
		agent_child_release(&s->child);
		fail_close(c, 4500, failure);
		goto done;
	}
	s->state = S_RUNNING;
	c->sent = 0;
	send_ready(s, c);
	orc_log(ORC_LOG_INFO, "pty session started", "session_id", s->id, NULL);
done:
	if (slave >= 0)
		close(slave);
	if (s->state != S_RUNNING && s->master >= 0) {
		close(s->master);
		s->master = -1;
	}
	free(failure);
	free(envp);
	free(keys);
	free(vals);
	agent_command_release(&cmd);
}

/* ---- frames from the client ---- */

static void on_stdin(struct pty_session *s, struct pty_client *c, const struct pty_msg *m)
{
	if (s->state != S_RUNNING || s->master < 0)
		return;
	if (s->input.len + m->data.len > MAX_INPUT) {
		send_error(c, "stdin is not being read; input dropped");
		return;
	}
	orc_buf_add(&s->input, m->data.ptr, m->data.len);
}

static void on_message(void *arg, int is_text, const char *data, size_t n)
{
	struct pty_session *s = arg;
	struct pty_client *c = s->dispatching;
	struct pty_msg m = PTY_MSG_BLANK;
	struct winsize ws;
	char err[256] = "";
	int rc;

	(void)is_text; /* binary frames holding JSON are taken too */
	if (!c || c->closing)
		return;
	rc = pty_msg_parse(&m, data, n, err, sizeof(err));
	if (s->state == S_INIT) {
		if (rc < 0 || m.type != PTY_MSG_INIT)
			fail_close(c, 4400, rc < 0 ? err : "the first frame must be init");
		else
			start_program(s, c, &m);
		goto done;
	}
	if (rc < 0) {
		send_error(c, err);
		goto done;
	}
	switch (m.type) {
	case PTY_MSG_INIT:
		send_error(c, "the session has already started");
		break;
	case PTY_MSG_STDIN:
		on_stdin(s, c, &m);
		break;
	case PTY_MSG_RESIZE:
		ws = (struct winsize){ (unsigned short)m.rows, (unsigned short)m.cols, 0, 0 };
		if (s->master >= 0)
			ioctl(s->master, TIOCSWINSZ, &ws); /* the kernel sends SIGWINCH */
		break;
	case PTY_MSG_SIGNAL:
		kill_groups(s, m.sig);
		break;
	case PTY_MSG_CLOSE:
		/* Hang up, like a terminal closing; exit follows. */
		s->hangup = 1;
		hang_up(s, orc_mono_ms());
		break;
	}
done:
	pty_msg_release(&m);
}

/* ---- the loop ---- */

int pty_session_ws(struct agent_ws **out, struct pty_session *s, const struct agent_pty_conn *conn)
{
	if (agent_ws_new(out, conn->sock, conn->urh, conn->extra, conn->extra_len, PTY_MAX_MESSAGE,
			 on_message, s) < 0) {
		MHD_upgrade_action(conn->urh, MHD_UPGRADE_ACTION_CLOSE);
		return ORC_ERROR;
	}
	return 0;
}

/* Clients that asked to attach (from other threads), oldest first: the
 * newest one wins, the one attached before it is closed with 4000. */
static void take_pending(struct pty_session *s, struct pty_pending *p)
{
	struct pty_pending *next;
	struct pty_client *c;
	uint64_t offset;

	for (; p; p = next) {
		next = p->next;
		offset = p->offset;
		c = xcalloc(1, sizeof(*c));
		c->ws = p->ws;
		c->last_ping = orc_mono_ms();
		free(p);
		if (s->state == S_INIT || next || offset > s->ring.end) {
			/* Not started yet, a newer client follows, or it asks for
			 * output that does not exist: the attached client stays. */
			if (offset > s->ring.end)
				fail_close(c, 4400, "offset is past the end of the session's output");
			else
				client_close(c, 4409, "session not available");
			agent_ws_handle(c->ws, 0);
			client_free(c);
			continue;
		}
		if (s->client) {
			client_close(s->client, 4000, "another client attached");
			agent_ws_handle(s->client->ws, 0);
			client_free(s->client);
		}
		s->client = c;
		s->detached_at = 0;
		/* What the ring no longer holds is lost: ready says where it starts. */
		c->sent = offset < pty_ring_start(&s->ring) ? pty_ring_start(&s->ring) : offset;
		send_ready(s, c);
	}
}

/* Output from the ring to the client, then exit once all of it is out. */
static void pump(struct pty_session *s)
{
	struct pty_client *c = s->client;
	struct orc_buf b = ORC_BUF_INIT;
	const char *p;
	size_t n;

	if (!c || !c->ready || c->closing)
		return;
	while (c->sent < s->ring.end && agent_ws_backlog(c->ws) < SEND_BACKLOG) {
		if (c->sent < pty_ring_start(&s->ring))
			c->sent = pty_ring_start(&s->ring);
		n = pty_ring_peek(&s->ring, c->sent, &p);
		if (n > FRAME_BYTES)
			n = FRAME_BYTES;
		pty_frame_stdout(&b, p, n);
		send_frame(c, &b);
		c->sent += n;
	}
	if (s->state == S_FINISHED && c->sent == s->ring.end && !c->exit_sent) {
		pty_frame_exit(&b, s->exit_code);
		send_frame(c, &b);
		c->exit_sent = 1;
		client_close(c, 1000, "exited");
	}
	orc_buf_release(&b);
}

static void read_master(struct pty_session *s)
{
	char buf[READ_BYTES];
	ssize_t n;
	int rounds = 4;

	while (rounds-- > 0) {
		n = read(s->master, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			s->master_empty = 1;
			return;
		}
		if (n <= 0) { /* EIO: no process holds the terminal any more */
			s->master_eof = 1;
			return;
		}
		s->master_empty = 0;
		pty_ring_write(&s->ring, buf, (size_t)n);
	}
}

static void write_input(struct pty_session *s)
{
	ssize_t n;

	do
		n = write(s->master, s->input.ptr, s->input.len);
	while (n < 0 && errno == EINTR);
	if (n > 0) {
		memmove(s->input.ptr, s->input.ptr + n, s->input.len - (size_t)n + 1);
		s->input.len -= (size_t)n;
	} else if (n < 0 && errno != EAGAIN) {
		orc_buf_reset(&s->input);
	}
}

static int can_read(const struct pty_session *s)
{
	const struct pty_client *c = s->client;

	if (s->master < 0 || s->master_eof || s->state == S_FINISHED)
		return 0;
	/* An attached client's unsent output is never overwritten: a slow
	 * client holds the program back. Detached, the oldest output goes. */
	return !c || !c->ready || s->ring.end - c->sent + READ_BYTES <= s->ring.cap;
}

static void check_child(struct pty_session *s, int64_t now)
{
	int status;

	if (s->state != S_RUNNING)
		return;
	if (!s->child_done && agent_child_exited(&s->child, &status)) {
		s->child_done = 1;
		s->exit_at = now;
		s->exit_code = WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status);
		s->master_empty = 0; /* read at least once more */
	}
	/* What the program wrote before it exited is read in full (unless the
	 * terminal stays busy: background processes may hold it open). */
	if (s->child_done && (s->master_eof || now >= s->exit_at + EXIT_DRAIN_MAX_MS ||
			      (now >= s->exit_at + EXIT_DRAIN_MS && s->master_empty))) {
		s->state = S_FINISHED;
		/* Closing the master hangs up what is left on the terminal. */
		close(s->master);
		s->master = -1;
		orc_buf_release(&s->input);
		orc_log(ORC_LOG_INFO, "pty session exited", "session_id", s->id,
			ORC_LOG_INT("exit_code", s->exit_code), NULL);
	}
}

/* Timers: init timeout, ping, close wait, kill escalation, detach grace.
 * Returns 1 when the session is over. */
static int tick(struct pty_session *s, int64_t now)
{
	struct pty_client *c = s->client;

	if (c && s->state == S_INIT && !c->closing && now >= s->init_deadline)
		fail_close(c, 4400, "no init frame in time");
	if (c && !c->closing && now - c->last_ping >= s->ping_ms) {
		agent_ws_ping(c->ws);
		c->last_ping = now;
	}
	if (s->kill_at && now >= s->kill_at && !s->child_done) {
		kill_groups(s, s->kill_sig);
		s->kill_at = s->kill_sig == SIGTERM ? now + HANGUP_STEP_MS : 0;
		s->kill_sig = SIGKILL;
	}
	if (c)
		return 0;
	if (s->state == S_INIT)
		return 1;
	if (s->hangup || now >= s->detached_at + grace_ms()) {
		if (s->state == S_FINISHED)
			return 1;
		hang_up(s, now);
	}
	return 0;
}

static int poll_timeout(const struct pty_session *s, int64_t now)
{
	int64_t t = now + 1000;

	if (s->child_done && s->state == S_RUNNING && s->exit_at + EXIT_DRAIN_MS < t)
		t = s->exit_at + EXIT_DRAIN_MS;
	if (s->client && s->state == S_INIT && s->init_deadline < t)
		t = s->init_deadline;
	if (s->kill_at && s->kill_at < t)
		t = s->kill_at;
	if (s->client && !s->client->closing && s->client->last_ping + s->ping_ms < t)
		t = s->client->last_ping + s->ping_ms;
	return t <= now ? 0 : (int)(t - now);
}

static void session_stop(struct pty_session *s, enum pty_stop why)
{
	kill_groups(s, SIGKILL);
	/* a revoked key's session leaves nothing behind, setsid or not */
	if (why == PTY_STOP_REVOKED && s->tag[0])
		agent_sweep_kill(s->tag);
	if (s->client) {
		if (why == PTY_STOP_REVOKED)
			client_close(s->client, 1008, "the API key was revoked");
		else
			client_close(s->client, 1001, "the agent is shutting down");
		agent_ws_handle(s->client->ws, 0);
	}
}

void pty_session_run(struct pty_session *s)
{
	struct pty_pending *pending;
	struct pty_client *polled;
	struct pollfd pfd[4];
	int nfd, i_wake, i_child, i_master, i_sock, n;
	enum pty_stop stop;
	int64_t now;
	char drain[64];
	short ev;

	for (;;) {
		now = orc_mono_ms();
		check_child(s, now);
		pump(s);
		if (tick(s, now))
			return;
		nfd = 0;
		i_child = i_master = i_sock = -1;
		i_wake = nfd;
		pfd[nfd++] = (struct pollfd){ .fd = s->wake[0], .events = POLLIN };
		if (s->state == S_RUNNING && !s->child_done && s->child.fd >= 0) {
			i_child = nfd;
			pfd[nfd++] = (struct pollfd){ .fd = s->child.fd, .events = POLLIN };
		}
		ev = (short)((can_read(s) ? POLLIN : 0) |
			     (s->master >= 0 && s->input.len ? POLLOUT : 0));
		if (ev) {
			i_master = nfd;
			pfd[nfd++] = (struct pollfd){ .fd = s->master, .events = ev };
		}
		polled = s->client;
		if (s->client) {
			i_sock = nfd;
			pfd[nfd++] = (struct pollfd){ .fd = agent_ws_fd(s->client->ws),
						      .events = agent_ws_events(s->client->ws) };
		}
		n = poll(pfd, (nfds_t)nfd, poll_timeout(s, now));
		if (n < 0 && errno != EINTR)
			return;
		if (n < 0)
			continue;
		if (pfd[i_wake].revents) {
			while (read(s->wake[0], drain, sizeof(drain)) > 0)
				;
			pending = pty_table_take(s, &stop);
			take_pending(s, pending);
			if (stop) {
				session_stop(s, stop);
				return;
			}
		}
		if (i_child >= 0 && pfd[i_child].revents)
			while (read(s->child.fd, drain, sizeof(drain)) > 0)
				;
		if (i_master >= 0 && (pfd[i_master].revents & POLLOUT))
			write_input(s);
		if (i_master >= 0 && (pfd[i_master].revents & (POLLIN | POLLHUP | POLLERR)))
			read_master(s);
		/* pfd[i_sock] is the client polled: one that attached since
		 * (take_pending freed the polled one) waits for the next poll,
		 * never gets the revents of another connection's descriptor. */
		if (i_sock >= 0 && s->client && s->client == polled) {
			struct pty_client *c = s->client;
			s->dispatching = c;
			if (agent_ws_handle(c->ws, pfd[i_sock].revents) < 0 ||
			    (c->closing && agent_ws_close_sent(c->ws) && orc_mono_ms() >= c->close_deadline)) {
				if (c->exit_sent) {
					s->hangup = 1; /* delivered: nothing left to attach to */
				} else if (!c->closing && agent_ws_close_received(c->ws)) {
					/* The client closed the WebSocket (Orchard's
					 * close()): a hangup, not a detach. Only a
					 * connection lost without a close frame keeps
					 * the session for reattach. */
					s->hangup = 1;
					hang_up(s, orc_mono_ms());
				} else if (s->state != S_INIT) {
					orc_log(ORC_LOG_INFO, "pty client detached", "session_id", s->id, NULL);
				}
				client_free(c);
				s->client = NULL;
				s->detached_at = orc_mono_ms();
			}
			s->dispatching = NULL;
		}
		/* input written since the poll: try at once */
		if (s->master >= 0 && s->input.len)
			write_input(s);
	}
}

int pty_session_start(struct pty_session *s, const struct agent_pty_conn *conn)
{
	struct agent_child child_init = AGENT_CHILD_INIT;
	struct pty_client *c;

	memset(s, 0, sizeof(*s));
	s->child = child_init;
	s->master = -1;
	orc_random_hex(s->id, AGENT_PTY_ID_LEN / 2);
	if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
		MHD_upgrade_action(conn->urh, MHD_UPGRADE_ACTION_CLOSE);
		return ORC_ERROR;
	}
	c = xcalloc(1, sizeof(*c));
	if (pty_session_ws(&c->ws, s, conn) < 0) {
		free(c);
		close(s->wake[0]);
		close(s->wake[1]);
		return ORC_ERROR;
	}
	c->last_ping = orc_mono_ms();
	s->client = c;
	pty_ring_alloc(&s->ring, RING_SIZE);
	s->init_deadline = orc_mono_ms() + init_timeout_ms();
	s->ping_ms = ping_ms();
	return 0;
}

void pty_session_refuse(struct pty_session *s, uint16_t code, const char *reason)
{
	if (!s->client)
		return;
	client_close(s->client, code, reason);
	agent_ws_handle(s->client->ws, 0);
}

void pty_session_release(struct pty_session *s)
{
	struct pty_pending *p, *next;

	if (s->state == S_RUNNING && !s->child_done)
		kill_groups(s, SIGKILL); /* reaped as an orphan */
	agent_child_release(&s->child);
	client_free(s->client);
	s->client = NULL;
	for (p = s->pending; p; p = next) {
		next = p->next;
		agent_ws_free(p->ws);
		free(p);
	}
	s->pending = NULL;
	if (s->master >= 0)
		close(s->master);
	s->master = -1;
	close(s->wake[0]);
	close(s->wake[1]);
	pty_ring_release(&s->ring);
	orc_buf_release(&s->input);
}
