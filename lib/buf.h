#ifndef ORC_BUF_H
#define ORC_BUF_H
#include <stdarg.h>
#include <stddef.h>
/*
 * A growable byte buffer with a hard maximum (curl's dynbuf, git's strbuf).
 * The contents are always NUL-terminated, so buf.ptr can be used as a
 * C string when the data is text.
 *
 *   struct orc_buf b = ORC_BUF_INIT;      // no maximum
 *   orc_buf_init(&b, 1 << 20);            // at most 1 MiB
 *   if (orc_buf_add(&b, data, n) < 0) ... // ORC_ETOOBIG past the maximum
 *   orc_buf_release(&b);                  // harmless twice
 *
 * Appending past the maximum fails with ORC_ETOOBIG and leaves the buffer
 * unchanged. Out of memory aborts (xalloc.h).
 */
struct orc_buf {
	char *ptr;     /* NULL until the first append; then NUL-terminated */
	size_t len;
	size_t alloc;
	size_t max;    /* 0: no limit */
};

#define ORC_BUF_INIT { NULL, 0, 0, 0 }

void orc_buf_init(struct orc_buf *b, size_t max);
void orc_buf_release(struct orc_buf *b);
void orc_buf_reset(struct orc_buf *b);
int orc_buf_add(struct orc_buf *b, const void *data, size_t n);
int orc_buf_adds(struct orc_buf *b, const char *s);
int orc_buf_addc(struct orc_buf *b, char c);
int orc_buf_addf(struct orc_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int orc_buf_vaddf(struct orc_buf *b, const char *fmt, va_list ap);
/* The contents as a C string ("" when empty); never NULL. */
const char *orc_buf_cstr(const struct orc_buf *b);
/* Hand the allocation to the caller (never NULL) and reset the buffer. */
char *orc_buf_detach(struct orc_buf *b, size_t *len_out);
#endif
