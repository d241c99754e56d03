/*
 * lib/sha256.c: the digest PUT /files and POST /files/base64 report and
 * the kubernetes checkpoint store's checksum, with its two block functions
 * (SHA-NI and C) through its internal header.
 */
#include <string.h>

#include "sha256.h"
#include "sha256_impl.h"
#include "unit.h"

static void hex_of(char out[65], const void *data, size_t n)
{
	struct orc_sha256 h;

	orc_sha256_init(&h);
	orc_sha256_update(&h, data, n);
	orc_sha256_hex(&h, out);
}

/* FIPS 180-4 / NIST CAVS example messages. */
static void sha256_known_answers(void)
{
	char hex[65];

	hex_of(hex, "", 0);
	CHECK_STR(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	hex_of(hex, "abc", 3);
	CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	hex_of(hex, "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56);
	CHECK_STR(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
	hex_of(hex, "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
		    "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu", 112);
	CHECK_STR(hex, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

/* The padding moves to a second block past 55 bytes: every length around
 * the block edges (values from Python's hashlib). */
static void sha256_block_boundaries(void)
{
	static const struct { size_t n; const char *hex; } cases[] = {
		{ 55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318" },
		{ 56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a" },
		{ 63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34" },
		{ 64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb" },
		{ 65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0" },
		{ 119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb" },
		{ 120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c" },
		{ 127, "c57e9278af78fa3cab38667bef4ce29d783787a2f731d4e12200270f0c32320a" },
		{ 128, "6836cf13bac400e9105071cd6af47084dfacad4e5e302c94bfed24e013afb73e" },
	};
	char a[128], hex[65];
	size_t i;

	memset(a, 'a', sizeof(a));
	for (i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		hex_of(hex, a, cases[i].n);
		CHECK_STR(hex, cases[i].hex);
	}
}

/* Uploads arrive in pieces of any size: every split of a 300-byte message
 * into two updates, and one byte at a time, gives the one-shot digest. */
static void sha256_incremental_matches_one_shot(void)
{
	static const char want[] = "9a76b8af8f16f19d60de2b3999c22f9d10be4395c90ea3bfc5eb6cd6254243af";
	unsigned char m[300];
	struct orc_sha256 h;
	char hex[65];
	size_t i, cut, bad = 0;

	for (i = 0; i < sizeof(m); i++)
		m[i] = (unsigned char)(i * 7 % 256);
	hex_of(hex, m, sizeof(m));
	CHECK_STR(hex, want);
	for (cut = 0; cut <= sizeof(m); cut++) {
		orc_sha256_init(&h);
		orc_sha256_update(&h, m, cut);
		orc_sha256_update(&h, m + cut, sizeof(m) - cut);
		orc_sha256_hex(&h, hex);
		bad += strcmp(hex, want) != 0;
	}
	CHECK(bad == 0);
	orc_sha256_init(&h);
	for (i = 0; i < sizeof(m); i++)
		orc_sha256_update(&h, m + i, 1);
	orc_sha256_update(&h, m, 0);
	orc_sha256_hex(&h, hex);
	CHECK_STR(hex, want);
}

/* NIST's long message: one million 'a', in 1000-byte updates. */
static void sha256_million_a(void)
{
	struct orc_sha256 h;
	char chunk[1000], hex[65];
	int i;

	memset(chunk, 'a', sizeof(chunk));
	orc_sha256_init(&h);
	for (i = 0; i < 1000; i++)
		orc_sha256_update(&h, chunk, sizeof(chunk));
	CHECK(h.length == 1000000);
	orc_sha256_hex(&h, hex);
	CHECK_STR(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

/* The raw digest is the hex digest's bytes. */
static void sha256_final_matches_hex(void)
{
	struct orc_sha256 h1, h2;
	unsigned char d[32];
	char hex[65], from_raw[65];
	int i;

	orc_sha256_init(&h1);
	orc_sha256_update(&h1, "abc", 3);
	h2 = h1;
	orc_sha256_final(&h1, d);
	orc_sha256_hex(&h2, hex);
	for (i = 0; i < 32; i++)
		snprintf(from_raw + 2 * i, 3, "%02x", d[i]);
	CHECK_STR(from_raw, hex);
	CHECK(d[0] == 0xba && d[31] == 0xad);
}

/* The SHA-NI rounds (used where the CPU has them) and the C rounds give
 * the same state on every block of varied data, several blocks at once
 * included. Skipped (but the C rounds still checked) on other CPUs. */
static void sha256_shani_matches_c(void)
{
	static unsigned char m[64 * 257];
	uint32_t a[8], b[8];
	uint32_t x = 12345;
	size_t i, n, bad = 0;

	for (i = 0; i < sizeof(m); i++) {
		x = x * 1103515245u + 12345u;
		m[i] = (unsigned char)(x >> 16);
	}
	for (n = 1; n <= 257; n += 64) {
		memcpy(a, (uint32_t[8]){ 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
					 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 }, sizeof(a));
		memcpy(b, a, sizeof(b));
		orc_sha256_blocks_c(a, m, n);
		if (orc_sha256_have_shani())
			orc_sha256_blocks_shani(b, m, n);
		else
			orc_sha256_blocks_c(b, m, n);
		bad += memcmp(a, b, sizeof(a)) != 0;
	}
	CHECK(bad == 0);
}

const struct unit_test sha256_tests[] = {
	{ "sha256_shani_matches_c", sha256_shani_matches_c },
	{ "sha256_known_answers", sha256_known_answers },
	{ "sha256_block_boundaries", sha256_block_boundaries },
	{ "sha256_incremental_matches_one_shot", sha256_incremental_matches_one_shot },
	{ "sha256_million_a", sha256_million_a },
	{ "sha256_final_matches_hex", sha256_final_matches_hex },
	{ NULL, NULL },
};
