/*
 * orc_utf8_valid and orc_json_new_text (lib/strutil.c, lib/json.c): the
 * gate for strings from outside, and the repair of process output (exec
 * stdout/stderr) before it goes into JSON.
 *
 * Properties: orc_utf8_valid agrees with an independent decoder (no
 * overlongs, no surrogates, nothing past U+10FFFF); orc_json_new_text
 * keeps valid text unchanged and otherwise returns valid UTF-8 in which
 * every valid sequence of the input survives in order, and the string
 * round-trips through orc_json_str and orc_json_parse.
 */
#include "fuzz.h"

#include "err.h"
#include "json.h"
#include "strutil.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data;
	json_object *o, *back = NULL;
	const char *s, *ser;
	size_t n, serlen, ascii_in = 0, ascii_out = 0, i;
	int valid = orc_utf8_valid(text, size);
	char msg[256];

	FUZZ_ASSERT(valid == fuzz_utf8_ok(data, size));
	o = orc_json_new_text(text, size);
	FUZZ_ASSERT(o && json_object_is_type(o, json_type_string));
	s = json_object_get_string(o);
	n = (size_t)json_object_get_string_len(o);
	FUZZ_ASSERT(fuzz_utf8_ok((const unsigned char *)s, n));
	if (valid) {
		FUZZ_ASSERT(n == size && !memcmp(s, text, size));
	} else {
		/* Each bad byte becomes U+FFFD (3 bytes): never shorter, at most 3x. */
		FUZZ_ASSERT(n >= size && n <= 3 * size);
	}
	/* ASCII bytes are never eaten by a replacement. */
	for (i = 0; i < size; i++)
		ascii_in += data[i] < 0x80;
	for (i = 0; i < n; i++)
		ascii_out += (unsigned char)s[i] < 0x80;
	FUZZ_ASSERT(ascii_in == ascii_out);

	ser = orc_json_str(o, &serlen);
	FUZZ_ASSERT(orc_json_parse(&back, ser, serlen, msg, sizeof(msg)) == 0);
	FUZZ_ASSERT(json_object_is_type(back, json_type_string) &&
		    (size_t)json_object_get_string_len(back) == n &&
		    !memcmp(json_object_get_string(back), s, n));
	json_object_put(back);
	json_object_put(o);
	return 0;
}
