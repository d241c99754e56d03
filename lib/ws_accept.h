#ifndef ORC_WS_ACCEPT_H
#define ORC_WS_ACCEPT_H
/*
 * The WebSocket opening handshake's proof (RFC 6455 section 4.2.2, item 5.4):
 * Sec-WebSocket-Accept = base64(SHA-1(Sec-WebSocket-Key + ORC_WS_GUID)).
 * The one copy: the agent answers with it, orchardctl checks it.
 *
 *   char accept[ORC_WS_ACCEPT_LEN + 1];
 *   orc_ws_accept(accept, "dGhlIHNhbXBsZSBub25jZQ==");
 *   // "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" (RFC 6455 section 1.3)
 */
#define ORC_WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
/* base64 of a 20-byte digest */
#define ORC_WS_ACCEPT_LEN 28

/* out: the value for the key as sent (any length; NUL-terminated). */
void orc_ws_accept(char out[ORC_WS_ACCEPT_LEN + 1], const char *key);
#endif
