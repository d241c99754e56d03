/*
 * orc_parse_cpu, orc_parse_memory, orc_parse_i64 and orc_parse_double
 * (lib/strutil.c): the cpu and memory of POST /sandboxes and numeric query
 * parameters.
 *
 * Properties: a result is set only on success and stays in range (cpu
 * 1..1024000 millicores, memory 1..9e18 bytes); the accepted spellings are
 * only digits with at most one dot and a known suffix (no signs, spaces,
 * exponents, hex, "inf" or "nan").
 */
#include <math.h>

#include "fuzz.h"

#include "err.h"
#include "strutil.h"

#define UNSET INT64_MIN

/* Digits with at most one dot, not just "." (the grammar of a quantity's
 * number part), followed by exactly one of the allowed suffixes. */
static int plain_number(const char *s, size_t n)
{
	size_t i, dots = 0, digits = 0;

	for (i = 0; i < n; i++) {
		if (s[i] == '.')
			dots++;
		else if (s[i] >= '0' && s[i] <= '9')
			digits++;
		else
			return 0;
	}
	return digits > 0 && dots <= 1;
}

static int has_suffix(const char *s, size_t n, const char *suf, size_t *numlen)
{
	size_t k = strlen(suf);

	if (k > n || memcmp(s + n - k, suf, k))
		return 0;
	*numlen = n - k;
	return 1;
}

static void check_cpu(const char *s)
{
	int64_t m = UNSET;
	size_t n = strlen(s), numlen;

	if (orc_parse_cpu(&m, s) < 0) {
		FUZZ_ASSERT(m == UNSET);
		return;
	}
	FUZZ_ASSERT(m >= 1 && m <= 1024 * 1000);
	if (has_suffix(s, n, "m", &numlen)) {
		FUZZ_ASSERT(plain_number(s, numlen) && !memchr(s, '.', numlen));
	} else {
		FUZZ_ASSERT(plain_number(s, n));
		FUZZ_ASSERT(fabs(strtod(s, NULL) * 1000 - (double)m) <= 0.5 + 1e-9);
	}
}

static void check_memory(const char *s)
{
	static const char *const suffixes[] = { "Ki", "Mi", "Gi", "Ti", "k", "K", "M", "G", "T" };
	int64_t b = UNSET;
	size_t n = strlen(s), numlen = n, i;

	if (orc_parse_memory(&b, s) < 0) {
		FUZZ_ASSERT(b == UNSET);
		return;
	}
	FUZZ_ASSERT(b >= 1 && (double)b <= 9e18);
	for (i = 0; i < sizeof(suffixes) / sizeof(*suffixes); i++)
		if (has_suffix(s, n, suffixes[i], &numlen))
			break;
	if (i == sizeof(suffixes) / sizeof(*suffixes))
		numlen = n;
	FUZZ_ASSERT(plain_number(s, numlen));
}

static void check_numbers(const char *s)
{
	int64_t i = UNSET;
	double d = -1.5;

	if (orc_parse_i64(&i, s, -1000000, 1000000) == 0)
		FUZZ_ASSERT(i >= -1000000 && i <= 1000000);
	else
		FUZZ_ASSERT(i == UNSET);
	if (orc_parse_double(&d, s, 0, 1e15) == 0)
		FUZZ_ASSERT(isfinite(d) && d >= 0 && d <= 1e15);
	else
		FUZZ_ASSERT(d == -1.5);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s;

	if (size > 256)
		return 0;
	s = fuzz_cstr(data, size);
	check_cpu(s);
	check_memory(s);
	check_numbers(s);
	free(s);
	return 0;
}
