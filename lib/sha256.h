#ifndef ORC_SHA256_H
#define ORC_SHA256_H
#include <stddef.h>
#include <stdint.h>
/*
 * SHA-256 (FIPS 180-4), computed incrementally so uploads can be hashed as
 * they stream to disk:
 *
 *   struct orc_sha256 h;
 *   orc_sha256_init(&h);
 *   orc_sha256_update(&h, data, n);   // any number of times
 *   orc_sha256_hex(&h, hex);          // 64 hex digits + NUL; h is spent
 */
struct orc_sha256 {
	uint32_t state[8];
	uint64_t length;          /* bytes hashed so far */
	unsigned char block[64];
	size_t used;              /* bytes waiting in block */
};

void orc_sha256_init(struct orc_sha256 *h);
void orc_sha256_update(struct orc_sha256 *h, const void *data, size_t n);
void orc_sha256_final(struct orc_sha256 *h, unsigned char out[32]);
void orc_sha256_hex(struct orc_sha256 *h, char out[65]);
#endif
