#ifndef ORC_LOG_H
#define ORC_LOG_H
/*
 * Structured logs: one JSON object per line on stderr with time, level,
 * component and message, then the thread's request context (below), then
 * key/value fields ending with NULL:
 *
 *   orc_log(ORC_LOG_INFO, "sandbox ready", "sandbox_id", id,
 *           ORC_LOG_INT("ms_since_launch", ms), ORC_LOG_BOOL("adopted", a), NULL);
 *
 * A plain field is two strings (a NULL value leaves it out); numbers and
 * booleans go through ORC_LOG_INT, ORC_LOG_NUM and ORC_LOG_BOOL, so that
 * they are JSON numbers and booleans, never strings (a NaN or infinite
 * ORC_LOG_NUM is null). Ids go in fields, never only in the message.
 *
 * Secrets never reach a line: the value of a field named authorization,
 * api_key, cookie, password, secret or token is written as "<redacted>".
 *
 * The level comes from ORCHARD_LOG_LEVEL (debug, info, warn, error).
 * Thread-safe: each line is written with one write(2).
 */
#include "trace.h"

enum orc_log_level { ORC_LOG_DEBUG, ORC_LOG_INFO, ORC_LOG_WARN, ORC_LOG_ERROR };

void orc_log_init(const char *component);
int orc_log_enabled(enum orc_log_level level);
void orc_log(enum orc_log_level level, const char *msg, ...);
/* printf-style message, no extra fields (configuration errors at start). */
void orc_logf(enum orc_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Typed fields: a tag where a key would be, then the key and the value. */
extern const char orc_log_int_tag[], orc_log_num_tag[], orc_log_bool_tag[];
#define ORC_LOG_INT(key, v)  orc_log_int_tag, (const char *)(key), (long long)(v)
#define ORC_LOG_NUM(key, v)  orc_log_num_tag, (const char *)(key), (double)(v)
#define ORC_LOG_BOOL(key, v) orc_log_bool_tag, (const char *)(key), (int)!!(v)

/*
 * The request this thread serves: until orc_log_context_clear, each of
 * its lines carries request_id (when not "" or NULL), trace_id and span_id
 * (when trace is not NULL), and a field of the same name is left out.
 * orc_log_context_trace gives the trace back (NULL when none), for calls
 * to other processes (lib/agent_client.c sends it as traceparent).
 */
void orc_log_context_set(const char *request_id, const struct orc_trace *trace);
void orc_log_context_clear(void);
const struct orc_trace *orc_log_context_trace(void);
#endif
