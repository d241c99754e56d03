#ifndef ORC_TRACE_H
#define ORC_TRACE_H
/*
 * Request correlation: request ids and W3C Trace Context
 * (https://www.w3.org/TR/trace-context/, version 00):
 *
 *   traceparent: 00-<trace-id: 32 hex>-<parent-id: 16 hex>-<flags: 2 hex>
 *
 * Every process that serves a request starts a span of its own in the
 * caller's trace (orc_trace_begin), logs its trace_id and span_id, and
 * passes "00-<trace_id>-<its span_id>-<flags>" to the processes it calls
 * (orc_trace_header). A missing or malformed header starts a new trace;
 * it is never an error (the specification says to ignore it).
 */
#define ORC_TRACEPARENT_SIZE 56   /* 55 characters and the NUL */

struct orc_trace {
	char trace_id[33];     /* 32 lowercase hex digits; "" in a zeroed struct */
	char span_id[17];      /* this process's span */
	char parent_id[17];    /* the caller's span; "" when the trace began here */
	char flags[3];         /* "01": sampled */
};

/* 1 when header is a valid version-00 traceparent (lowercase hex, trace
 * and parent ids not all zeros, version not ff); out (may be NULL) then
 * gets its trace id, parent id and flags, and no span id. */
int orc_trace_parse(struct orc_trace *out, const char *header);
/* Continue header's trace (NULL or invalid: a new one) with a new span. */
void orc_trace_begin(struct orc_trace *out, const char *header);
/* The traceparent to send downstream; "" when t holds no trace. */
void orc_trace_header(char out[ORC_TRACEPARENT_SIZE], const struct orc_trace *t);

/* 1 for a request id safe to log and echo: 1..128 of [A-Za-z0-9._-]. */
int orc_request_id_valid(const char *s);
#endif
