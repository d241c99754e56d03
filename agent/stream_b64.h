#ifndef AGENT_STREAM_B64_H
#define AGENT_STREAM_B64_H
#include <stddef.h>

#include "buf.h"
/*
 * Base64 (RFC 4648, standard alphabet, padded) for the byte payloads of the
 * streaming exec lines and the PTY frames.
 */

/* Append the encoding of data[0..n) to out. */
int agent_stream_b64_encode(struct orc_buf *out, const void *data, size_t n);
/* Append the bytes encoded by s[0..n) to out. Strict: only the alphabet,
 * length a multiple of 4, padding only at the end (ORC_EINVALID otherwise;
 * out may then hold a partial result). */
int agent_stream_b64_decode(struct orc_buf *out, const char *s, size_t n);
#endif
