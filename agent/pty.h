#ifndef AGENT_PTY_H
#define AGENT_PTY_H
#include <stddef.h>
#include <stdint.h>

struct agent_reply;
struct agent_request;
struct MHD_UpgradeResponseHandle;
/*
 * Interactive terminals over WebSocket (docs/agent-protocol.md, "GET /pty").
 *
 * pty_http.c is the HTTP edge: it checks the upgrade request, answers 101
 * and hands the socket to a session. pty_session.c runs each session in a
 * thread of its own: the program on a pseudo-terminal, the WebSocket of
 * the client attached to it, and the session's recent output in a ring
 * (pty_ring.h) so that a client that lost its connection can attach again
 * (?session=ID&offset=N) and get what it missed. pty_proto.c parses and
 * builds the frames.
 */
#define AGENT_PTY_MAX_SESSIONS 32
#define AGENT_PTY_ID_LEN 32            /* hex digits */

/* GET /pty */
void agent_handle_pty(struct agent_reply *reply, const struct agent_request *req);

/* At shutdown: kill every session's processes, close the clients, and
 * wait (about a second at most) for the sessions to end. */
void agent_pty_stop_all(void);

/* pty_session.c, for pty_http.c. The socket comes from libmicrohttpd's
 * upgrade; extra holds bytes read past the request headers. On failure the
 * socket has been closed. */
struct agent_pty_conn {
	int sock;
	struct MHD_UpgradeResponseHandle *urh;
	const char *extra;
	size_t extra_len;
	const char *key;           /* X-Orchard-Key: the API key nginx let in, or NULL */
};
/* A new session whose client must send init. ORC_EUNAVAIL when full or
 * stopping. */
int agent_pty_session_new(const struct agent_pty_conn *conn);
/* Attach to session id, replaying its output from offset. ORC_ENOTFOUND. */
int agent_pty_session_attach(const char *id, uint64_t offset, const struct agent_pty_conn *conn);
/* For the checks before the upgrade. */
int agent_pty_session_exists(const char *id);
int agent_pty_session_room(void);
/* End every session whose client came with API key id key (revoked):
 * its processes are killed and its client closed with 1008. Returns how
 * many. */
int agent_pty_end_key(const char *key);
#endif
