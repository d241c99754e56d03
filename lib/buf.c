#include "buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "xalloc.h"

void orc_buf_init(struct orc_buf *b, size_t max)
{
	b->ptr = NULL;
	b->len = 0;
	b->alloc = 0;
	b->max = max;
}

void orc_buf_release(struct orc_buf *b)
{
	free(b->ptr);
	b->ptr = NULL;
	b->len = 0;
	b->alloc = 0;
}

void orc_buf_reset(struct orc_buf *b)
{
	b->len = 0;
	if (b->ptr)
		b->ptr[0] = '\0';
}

static int grow(struct orc_buf *b, size_t extra)
{
	size_t need = orc_add_size(orc_add_size(b->len, extra), 1);
	size_t n;

	if (b->max && need - 1 > b->max)
		return ORC_ETOOBIG;
	if (need <= b->alloc)
		return 0;
	n = b->alloc ? b->alloc : 64;
	while (n < need)
		n = orc_mul_size(n, 2);
	b->ptr = xrealloc(b->ptr, n);
	b->alloc = n;
	return 0;
}

int orc_buf_add(struct orc_buf *b, const void *data, size_t n)
{
	int err;

	if ((err = grow(b, n)) < 0)
		return err;
	if (n)
		memcpy(b->ptr + b->len, data, n);
	b->len += n;
	b->ptr[b->len] = '\0';
	return 0;
}

int orc_buf_adds(struct orc_buf *b, const char *s)
{
	return orc_buf_add(b, s, strlen(s));
}

int orc_buf_addc(struct orc_buf *b, char c)
{
	return orc_buf_add(b, &c, 1);
}

int orc_buf_vaddf(struct orc_buf *b, const char *fmt, va_list ap)
{
	va_list cp;
	int n, err;

	va_copy(cp, ap);
	n = vsnprintf(NULL, 0, fmt, cp);
	va_end(cp);
	if (n < 0)
		return ORC_ERROR;
	if ((err = grow(b, (size_t)n)) < 0)
		return err;
	vsnprintf(b->ptr + b->len, (size_t)n + 1, fmt, ap);
	b->len += (size_t)n;
	return 0;
}

int orc_buf_addf(struct orc_buf *b, const char *fmt, ...)
{
	va_list ap;
	int err;

	va_start(ap, fmt);
	err = orc_buf_vaddf(b, fmt, ap);
	va_end(ap);
	return err;
}

const char *orc_buf_cstr(const struct orc_buf *b)
{
	return b->ptr ? b->ptr : "";
}

char *orc_buf_detach(struct orc_buf *b, size_t *len_out)
{
	char *p = b->ptr ? b->ptr : xstrdup("");

	if (len_out)
		*len_out = b->len;
	b->ptr = NULL;
	b->len = 0;
	b->alloc = 0;
	return p;
}
