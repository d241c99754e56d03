#ifndef ORC_BASE64_H
#define ORC_BASE64_H
#include <stddef.h>

#include "buf.h"
/*
 * Base64 (RFC 4648, standard alphabet, padded, strict) for byte payloads
 * in JSON: the agent's streaming exec lines and PTY frames, and the api
 * reading those lines.
 */

/* Append the encoding of data[0..n) to out. */
int orc_base64_encode(struct orc_buf *out, const void *data, size_t n);
/* Append the bytes encoded by s[0..n) to out. Strict: only the alphabet,
 * length a multiple of 4, padding only at the end (ORC_EINVALID otherwise;
 * out may then hold a partial result). */
int orc_base64_decode(struct orc_buf *out, const char *s, size_t n);
/* The value of one character of the alphabet, -1 for any other byte. */
int orc_base64_value(unsigned char c);
#endif
