/*
 * lib/ws_accept.c and lib/sha1.c: the WebSocket handshake's proof, which
 * clients we did not write (browsers, websocket-client, npm ws) check.
 */
#include <string.h>

#include "sha1.h"
#include "unit.h"
#include "ws_accept.h"

static void sha1_hex(char out[41], const void *data, size_t n)
{
	unsigned char d[ORC_SHA1_LEN];
	int i;

	orc_sha1(d, data, n);
	for (i = 0; i < ORC_SHA1_LEN; i++)
		snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* FIPS 180-4 examples, and padding at the block edges (Python's hashlib). */
static void sha1_known_answers(void)
{
	static const struct { size_t n; const char *hex; } a_runs[] = {
		{ 55, "c1c8bbdc22796e28c0e15163d20899b65621d65a" },
		{ 56, "c2db330f6083854c99d4b5bfb6e8f29f201be699" },
		{ 63, "03f09f5b158a7a8cdad920bddc29b81c18a551f5" },
		{ 64, "0098ba824b5c16427bd7a1122a5a442a25ec644d" },
		{ 65, "11655326c708d70319be2610e8a57d9a5b959d3b" },
	};
	char a[128], hex[41];
	size_t i;

	sha1_hex(hex, "", 0);
	CHECK_STR(hex, "da39a3ee5e6b4b0d3255bfef95601890afd80709");
	sha1_hex(hex, "abc", 3);
	CHECK_STR(hex, "a9993e364706816aba3e25717850c26c9cd0d89d");
	sha1_hex(hex, "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56);
	CHECK_STR(hex, "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
	memset(a, 'a', sizeof(a));
	for (i = 0; i < sizeof(a_runs) / sizeof(*a_runs); i++) {
		sha1_hex(hex, a, a_runs[i].n);
		CHECK_STR(hex, a_runs[i].hex);
	}
}

/* RFC 6455 section 1.3: the sample nonce and its accept value. */
static void ws_accept_rfc6455_example(void)
{
	char out[ORC_WS_ACCEPT_LEN + 1];

	orc_ws_accept(out, "dGhlIHNhbXBsZSBub25jZQ==");
	CHECK_STR(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
	CHECK_STR(ORC_WS_GUID, "258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
}

/* Another key gives another value (Python: base64(sha1(key + GUID))). */
static void ws_accept_other_key(void)
{
	char out[ORC_WS_ACCEPT_LEN + 1];

	orc_ws_accept(out, "AAAAAAAAAAAAAAAAAAAAAA==");
	CHECK_STR(out, "ICX+Yqv66kxgM0FcWaLWlFLwTAI=");
}

const struct unit_test ws_accept_tests[] = {
	{ "sha1_known_answers", sha1_known_answers },
	{ "ws_accept_rfc6455_example", ws_accept_rfc6455_example },
	{ "ws_accept_other_key", ws_accept_other_key },
	{ NULL, NULL },
};
