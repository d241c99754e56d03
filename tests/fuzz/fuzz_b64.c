/*
 * agent_b64_decode (agent/files_base64.c: the "content" of POST
 * /files/base64) and orc_base64_decode (lib/base64.c: the
 * "data" of PTY stdin frames).
 *
 * Properties: agent_b64_decode writes no more than the 3 * ceil(n / 4)
 * bytes its callers allocate (the buffer here is exactly that, so ASan
 * sees any overrun) and accepts only canonical base64: re-encoding gives
 * back the input (padding optional); where both decoders accept, they
 * agree; any bytes survive encode then strict decode.
 */
#include "fuzz.h"

#include "buf.h"
#include "err.h"
#include "files.h"
#include "base64.h"

static size_t unpadded(const char *s, size_t n)
{
	while (n > 0 && s[n - 1] == '=')
		n--;
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *s = (const char *)data;
	size_t room = 3 * ((size + 3) / 4), outlen = (size_t)-1;
	unsigned char *out = malloc(room ? room : 1);
	struct orc_buf enc = ORC_BUF_INIT, strict = ORC_BUF_INIT, rt = ORC_BUF_INIT;
	int loose_ok, strict_ok;

	FUZZ_ASSERT(out);
	loose_ok = agent_b64_decode(out, &outlen, s, size) == 0;
	if (loose_ok) {
		FUZZ_ASSERT(outlen <= room);
		FUZZ_ASSERT(orc_base64_encode(&enc, out, outlen) == 0);
		/* canonical: the same digits, and padding either absent or exact */
		FUZZ_ASSERT(unpadded(enc.ptr ? enc.ptr : "", enc.len) == unpadded(s, size));
		FUZZ_ASSERT(!memcmp(orc_buf_cstr(&enc), s, unpadded(s, size)));
		FUZZ_ASSERT(size == unpadded(s, size) || size == enc.len);
	} else {
		FUZZ_ASSERT(outlen == (size_t)-1);
	}

	strict_ok = orc_base64_decode(&strict, s, size) == 0;
	if (strict_ok) {
		FUZZ_ASSERT(size % 4 == 0 && strict.len <= room);
		if (loose_ok)
			FUZZ_ASSERT(strict.len == outlen && !memcmp(orc_buf_cstr(&strict), out, outlen));
	}
	if (loose_ok && size % 4 == 0)
		FUZZ_ASSERT(strict_ok);

	/* Arbitrary bytes: encode, then both decoders give them back. */
	orc_buf_reset(&enc);
	FUZZ_ASSERT(orc_base64_encode(&enc, data, size) == 0);
	FUZZ_ASSERT(orc_base64_decode(&rt, orc_buf_cstr(&enc), enc.len) == 0);
	FUZZ_ASSERT(rt.len == size && !memcmp(orc_buf_cstr(&rt), data, size));
	free(out);
	out = malloc(3 * ((enc.len + 3) / 4) + 1);
	FUZZ_ASSERT(out);
	FUZZ_ASSERT(agent_b64_decode(out, &outlen, orc_buf_cstr(&enc), enc.len) == 0);
	FUZZ_ASSERT(outlen == size && !memcmp(out, data, size));

	free(out);
	orc_buf_release(&enc);
	orc_buf_release(&strict);
	orc_buf_release(&rt);
	return 0;
}
