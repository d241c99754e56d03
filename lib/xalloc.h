#ifndef ORC_XALLOC_H
#define ORC_XALLOC_H
#include <stddef.h>
/*
 * Allocation that aborts on out-of-memory (redis's zmalloc, git's xmalloc),
 * so no caller carries an untested error path for it. Size arithmetic that
 * could overflow goes through orc_mul_size/orc_add_size, which abort too.
 */
void *xmalloc(size_t n);
void *xcalloc(size_t nmemb, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
/* printf into a fresh allocation. */
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
size_t orc_add_size(size_t a, size_t b);
size_t orc_mul_size(size_t a, size_t b);
#endif
