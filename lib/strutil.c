#include "strutil.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "err.h"

int orc_parse_i64(int64_t *out, const char *s, int64_t min, int64_t max)
{
	char *end;
	long long v;

	if (!s || !*s || *s == ' ' || *s == '+')
		return ORC_EINVALID;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return ORC_EINVALID;
	*out = v;
	return 0;
}

int orc_parse_double(double *out, const char *s, double min, double max)
{
	char *end;
	double v;

	if (!s || !*s || *s == ' ')
		return ORC_EINVALID;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || !isfinite(v) || v < min || v > max)
		return ORC_EINVALID;
	*out = v;
	return 0;
}

static int plain_decimal(const char *s, size_t n)
{
	size_t i, dots = 0;

	if (!n)
		return 0;
	for (i = 0; i < n; i++) {
		if (s[i] == '.')
			dots++;
		else if (s[i] < '0' || s[i] > '9')
			return 0;
	}
	return dots <= 1 && !(n == 1 && dots == 1);
}

int orc_parse_cpu(int64_t *out_millis, const char *s)
{
	size_t n = s ? strlen(s) : 0;
	char num[32];
	double v;

	if (!n || n >= sizeof(num))
		return ORC_EINVALID;
	if (s[n - 1] == 'm') {
		int64_t m;
		memcpy(num, s, n - 1);
		num[n - 1] = '\0';
		if (!plain_decimal(num, n - 1) || strchr(num, '.') ||
		    orc_parse_i64(&m, num, 1, 1024 * 1000) < 0)
			return ORC_EINVALID;
		*out_millis = m;
		return 0;
	}
	if (!plain_decimal(s, n) || orc_parse_double(&v, s, 0.001, 1024) < 0)
		return ORC_EINVALID;
	*out_millis = (int64_t)llround(v * 1000);
	return *out_millis > 0 ? 0 : ORC_EINVALID;
}

static const struct { const char *suffix; int64_t mult; } mem_units[] = {
	{ "Ki", 1LL << 10 }, { "Mi", 1LL << 20 }, { "Gi", 1LL << 30 }, { "Ti", 1LL << 40 },
	{ "k", 1000LL }, { "K", 1000LL }, { "M", 1000000LL }, { "G", 1000000000LL },
	{ "T", 1000000000000LL }, { "", 1 },
};

int orc_parse_memory(int64_t *out_bytes, const char *s)
{
	size_t n = s ? strlen(s) : 0, i, sl;
	char num[32];
	double v;

	if (!n || n >= sizeof(num))
		return ORC_EINVALID;
	for (i = 0; i < sizeof(mem_units) / sizeof(*mem_units); i++) {
		sl = strlen(mem_units[i].suffix);
		if (sl > n || strcmp(s + n - sl, mem_units[i].suffix))
			continue;
		memcpy(num, s, n - sl);
		num[n - sl] = '\0';
		if (!plain_decimal(num, n - sl) || orc_parse_double(&v, num, 0, 1e15) < 0)
			return ORC_EINVALID;
		v *= (double)mem_units[i].mult;
		if (v < 1 || v > 9e18)
			return ORC_EINVALID;
		*out_bytes = (int64_t)v;
		return 0;
	}
	return ORC_EINVALID;
}

int orc_is_dns_label(const char *s)
{
	size_t i, n = s ? strlen(s) : 0;

	if (n < 1 || n > 63)
		return 0;
	for (i = 0; i < n; i++) {
		char c = s[i];
		int alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
		if (!alnum && !(c == '-' && i > 0 && i < n - 1))
			return 0;
	}
	return 1;
}

size_t orc_utf8_width(const char *s)
{
	size_t w = 0;

	for (; *s; s++)
		if (((unsigned char)*s & 0xc0) != 0x80)
			w++;
	return w;
}

int orc_utf8_valid(const char *str, size_t n)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0;

	while (i < n) {
		unsigned c = s[i];
		size_t len;
		unsigned cp, k;

		if (c < 0x80) { i++; continue; }
		if (c >= 0xc2 && c <= 0xdf) { len = 2; cp = c & 0x1f; }
		else if (c >= 0xe0 && c <= 0xef) { len = 3; cp = c & 0x0f; }
		else if (c >= 0xf0 && c <= 0xf4) { len = 4; cp = c & 0x07; }
		else return 0;
		if (i + len > n)
			return 0;
		for (k = 1; k < len; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return 0;
			cp = (cp << 6) | (s[i + k] & 0x3f);
		}
		if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
		    (cp >= 0xd800 && cp <= 0xdfff))
			return 0;
		i += len;
	}
	return 1;
}

void orc_random_bytes(void *out, size_t n)
{
	unsigned char *p = out;
	size_t got = 0;
	ssize_t r;

	while (got < n) {
		r = getrandom(p + got, n - got, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			fprintf(stderr, "fatal: getrandom() failed: %s\n", strerror(errno));
			abort();
		}
		got += (size_t)r;
	}
}

int orc_is_lower_hex(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
}

void orc_random_hex(char *out, size_t nbytes)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char raw[64];
	size_t i;

	if (nbytes > sizeof(raw))
		abort();
	orc_random_bytes(raw, nbytes);
	for (i = 0; i < nbytes; i++) {
		out[2 * i] = hex[raw[i] >> 4];
		out[2 * i + 1] = hex[raw[i] & 15];
	}
	out[2 * nbytes] = '\0';
}

int orc_ct_equal(const void *a, const void *b, size_t n)
{
	const volatile unsigned char *x = a, *y = b;
	unsigned char d = 0;
	size_t i;

	for (i = 0; i < n; i++)
		d |= x[i] ^ y[i];
	return d == 0;
}

double orc_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int64_t orc_mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int orc_etag_listed(const char *list, const char *etag, int weak)
{
	size_t n = strlen(etag);
	const char *p = list;

	while (*p) {
		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		if (weak && !strncmp(p, "W/", 2))
			p += 2;
		if (*p == '*' || (!strncmp(p, etag, n) && (p[n] == '\0' || p[n] == ',' || p[n] == ' ' ||
							   p[n] == '\t')))
			return 1;
		while (*p && *p != ',')
			p++;
	}
	return 0;
}
