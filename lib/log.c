#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "json.h"

static const char *component = "orchard";
static enum orc_log_level min_level = ORC_LOG_INFO;
static const char *const level_names[] = { "debug", "info", "warn", "error" };

void orc_log_init(const char *name)
{
	const char *lv = getenv("ORCHARD_LOG_LEVEL");
	size_t i;

	component = name;
	for (i = 0; lv && i < sizeof(level_names) / sizeof(*level_names); i++)
		if (!strcasecmp(lv, level_names[i]))
			min_level = (enum orc_log_level)i;
}

int orc_log_enabled(enum orc_log_level level)
{
	return level >= min_level;
}

static void emit(enum orc_log_level level, const char *msg, va_list fields)
{
	struct orc_buf b = ORC_BUF_INIT;
	struct timeval tv;
	struct tm tm;
	char ts[64];
	const char *k, *v;
	ssize_t off = 0, w;

	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
	orc_buf_addf(&b, "{\"time\":\"%s.%03ldZ\",\"level\":\"%s\",\"component\":",
		     ts, (long)(tv.tv_usec / 1000), level_names[level]);
	orc_json_quote(&b, component);
	orc_buf_adds(&b, ",\"msg\":");
	orc_json_quote(&b, msg);
	while ((k = va_arg(fields, const char *)) != NULL) {
		v = va_arg(fields, const char *);
		if (!v)
			continue;
		orc_buf_addc(&b, ',');
		orc_json_quote(&b, k);
		orc_buf_addc(&b, ':');
		orc_json_quote(&b, v);
	}
	orc_buf_adds(&b, "}\n");
	while (off < (ssize_t)b.len) {
		w = write(STDERR_FILENO, b.ptr + off, b.len - (size_t)off);
		if (w <= 0)
			break;
		off += w;
	}
	orc_buf_release(&b);
}

void orc_log(enum orc_log_level level, const char *msg, ...)
{
	va_list ap;

	if (!orc_log_enabled(level))
		return;
	va_start(ap, msg);
	emit(level, msg, ap);
	va_end(ap);
}

static void emit_none(enum orc_log_level level, const char *msg, ...)
{
	va_list ap;
	va_start(ap, msg);
	emit(level, msg, ap);
	va_end(ap);
}

void orc_logf(enum orc_log_level level, const char *fmt, ...)
{
	char msg[2048];
	va_list ap;

	if (!orc_log_enabled(level))
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	emit_none(level, msg, NULL);
}
