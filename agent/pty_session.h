#ifndef AGENT_PTY_SESSION_H
#define AGENT_PTY_SESSION_H
#include <stdint.h>

#include "buf.h"
#include "pty.h"
#include "pty_ring.h"
#include "reaper.h"
#include "revoke.h"
#include "sweep.h"
#include "ws.h"
/*
 * Internal to the PTY code: one session (pty_session.c, its thread's loop)
 * and the set of sessions (pty_table.c, which starts the threads and hands
 * them clients that attach).
 *
 * One thread per session runs a poll() loop over the terminal's master
 * side, the child's exit notification, a wake-up pipe and the attached
 * client's socket (tmux's model). Everything in a session is its thread's,
 * except `pending` (clients waiting to attach) and `stop`, which other
 * threads set under the table's lock before writing to the wake-up pipe.
 */
#define PTY_MAX_MESSAGE (1024 * 1024)  /* larger client frames: close 1009 */

enum pty_session_state { S_INIT, S_RUNNING, S_FINISHED };
enum pty_stop { PTY_STOP_NONE, PTY_STOP_SHUTDOWN, PTY_STOP_REVOKED };

struct pty_client {
	struct agent_ws *ws;
	uint64_t sent;             /* output offset sent so far */
	int ready;                 /* gets output (after ready) */
	int closing;               /* our close frame is queued */
	int exit_sent;
	int64_t close_deadline;
	int64_t last_ping;
};

struct pty_pending {
	struct agent_ws *ws;       /* created with the session as handler arg */
	uint64_t offset;
	struct pty_pending *next;
};

struct pty_session {
	char id[AGENT_PTY_ID_LEN + 1];
	int wake[2];
	/* under the table's lock (pty_table.c) */
	struct pty_pending *pending;
	enum pty_stop stop;
	int over;
	char key[AGENT_KEY_MAX + 1];     /* API key id of the last client; "" if none */
	/* the session thread's */
	enum pty_session_state state;
	struct pty_client *client;
	struct pty_client *dispatching;  /* the client whose frame is being handled */
	int master;
	struct agent_child child;
	int child_done;
	int exit_code;
	int64_t exit_at;
	int master_eof;
	int master_empty;            /* the last read found nothing */
	struct pty_ring ring;
	struct orc_buf input;
	int hangup;                  /* client sent close: no reattach */
	int64_t init_deadline;
	int64_t detached_at;         /* 0 while a client is attached */
	int64_t kill_at;             /* when kill_sig goes, after a SIGHUP */
	int kill_sig;                /* SIGTERM, then SIGKILL */
	int64_t ping_ms;             /* ORCHARD_AGENT_PTY_PING_MS */
	char tag[AGENT_SWEEP_ENTRY_MAX]; /* ORCHARD_JOB_TAG=... of its program (sweep.h); "" before */
};

/* pty_session.c */
/* Set s up with conn as its first client (which must send init). On
 * failure conn's socket has been closed and s holds nothing. */
int pty_session_start(struct pty_session *s, const struct agent_pty_conn *conn);
/* A client for s (its frames go to s) on conn's socket; closes it on failure. */
int pty_session_ws(struct agent_ws **out, struct pty_session *s, const struct agent_pty_conn *conn);
/* The loop: returns when the session is over. */
void pty_session_run(struct pty_session *s);
/* Close the first client with code (a session that could not start). */
void pty_session_refuse(struct pty_session *s, uint16_t code, const char *reason);
/* Kill what is left, close everything, free the contents. */
void pty_session_release(struct pty_session *s);

/* pty_table.c: under the lock, take the clients waiting to attach and
 * whether the agent is stopping. */
struct pty_pending *pty_table_take(struct pty_session *s, enum pty_stop *stop_out);
#endif
