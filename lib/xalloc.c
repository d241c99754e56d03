#include "xalloc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die_oom(size_t n)
{
	fprintf(stderr, "fatal: out of memory allocating %zu bytes\n", n);
	abort();
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		die_oom(n);
	return p;
}

void *xcalloc(size_t nmemb, size_t size)
{
	void *p = calloc(nmemb ? nmemb : 1, size ? size : 1);
	if (!p)
		die_oom(orc_mul_size(nmemb, size));
	return p;
}

void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (!q)
		die_oom(n);
	return q;
}

char *xstrdup(const char *s)
{
	return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
	size_t len = strnlen(s, n);
	char *p = xmalloc(orc_add_size(len, 1));
	memcpy(p, s, len);
	p[len] = '\0';
	return p;
}

char *xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *out = NULL;
	va_start(ap, fmt);
	if (vasprintf(&out, fmt, ap) < 0)
		die_oom(0);
	va_end(ap);
	return out;
}

size_t orc_add_size(size_t a, size_t b)
{
	if (a > (size_t)-1 - b) {
		fprintf(stderr, "fatal: size overflow %zu + %zu\n", a, b);
		abort();
	}
	return a + b;
}

size_t orc_mul_size(size_t a, size_t b)
{
	if (b && a > (size_t)-1 / b) {
		fprintf(stderr, "fatal: size overflow %zu * %zu\n", a, b);
		abort();
	}
	return a * b;
}
