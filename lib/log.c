#include "log.h"

#include <math.h>
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

const char orc_log_int_tag[] = "<int>", orc_log_num_tag[] = "<num>", orc_log_bool_tag[] = "<bool>";

static const char *component = "orchard";
static enum orc_log_level min_level = ORC_LOG_INFO;
static const char *const level_names[] = { "debug", "info", "warn", "error" };
static const char *const secret_keys[] = {
	"authorization", "api_key", "cookie", "password", "secret", "token",
};

static __thread struct {
	char request_id[129];
	struct orc_trace trace;
	int has_trace;
} ctx;

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

void orc_log_context_set(const char *request_id, const struct orc_trace *trace)
{
	snprintf(ctx.request_id, sizeof(ctx.request_id), "%s", request_id ? request_id : "");
	ctx.has_trace = trace && trace->trace_id[0];
	if (ctx.has_trace)
		ctx.trace = *trace;
}

void orc_log_context_clear(void)
{
	ctx.request_id[0] = '\0';
	ctx.has_trace = 0;
}

const struct orc_trace *orc_log_context_trace(void)
{
	return ctx.has_trace ? &ctx.trace : NULL;
}

static int is_secret(const char *key)
{
	size_t i;

	for (i = 0; i < sizeof(secret_keys) / sizeof(*secret_keys); i++)
		if (!strcasecmp(key, secret_keys[i]))
			return 1;
	return 0;
}

/* Fields the context already wrote are left out of the caller's. */
static int in_context(const char *key)
{
	if (ctx.request_id[0] && !strcmp(key, "request_id"))
		return 1;
	return ctx.has_trace && (!strcmp(key, "trace_id") || !strcmp(key, "span_id"));
}

static void add_key(struct orc_buf *b, const char *key)
{
	orc_buf_addc(b, ',');
	orc_json_quote(b, key);
	orc_buf_addc(b, ':');
}

static void add_string(struct orc_buf *b, const char *key, const char *v)
{
	add_key(b, key);
	orc_json_quote(b, is_secret(key) ? "<redacted>" : v);
}

static void add_context(struct orc_buf *b)
{
	if (ctx.request_id[0])
		add_string(b, "request_id", ctx.request_id);
	if (ctx.has_trace) {
		add_string(b, "trace_id", ctx.trace.trace_id);
		add_string(b, "span_id", ctx.trace.span_id);
	}
}

/* One field from ap; 0 at the end of the list. */
static int add_field(struct orc_buf *b, va_list *ap)
{
	const char *k = va_arg(*ap, const char *), *key, *v;
	long long i;
	double d;
	int on;

	if (!k)
		return 0;
	if (k == orc_log_int_tag) {
		key = va_arg(*ap, const char *);
		i = va_arg(*ap, long long);
		if (!in_context(key)) {
			add_key(b, key);
			orc_buf_addf(b, "%lld", i);
		}
	} else if (k == orc_log_num_tag) {
		key = va_arg(*ap, const char *);
		d = va_arg(*ap, double);
		if (!in_context(key)) {
			add_key(b, key);
			if (isfinite(d))
				orc_buf_addf(b, "%.17g", d);
			else
				orc_buf_adds(b, "null");
		}
	} else if (k == orc_log_bool_tag) {
		key = va_arg(*ap, const char *);
		on = va_arg(*ap, int);
		if (!in_context(key)) {
			add_key(b, key);
			orc_buf_adds(b, on ? "true" : "false");
		}
	} else {
		v = va_arg(*ap, const char *);
		if (v && !in_context(k))
			add_string(b, k, v);
	}
	return 1;
}

static void emit(enum orc_log_level level, const char *msg, va_list fields)
{
	struct orc_buf b = ORC_BUF_INIT;
	struct timeval tv;
	struct tm tm;
	char ts[64];
	ssize_t off = 0, w;
	va_list ap;

	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
	orc_buf_addf(&b, "{\"time\":\"%s.%03ldZ\",\"level\":\"%s\",\"component\":",
		     ts, (long)(tv.tv_usec / 1000), level_names[level]);
	orc_json_quote(&b, component);
	orc_buf_adds(&b, ",\"msg\":");
	orc_json_quote(&b, msg);
	add_context(&b);
	va_copy(ap, fields);
	while (add_field(&b, &ap))
		;
	va_end(ap);
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
