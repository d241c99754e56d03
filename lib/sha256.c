#include "sha256.h"
#include "sha256_impl.h"

#include <string.h>

/*
 * A compact SHA-256 (FIPS 180-4); checked against sha256sum by the tests.
 * Every upload is hashed as it streams to disk, and the portable rounds
 * cost more than everything else of a raw upload together (about 100 MB/s
 * here, bench/results/bfiles-2026-12-03.md), so x86 CPUs with the SHA
 * extensions use those (about ten times as fast); others the C rounds.
 */

static const uint32_t K[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void compress_c(uint32_t s[8], const unsigned char *p)
{
	uint32_t w[64], a, b, c, d, e, f, g, h, t1, t2;
	int i;

	for (i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
	for (; i < 64; i++)
		w[i] = w[i - 16] + (ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3)) +
		       w[i - 7] + (ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10));
	a = s[0]; b = s[1]; c = s[2]; d = s[3]; e = s[4]; f = s[5]; g = s[6]; h = s[7];
	for (i = 0; i < 64; i++) {
		t1 = h + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
		t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
		h = g; g = f; f = e; e = d + t1;
		d = c; c = b; b = a; a = t1 + t2;
	}
	s[0] += a; s[1] += b; s[2] += c; s[3] += d; s[4] += e; s[5] += f; s[6] += g; s[7] += h;
}

void orc_sha256_blocks_c(uint32_t s[8], const unsigned char *p, size_t n)
{
	for (; n; n--, p += 64)
		compress_c(s, p);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>

/* The same rounds with the SHA-NI instructions (Intel's layout: the state
 * as ABEF and CDGH, four rounds per pair of sha256rnds2). */
__attribute__((target("sha,sse4.1")))
void orc_sha256_blocks_shani(uint32_t s[8], const unsigned char *p, size_t n)
{
	const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
	__m128i abef, cdgh, tmp, msg, w[4], abef0, cdgh0;
	int i;

	tmp = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&s[0]), 0xB1);  /* CDAB */
	cdgh = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&s[4]), 0x1B); /* EFGH */
	abef = _mm_alignr_epi8(tmp, cdgh, 8);
	cdgh = _mm_blend_epi16(cdgh, tmp, 0xF0);
	for (; n; n--, p += 64) {
		abef0 = abef;
		cdgh0 = cdgh;
		for (i = 0; i < 16; i++) {
			if (i < 4) {
				w[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * i)), bswap);
			} else {
				/* W[t-16] + s0(W[t-15]), + W[t-7], + s1(W[t-2]) */
				msg = _mm_sha256msg1_epu32(w[i & 3], w[(i + 1) & 3]);
				msg = _mm_add_epi32(msg, _mm_alignr_epi8(w[(i + 3) & 3], w[(i + 2) & 3], 4));
				w[i & 3] = _mm_sha256msg2_epu32(msg, w[(i + 3) & 3]);
			}
			msg = _mm_add_epi32(w[i & 3], _mm_loadu_si128((const __m128i *)&K[4 * i]));
			cdgh = _mm_sha256rnds2_epu32(cdgh, abef, msg);
			abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(msg, 0x0E));
		}
		abef = _mm_add_epi32(abef, abef0);
		cdgh = _mm_add_epi32(cdgh, cdgh0);
	}
	tmp = _mm_shuffle_epi32(abef, 0x1B);   /* FEBA */
	cdgh = _mm_shuffle_epi32(cdgh, 0xB1);  /* DCHG */
	_mm_storeu_si128((__m128i *)&s[0], _mm_blend_epi16(tmp, cdgh, 0xF0)); /* DCBA */
	_mm_storeu_si128((__m128i *)&s[4], _mm_alignr_epi8(cdgh, tmp, 8));   /* HGFE */
}

/* CPUID: SHA is leaf 7 EBX bit 29, SSE4.1 leaf 1 ECX bit 19 (asked
 * directly: not every compiler's __builtin_cpu_supports knows "sha"). */
int orc_sha256_have_shani(void)
{
	unsigned a, b, c, d;

	if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 19)))
		return 0;
	return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 29));
}
#else
void orc_sha256_blocks_shani(uint32_t s[8], const unsigned char *p, size_t n)
{
	orc_sha256_blocks_c(s, p, n);
}

int orc_sha256_have_shani(void)
{
	return 0;
}
#endif

/* n whole blocks, by the fastest rounds this CPU has (decided once). */
static void blocks(uint32_t s[8], const unsigned char *p, size_t n)
{
	static int fast = -1;

	if (fast < 0)
		fast = orc_sha256_have_shani();
	if (fast)
		orc_sha256_blocks_shani(s, p, n);
	else
		orc_sha256_blocks_c(s, p, n);
}

void orc_sha256_init(struct orc_sha256 *h)
{
	static const uint32_t iv[8] = {
		0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
		0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
	};

	memcpy(h->state, iv, sizeof(iv));
	h->length = 0;
	h->used = 0;
}

void orc_sha256_update(struct orc_sha256 *h, const void *data, size_t n)
{
	const unsigned char *p = data;
	size_t take;

	h->length += n;
	if (h->used) {
		take = 64 - h->used < n ? 64 - h->used : n;
		memcpy(h->block + h->used, p, take);
		h->used += take;
		p += take;
		n -= take;
		if (h->used < 64)
			return;
		blocks(h->state, h->block, 1);
		h->used = 0;
	}
	blocks(h->state, p, n / 64);
	p += n / 64 * 64;
	n %= 64;
	memcpy(h->block, p, n);
	h->used = n;
}

void orc_sha256_final(struct orc_sha256 *h, unsigned char out[32])
{
	uint64_t bits = h->length * 8;
	int i;

	h->block[h->used++] = 0x80;
	if (h->used > 56) {
		memset(h->block + h->used, 0, 64 - h->used);
		blocks(h->state, h->block, 1);
		h->used = 0;
	}
	memset(h->block + h->used, 0, 56 - h->used);
	for (i = 0; i < 8; i++)
		h->block[56 + i] = (unsigned char)(bits >> (56 - 8 * i));
	blocks(h->state, h->block, 1);
	for (i = 0; i < 8; i++) {
		out[4 * i] = (unsigned char)(h->state[i] >> 24);
		out[4 * i + 1] = (unsigned char)(h->state[i] >> 16);
		out[4 * i + 2] = (unsigned char)(h->state[i] >> 8);
		out[4 * i + 3] = (unsigned char)h->state[i];
	}
}

void orc_sha256_hex(struct orc_sha256 *h, char out[65])
{
	static const char digits[] = "0123456789abcdef";
	unsigned char d[32];
	int i;

	orc_sha256_final(h, d);
	for (i = 0; i < 32; i++) {
		out[2 * i] = digits[d[i] >> 4];
		out[2 * i + 1] = digits[d[i] & 15];
	}
	out[64] = '\0';
}
