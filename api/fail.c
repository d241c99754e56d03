/*
 * The error travels with the request (libgit2's git_error_set, curl's
 * failf): helpers keep the message in r->error and return the code; the
 * handler answers it. Apart from reply.c so that the fuzz targets, which
 * replace reply.c, link the parsers that fail this way.
 */
#include <stdarg.h>
#include <stdio.h>

#include "api.h"

int api_fail(struct api_req *r, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->error, sizeof(r->error), fmt, ap);
	va_end(ap);
	return err;
}

int api_reply_failed(struct api_req *r, int err)
{
	return api_reply_error(r, err, "%s", r->error[0] ? r->error : "request failed");
}
