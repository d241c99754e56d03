/*
 * Request ids and W3C trace context (trace.h).
 */
#include "trace.h"

#include <stdio.h>
#include <string.h>

#include "strutil.h"

static int all_zeros(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n && s[i] == '0'; i++)
		;
	return i == n;
}

int orc_trace_parse(struct orc_trace *out, const char *h)
{
	/* 00-TTTTTTTTTTTTTTTTTTTTTTTTTTTTTTTT-PPPPPPPPPPPPPPPP-FF */
	if (!h || strlen(h) != ORC_TRACEPARENT_SIZE - 1 || h[2] != '-' || h[35] != '-' ||
	    h[52] != '-' || !orc_is_lower_hex(h, 2) || !orc_is_lower_hex(h + 3, 32) ||
	    !orc_is_lower_hex(h + 36, 16) || !orc_is_lower_hex(h + 53, 2))
		return 0;
	/* Version 00 has exactly this length; ff is forbidden. A later version
	 * may be longer, and is then not ours to parse. */
	if (strncmp(h, "00", 2) || all_zeros(h + 3, 32) || all_zeros(h + 36, 16))
		return 0;
	if (out) {
		memset(out, 0, sizeof(*out));
		memcpy(out->trace_id, h + 3, 32);
		memcpy(out->parent_id, h + 36, 16);
		memcpy(out->flags, h + 53, 2);
	}
	return 1;
}

void orc_trace_begin(struct orc_trace *out, const char *header)
{
	if (!orc_trace_parse(out, header)) {
		memset(out, 0, sizeof(*out));
		orc_random_hex(out->trace_id, 16);
		memcpy(out->flags, "01", 3);
	}
	orc_random_hex(out->span_id, 8);
}

void orc_trace_header(char out[ORC_TRACEPARENT_SIZE], const struct orc_trace *t)
{
	if (!t->trace_id[0] || !t->span_id[0]) {
		out[0] = '\0';
		return;
	}
	snprintf(out, ORC_TRACEPARENT_SIZE, "00-%s-%s-%s", t->trace_id, t->span_id, t->flags);
}

int orc_request_id_valid(const char *s)
{
	size_t i, n = strlen(s);

	if (n == 0 || n > 128)
		return 0;
	for (i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return 0;
	}
	return 1;
}
