/*
 * lib/log.c and lib/trace.c: typed fields, redaction, the request context,
 * and W3C traceparent parsing.
 */
#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "trace.h"
#include "unit.h"

/* The lines orc_log writes while fn runs, read from a pipe on stderr. */
static json_object *capture(void (*fn)(void))
{
	char buf[8192];
	ssize_t n;
	int p[2], saved = dup(STDERR_FILENO);

	if (pipe(p) < 0)
		abort();
	dup2(p[1], STDERR_FILENO);
	fn();
	dup2(saved, STDERR_FILENO);
	close(saved);
	close(p[1]);
	n = read(p[0], buf, sizeof(buf) - 1);
	close(p[0]);
	buf[n > 0 ? n : 0] = '\0';
	return json_tokener_parse(buf);
}

static json_object *field(json_object *o, const char *key)
{
	json_object *v = NULL;

	return o && json_object_object_get_ex(o, key, &v) ? v : NULL;
}

static void log_typed(void)
{
	orc_log(ORC_LOG_WARN, "typed", "name", "x", ORC_LOG_INT("count", -42),
		ORC_LOG_NUM("ratio", 0.25), ORC_LOG_NUM("nan", NAN), ORC_LOG_BOOL("more", 7),
		ORC_LOG_BOOL("less", 0), "skipped", NULL, "after", "y", NULL);
}

static void test_log__typed_fields_are_json_numbers_and_booleans(void)
{
	json_object *o = capture(log_typed);

	CHECK(o != NULL);
	CHECK_STR(json_object_get_string(field(o, "msg")), "typed");
	CHECK_STR(json_object_get_string(field(o, "level")), "warn");
	CHECK(json_object_is_type(field(o, "count"), json_type_int));
	CHECK(json_object_get_int64(field(o, "count")) == -42);
	CHECK(json_object_is_type(field(o, "ratio"), json_type_double));
	CHECK(json_object_get_double(field(o, "ratio")) == 0.25);
	CHECK(json_object_object_get_ex(o, "nan", NULL) && field(o, "nan") == NULL);  /* null */
	CHECK(json_object_is_type(field(o, "more"), json_type_boolean));
	CHECK(json_object_get_boolean(field(o, "more")) == 1);
	CHECK(json_object_get_boolean(field(o, "less")) == 0);
	CHECK(!json_object_object_get_ex(o, "skipped", NULL));
	CHECK_STR(json_object_get_string(field(o, "after")), "y");
	json_object_put(o);
}

static void log_secrets(void)
{
	orc_log(ORC_LOG_ERROR, "secrets", "token", "t0ps3cret", "Authorization", "Bearer abc",
		"api_key", "k_1_s", "password", "pw", "tokens", "kept", NULL);
}

static void test_log__secret_fields_are_redacted(void)
{
	json_object *o = capture(log_secrets);

	CHECK_STR(json_object_get_string(field(o, "token")), "<redacted>");
	CHECK_STR(json_object_get_string(field(o, "Authorization")), "<redacted>");
	CHECK_STR(json_object_get_string(field(o, "api_key")), "<redacted>");
	CHECK_STR(json_object_get_string(field(o, "password")), "<redacted>");
	CHECK_STR(json_object_get_string(field(o, "tokens")), "kept");
	CHECK(!strstr(json_object_to_json_string(o), "t0ps3cret"));
	json_object_put(o);
}

static const char tp[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

static void log_in_context(void)
{
	struct orc_trace t;

	orc_trace_begin(&t, tp);
	orc_log_context_set("rid-1", &t);
	orc_log(ORC_LOG_ERROR, "in context", "request_id", "dup", "sandbox_id", "sb", NULL);
	orc_log_context_clear();
}

static void test_log__context_adds_request_and_trace_ids_once(void)
{
	json_object *o = capture(log_in_context);
	const char *s = json_object_to_json_string(o);

	CHECK_STR(json_object_get_string(field(o, "request_id")), "rid-1");
	CHECK_STR(json_object_get_string(field(o, "trace_id")), "4bf92f3577b34da6a3ce929d0e0e4736");
	CHECK(strlen(json_object_get_string(field(o, "span_id"))) == 16);
	CHECK(!strstr(s, "dup"));
	CHECK_STR(json_object_get_string(field(o, "sandbox_id")), "sb");
	CHECK(orc_log_context_trace() == NULL);
	json_object_put(o);
}

static void test_trace__parses_valid_version_00(void)
{
	struct orc_trace t;
	char out[ORC_TRACEPARENT_SIZE];

	CHECK(orc_trace_parse(&t, tp));
	CHECK_STR(t.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
	CHECK_STR(t.parent_id, "00f067aa0ba902b7");
	CHECK_STR(t.flags, "01");
	orc_trace_begin(&t, tp);
	CHECK_STR(t.parent_id, "00f067aa0ba902b7");
	CHECK(strlen(t.span_id) == 16 && strcmp(t.span_id, t.parent_id));
	orc_trace_header(out, &t);
	CHECK(strlen(out) == ORC_TRACEPARENT_SIZE - 1);
	CHECK(!strncmp(out, "00-4bf92f3577b34da6a3ce929d0e0e4736-", 36));
	CHECK(!strncmp(out + 36, t.span_id, 16) && !strcmp(out + 52, "-01"));
	CHECK(orc_trace_parse(NULL, out));
}

static void test_trace__refuses_malformed_and_starts_anew(void)
{
	static const char *const bad[] = {
		"", "00", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
		"00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
		"00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
		NULL,
	};
	struct orc_trace a, b;
	size_t i;

	for (i = 0; bad[i]; i++)
		CHECK(!orc_trace_parse(NULL, bad[i]));
	CHECK(!orc_trace_parse(NULL, NULL));
	orc_trace_begin(&a, bad[2]);
	orc_trace_begin(&b, NULL);
	CHECK(strlen(a.trace_id) == 32 && strlen(b.trace_id) == 32 && strcmp(a.trace_id, b.trace_id));
	CHECK(a.parent_id[0] == '\0');
	CHECK_STR(a.flags, "01");
}

static void test_trace__request_ids(void)
{
	char long_id[130];

	CHECK(orc_request_id_valid("abc-DEF_0.9"));
	CHECK(!orc_request_id_valid(""));
	CHECK(!orc_request_id_valid("a b"));
	CHECK(!orc_request_id_valid("a\"b"));
	memset(long_id, 'a', 129);
	long_id[129] = '\0';
	CHECK(!orc_request_id_valid(long_id));
	long_id[128] = '\0';
	CHECK(orc_request_id_valid(long_id));
}

const struct unit_test log_tests[] = {
	{ "log: typed fields are JSON numbers and booleans", test_log__typed_fields_are_json_numbers_and_booleans },
	{ "log: secret fields are redacted", test_log__secret_fields_are_redacted },
	{ "log: the context adds request and trace ids once", test_log__context_adds_request_and_trace_ids_once },
	{ "trace: parses a valid version 00 traceparent", test_trace__parses_valid_version_00 },
	{ "trace: refuses malformed ones and starts anew", test_trace__refuses_malformed_and_starts_anew },
	{ "trace: request ids", test_trace__request_ids },
	{ NULL, NULL },
};
