#ifndef CLI_WS_H
#define CLI_WS_H
/*
 * A WebSocket client (RFC 6455) for the PTY route, on libcurl's connection
 * (CURLOPT_CONNECT_ONLY: TCP and TLS, verified as every other request):
 * the Upgrade handshake is done here (Debian 12's libcurl 7.88 has no
 * WebSocket support; the accept value is lib/ws_accept.c's), the framing
 * is wslay's client mode (the agent's library): masking, fragments, pings
 * answered, the close handshake. No extensions.
 *
 *   struct cli_ws ws = CLI_WS_INIT;
 *   if (cli_ws_connect(&ws, cfg, "/v1/sandboxes/x/exec/pty") < 0) ...
 *   cli_ws_send(&ws, CLI_WS_TEXT, json, len);
 *   poll(ws.fd for POLLIN); cli_ws_fill(&ws);
 *   while ((n = cli_ws_next(&ws, &op, &msg)) > 0) ...
 *   cli_ws_release(&ws);
 */
#include <stddef.h>
#include <stdint.h>

#include "transfer.h"

enum { CLI_WS_CONT = 0, CLI_WS_TEXT = 1, CLI_WS_BINARY = 2, CLI_WS_CLOSE = 8, CLI_WS_PING = 9,
       CLI_WS_PONG = 10 };
/* The largest message accepted from the server (the agent sends 32 KiB of output, base64). */
#define CLI_WS_MESSAGE_MAX ((size_t)4 << 20)

struct cli_ws_msg {
	int op;                      /* CLI_WS_TEXT, _BINARY or _CLOSE */
	struct orc_buf data;
	struct cli_ws_msg *next;
};

struct cli_ws {
	CURL *curl;
	int fd;                      /* the socket, for poll(); -1 */
	struct orc_buf in;           /* the handshake's answer and what came with it */
	size_t in_off;               /* how much of in wslay has taken */
	struct wslay_event_context *ctx;
	struct cli_ws_msg *msgs;     /* received, not yet taken by cli_ws_next */
	int eof;                     /* the connection is gone */
	int close_sent;
};
#define CLI_WS_INIT { NULL, -1, ORC_BUF_INIT, 0, NULL, NULL, 0, 0 }

/*
 * Connect and upgrade. The key goes as X-API-Key. A refusal (any answer
 * but 101) is reported like any API error and returned (ORC_ENOTFOUND for
 * 404, else ORC_ERROR); a transport failure as cli_http's are.
 */
int cli_ws_connect(struct cli_ws *ws, const struct cli_config *cfg, const char *path);
/* One whole message, masked; waits until the socket took it. */
int cli_ws_send(struct cli_ws *ws, int opcode, const void *data, size_t len);
/* Read what the socket has (it never blocks); sets eof at the end. 0,
 * ORC_EUNAVAIL (gone) or ORC_EINVALID (the server broke the protocol). */
int cli_ws_fill(struct cli_ws *ws);
/*
 * The next whole message from what was read: 1 with *op (TEXT, BINARY, or
 * CLOSE with its payload: a status code and a reason) and out holding the
 * payload; 0 when more must be read.
 */
int cli_ws_next(struct cli_ws *ws, int *op, struct orc_buf *out);
/* Send a close frame (once) with code. */
void cli_ws_send_close(struct cli_ws *ws, unsigned code);
void cli_ws_release(struct cli_ws *ws);
#endif
