/*
 * Conditional and partial GET /files (RFC 9110 sections 13 and 14): the
 * validators of a file (a strong ETag from its inode, size and mtime to
 * the nanosecond, and Last-Modified), If-None-Match (304), If-Range, and
 * one byte range (206, or 416 when it starts past the end). A request
 * for several ranges gets the whole file (200), which the RFC allows.
 */
#include "files.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <microhttpd.h>

#include "strutil.h"

void agent_file_etag(char *out, size_t n, const struct stat *st)
{
	snprintf(out, n, "\"%" PRIx64 "-%" PRIx64 "-%" PRIx64 "-%lx\"", (uint64_t)st->st_ino,
		 (uint64_t)st->st_size, (uint64_t)st->st_mtim.tv_sec, (unsigned long)st->st_mtim.tv_nsec);
}

/* "bytes=A-B", "bytes=A-" or "bytes=-N" against size: 0 with the range,
 * AGENT_RANGE_NONE when it is not one range we serve (send it all),
 * AGENT_RANGE_UNSATISFIABLE. */
static int parse_range(uint64_t *off, uint64_t *len, const char *v, uint64_t size)
{
	int64_t a = -1, b = -1;
	const char *dash;
	char num[24];

	if (strncmp(v, "bytes=", 6) || strchr(v, ','))
		return AGENT_RANGE_NONE;
	v += 6;
	if (!(dash = strchr(v, '-')) || (size_t)(dash - v) >= sizeof(num))
		return AGENT_RANGE_NONE;
	memcpy(num, v, (size_t)(dash - v));
	num[dash - v] = '\0';
	if ((num[0] && orc_parse_i64(&a, num, 0, INT64_MAX) < 0) ||
	    (dash[1] && orc_parse_i64(&b, dash + 1, 0, INT64_MAX) < 0) || (a < 0 && b < 0))
		return AGENT_RANGE_NONE;
	if (a < 0) {                       /* the last b bytes */
		if (b == 0 || size == 0)
			return AGENT_RANGE_UNSATISFIABLE;
		*off = (uint64_t)b >= size ? 0 : size - (uint64_t)b;
		*len = size - *off;
		return 0;
	}
	if (b >= 0 && b < a)
		return AGENT_RANGE_NONE;   /* invalid: ignored (RFC 9110 14.1.1) */
	if ((uint64_t)a >= size)
		return AGENT_RANGE_UNSATISFIABLE;
	*off = (uint64_t)a;
	*len = (b < 0 || (uint64_t)b >= size ? size - 1 : (uint64_t)b) - *off + 1;
	return 0;
}

int agent_file_conditions(uint64_t *off, uint64_t *len, struct MHD_Connection *conn,
			  const struct stat *st, const char *etag)
{
	const char *inm = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH);
	const char *range = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_RANGE);
	const char *if_range = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_RANGE);

	*off = 0;
	*len = (uint64_t)st->st_size;
	if (inm && orc_etag_listed(inm, etag, 1))
		return AGENT_NOT_MODIFIED;
	/* If-Range with another validator: the file changed, send all of it */
	if (!range || (if_range && strcmp(if_range, etag)))
		return AGENT_RANGE_NONE;
	return parse_range(off, len, range, (uint64_t)st->st_size);
}

void agent_file_validators(struct MHD_Response *resp, const struct stat *st, const char *etag)
{
	char date[64];
	struct tm tm;

	MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, etag);
	if (gmtime_r(&st->st_mtim.tv_sec, &tm) &&
	    strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm))
		MHD_add_response_header(resp, MHD_HTTP_HEADER_LAST_MODIFIED, date);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCEPT_RANGES, "bytes");
}
