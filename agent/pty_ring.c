#include "pty_ring.h"

#include <string.h>

#include "xalloc.h"

void pty_ring_alloc(struct pty_ring *r, size_t cap)
{
	r->buf = xmalloc(cap);
	r->cap = cap;
	r->end = 0;
}

void pty_ring_release(struct pty_ring *r)
{
	free(r->buf);
	r->buf = NULL;
	r->cap = 0;
}

void pty_ring_write(struct pty_ring *r, const char *data, size_t n)
{
	size_t pos, first;

	if (n > r->cap) { /* only the last cap bytes can be kept */
		r->end += n - r->cap;
		data += n - r->cap;
		n = r->cap;
	}
	pos = (size_t)(r->end % r->cap);
	first = r->cap - pos < n ? r->cap - pos : n;
	memcpy(r->buf + pos, data, first);
	memcpy(r->buf, data + first, n - first);
	r->end += n;
}

uint64_t pty_ring_start(const struct pty_ring *r)
{
	return r->end > r->cap ? r->end - r->cap : 0;
}

size_t pty_ring_peek(const struct pty_ring *r, uint64_t off, const char **p)
{
	size_t pos, n;

	if (off < pty_ring_start(r) || off >= r->end)
		return 0;
	pos = (size_t)(off % r->cap);
	n = (size_t)(r->end - off);
	if (n > r->cap - pos)
		n = r->cap - pos;
	*p = r->buf + pos;
	return n;
}
