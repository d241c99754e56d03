#ifndef ORC_LOG_H
#define ORC_LOG_H
/*
 * Structured logs: one JSON object per line on stderr with time, level,
 * component and message, plus optional key/value fields:
 *
 *   orc_log(ORC_LOG_INFO, "sandbox ready", "sandbox_id", id, NULL);
 *
 * The level comes from ORCHARD_LOG_LEVEL (debug, info, warn, error).
 * Thread-safe: each line is written with one write(2).
 */
enum orc_log_level { ORC_LOG_DEBUG, ORC_LOG_INFO, ORC_LOG_WARN, ORC_LOG_ERROR };

void orc_log_init(const char *component);
int orc_log_enabled(enum orc_log_level level);
/* Fields are (const char *key, const char *value) pairs ending with NULL. */
void orc_log(enum orc_log_level level, const char *msg, ...);
/* printf-style message, no extra fields. */
void orc_logf(enum orc_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#endif
