#ifndef ORC_SHA256_IMPL_H
#define ORC_SHA256_IMPL_H
#include <stddef.h>
#include <stdint.h>
/*
 * Internals of lib/sha256.c, for its unit test only (tests/unit/
 * test_sha256.c checks that both block functions agree); everything else
 * uses sha256.h. Each hashes n whole 64-byte blocks at p into state s.
 */
void orc_sha256_blocks_c(uint32_t s[8], const unsigned char *p, size_t n);
/* With the SHA-NI instructions; the C rounds where the CPU has none. */
void orc_sha256_blocks_shani(uint32_t s[8], const unsigned char *p, size_t n);
/* 1 when this CPU has SHA-NI (and SSE4.1). */
int orc_sha256_have_shani(void);
#endif
