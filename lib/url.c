/*
 * Percent-encoding (url.h).
 */
#include <string.h>

#include "buf.h"
#include "url.h"

static int unreserved(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_' || c == '~';
}

char *orc_url_escape(const char *s, const char *keep)
{
	static const char hex[] = "0123456789ABCDEF";
	struct orc_buf b = ORC_BUF_INIT;
	const unsigned char *p;

	for (p = (const unsigned char *)s; *p; p++) {
		if (unreserved(*p) || strchr(keep, *p)) {
			orc_buf_addc(&b, (char)*p);
		} else {
			orc_buf_addc(&b, '%');
			orc_buf_addc(&b, hex[*p >> 4]);
			orc_buf_addc(&b, hex[*p & 15]);
		}
	}
	return orc_buf_detach(&b, NULL);
}
