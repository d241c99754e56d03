#ifndef ORC_FUZZ_H
#define ORC_FUZZ_H
/*
 * Shared by the libFuzzer targets (tests/fuzz/README.md). A target checks
 * properties of the parser beyond "does not crash"; a broken property is
 * reported with FUZZ_ASSERT, which prints the condition and aborts, so
 * libFuzzer saves the input like any other crash.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_ASSERT(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "fuzz: %s:%d: property failed: %s\n", __FILE__, __LINE__, #cond); \
		abort(); \
	} \
} while (0)

/* The input as a malloc'd C string (cut at the first NUL, as a C caller
 * would see it); the caller frees it. */
static inline char *fuzz_cstr(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);

	if (!s)
		abort();
	memcpy(s, data, size);
	s[size] = '\0';
	return s;
}

/* An independent UTF-8 check (RFC 3629 table 3-7, byte ranges), to hold
 * orc_utf8_valid and orc_json_new_text to. */
static inline int fuzz_utf8_ok(const unsigned char *s, size_t n)
{
	size_t i = 0;

	while (i < n) {
		unsigned char c = s[i];
		unsigned char lo = 0x80, hi = 0xbf;
		size_t len, k;

		if (c <= 0x7f) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) len = 2;
		else if (c == 0xe0) { len = 3; lo = 0xa0; }
		else if (c >= 0xe1 && c <= 0xec) len = 3;
		else if (c == 0xed) { len = 3; hi = 0x9f; }
		else if (c >= 0xee && c <= 0xef) len = 3;
		else if (c == 0xf0) { len = 4; lo = 0x90; }
		else if (c >= 0xf1 && c <= 0xf3) len = 4;
		else if (c == 0xf4) { len = 4; hi = 0x8f; }
		else return 0;
		if (n - i < len)
			return 0;
		if (s[i + 1] < lo || s[i + 1] > hi)
			return 0;
		for (k = 2; k < len; k++)
			if (s[i + k] < 0x80 || s[i + k] > 0xbf)
				return 0;
		i += len;
	}
	return 1;
}
#endif
