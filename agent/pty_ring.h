#ifndef AGENT_PTY_RING_H
#define AGENT_PTY_RING_H
#include <stddef.h>
#include <stdint.h>
/*
 * The recent output of a PTY session: the last `cap` bytes of everything
 * written, addressed by absolute byte offsets from the session's start, so
 * a client that lost its connection can ask for "everything from offset N".
 *
 *   pty_ring_alloc(&r, 1 << 20);
 *   pty_ring_write(&r, data, n);          // oldest bytes fall out
 *   n = pty_ring_peek(&r, off, &p);       // contiguous bytes at off
 *   pty_ring_release(&r);
 *
 * The storage is allocated once, by pty_ring_alloc; untouched pages cost nothing.
 */
struct pty_ring {
	char *buf;
	size_t cap;
	uint64_t end;        /* offset just past the newest byte */
};

void pty_ring_alloc(struct pty_ring *r, size_t cap);
void pty_ring_release(struct pty_ring *r);
void pty_ring_write(struct pty_ring *r, const char *data, size_t n);
/* The oldest offset still held. */
uint64_t pty_ring_start(const struct pty_ring *r);
/* Point *p at the bytes from off (start <= off <= end) up to the end or
 * the wrap, whichever comes first; returns their count (0 at the end). */
size_t pty_ring_peek(const struct pty_ring *r, uint64_t off, const char **p);
#endif
