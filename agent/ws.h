#ifndef AGENT_WS_H
#define AGENT_WS_H
#include <stddef.h>
#include <stdint.h>

struct MHD_UpgradeResponseHandle;
/*
 * One WebSocket connection (RFC 6455, server side) on a socket that
 * libmicrohttpd has handed over after a 101 upgrade. Framing, masking
 * checks, ping/pong, fragmentation and the close handshake are wslay's;
 * this wraps its event API for a poll() loop owned by the caller:
 *
 *   agent_ws_new(&w, sock, urh, extra, extra_len, max_msg, on_message, arg);
 *   pfd.events = agent_ws_events(w);
 *   poll(...);
 *   if (agent_ws_handle(w, pfd.revents) < 0) ... // connection is over
 *   agent_ws_send_text(w, s, n); agent_ws_close(w, 4400, "bad init");
 *   agent_ws_free(w);   // gives the socket back to libmicrohttpd to close
 *
 * Not thread-safe: one thread drives a connection. A message over max_msg
 * bytes makes wslay close the connection with 1009.
 */
typedef void (*agent_ws_message_fn)(void *arg, int is_text, const char *data, size_t n);

struct agent_ws;

/* extra: bytes libmicrohttpd read past the request headers (copied). */
int agent_ws_new(struct agent_ws **out, int sock, struct MHD_UpgradeResponseHandle *urh,
		 const char *extra, size_t extra_len, size_t max_msg,
		 agent_ws_message_fn on_message, void *arg);
/* Close the socket (through libmicrohttpd) and free; NULL is harmless. */
void agent_ws_free(struct agent_ws *w);

/* The socket, for poll(). */
int agent_ws_fd(const struct agent_ws *w);
/* POLLIN/POLLOUT as wslay wants them (0 when nothing is left to do). */
short agent_ws_events(const struct agent_ws *w);
/* Read and write what the socket allows, calling on_message for every
 * complete text or binary message. ORC_ERROR once the connection is over
 * (peer gone, I/O error, protocol error, or both close frames exchanged). */
int agent_ws_handle(struct agent_ws *w, short revents);
/* Queue a text message (copied); ORC_ERROR once closing. */
int agent_ws_send_text(struct agent_ws *w, const char *s, size_t n);
int agent_ws_ping(struct agent_ws *w);
/* Queue a close frame; nothing can be sent after it. */
void agent_ws_close(struct agent_ws *w, uint16_t code, const char *reason);
/* Our close frame has been sent (wait a little for the peer's, then free). */
int agent_ws_close_sent(const struct agent_ws *w);
/* The peer's close frame has arrived (it may have closed first). */
int agent_ws_close_received(const struct agent_ws *w);
/* Bytes queued and not yet written. */
size_t agent_ws_backlog(const struct agent_ws *w);
#endif
