#ifndef ORC_STRUTIL_H
#define ORC_STRUTIL_H
#include <stddef.h>
#include <stdint.h>
/*
 * Strict parsing and small string checks for input from outside.
 * Parsers return 0 or ORC_EINVALID and set *out only on success.
 */

/* Whole string is a decimal integer within [min, max]. */
int orc_parse_i64(int64_t *out, const char *s, int64_t min, int64_t max);
/* Whole string is a finite decimal number within [min, max]. */
int orc_parse_double(double *out, const char *s, double min, double max);
/* CPU quantity as Kubernetes writes it: "2", "0.5", "500m" -> millicores. */
int orc_parse_cpu(int64_t *out_millis, const char *s);
/* Memory quantity: "512Mi", "16Gi", "1G", "1048576" -> bytes. */
int orc_parse_memory(int64_t *out_bytes, const char *s);
/* A DNS-1123 label: [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 chars. */
int orc_is_dns_label(const char *s);
/* The bytes are valid UTF-8 (no overlongs, no surrogates). */
int orc_utf8_valid(const char *s, size_t n);
/* Columns a UTF-8 string takes in a table: its lead bytes (not continuation bytes). */
size_t orc_utf8_width(const char *s);
/* Fill out with n random bytes from getrandom(2); aborts on failure. */
void orc_random_bytes(void *out, size_t n);
/* 1 when s[0..n) are all lowercase hex digits. */
int orc_is_lower_hex(const char *s, size_t n);
/* Lowercase hex of n random bytes into out (2n+1 bytes). */
void orc_random_hex(char *out, size_t nbytes);
/* Constant-time comparison of two byte strings of the same length. */
int orc_ct_equal(const void *a, const void *b, size_t n);
/* Seconds since the epoch as a double (CLOCK_REALTIME). */
double orc_now(void);
/* Monotonic milliseconds. */
int64_t orc_mono_ms(void);
/* Does an If-Match / If-None-Match list ("*", or quoted tags separated by
 * commas) name etag (quoted)? weak: W/"x" matches "x" (If-None-Match). */
int orc_etag_listed(const char *list, const char *etag, int weak);
#endif
