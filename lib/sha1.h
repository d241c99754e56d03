#ifndef ORC_SHA1_H
#define ORC_SHA1_H
#include <stddef.h>
/*
 * SHA-1 (FIPS 180-4), one shot. Only for the Sec-WebSocket-Accept value of
 * RFC 6455 (ws_accept.h), where it is a fixed part of the handshake and not
 * a security measure: never use it to protect anything.
 */
#define ORC_SHA1_LEN 20

void orc_sha1(unsigned char out[ORC_SHA1_LEN], const void *data, size_t n);
#endif
