#ifndef AGENT_SHA256_H
#define AGENT_SHA256_H
#include <stddef.h>
#include <stdint.h>
/*
 * SHA-256 (FIPS 180-4), computed incrementally so uploads can be hashed as
 * they stream to disk:
 *
 *   struct agent_sha256 h;
 *   agent_sha256_init(&h);
 *   agent_sha256_update(&h, data, n);   // any number of times
 *   agent_sha256_hex(&h, hex);          // 64 hex digits + NUL; h is spent
 */
struct agent_sha256 {
	uint32_t state[8];
	uint64_t length;          /* bytes hashed so far */
	unsigned char block[64];
	size_t used;              /* bytes waiting in block */
};

void agent_sha256_init(struct agent_sha256 *h);
void agent_sha256_update(struct agent_sha256 *h, const void *data, size_t n);
void agent_sha256_final(struct agent_sha256 *h, unsigned char out[32]);
void agent_sha256_hex(struct agent_sha256 *h, char out[65]);
#endif
