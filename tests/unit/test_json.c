#include <string.h>

#include "err.h"
#include "json.h"
#include "unit.h"

static int parses(const char *s)
{
	json_object *o = NULL;
	char msg[256];
	int err = orc_json_parse(&o, s, strlen(s), msg, sizeof(msg));
	json_object_put(o);
	return err == 0;
}

static void json_parse_accepts_valid_and_rejects_garbage(void)
{
	char deep[200];
	int i;

	CHECK(parses("{\"a\": [1, 2, {\"b\": null}]}"));
	CHECK(parses("  \"x\"  \n"));
	CHECK(parses("12"));       /* a number at the very end of the input */
	CHECK(parses(" -0 "));
	CHECK(parses("1e400"));
	CHECK(parses("null"));
	CHECK(!parses(""));
	CHECK(!parses("{"));
	CHECK(!parses("{\"a\":1} trailing"));
	CHECK(!parses("{\"a\":1}{}"));
	CHECK(!parses("{'a':1}"));
	CHECK(!parses("{\"a\":\"\xff\xfe\"}"));  /* invalid UTF-8 */
	CHECK(!parses("[1,]"));
	CHECK(!parses("{\"a\":1,}"));
	CHECK(!parses("[NaN]"));
	CHECK(!parses("[Infinity]"));
	CHECK(!parses("[1.]"));
	CHECK(!parses("[01]"));
	CHECK(!parses("[\"a\tb\"]"));   /* raw control character */
	CHECK(!parses("[\"\\x\"]"));
	CHECK(!parses("[\"\\u12\"]"));
	CHECK(!parses("{\"a\" 1}"));
	CHECK(!parses("[1 2]"));
	CHECK(!parses("tru"));
	CHECK(parses("[-0.5e+3, \"\\u00e9\\n\", true, false, null, {}, []]"));
	CHECK(parses("{\"a\":{\"b\":[{\"c\":1}]}}"));
	for (i = 0; i < 100; i++)
		deep[i] = '[';
	for (i = 100; i < 200; i++)
		deep[i] = ']';
	deep[sizeof(deep) - 1] = '\0';
	deep[99] = '[';
	{
		char d2[201];
		memcpy(d2, deep, 200);
		d2[199] = ']';
		d2[200] = '\0';
		CHECK(!parses(d2)); /* 100 levels deep: over ORC_JSON_MAX_DEPTH */
	}
}

static void json_depth_limit_is_exact(void)
{
	char s[2 * (ORC_JSON_MAX_DEPTH + 1) + 1];
	int n;

	for (n = ORC_JSON_MAX_DEPTH; n <= ORC_JSON_MAX_DEPTH + 1; n++) {
		memset(s, '[', (size_t)n);
		memset(s + n, ']', (size_t)n);
		s[2 * n] = '\0';
		CHECK(parses(s) == (n <= ORC_JSON_MAX_DEPTH));
	}
}

static void json_parse_object_requires_object(void)
{
	json_object *o = NULL;
	char msg[256] = "";

	CHECK(orc_json_parse_object(&o, "[1]", 3, msg, sizeof(msg)) == ORC_EINVALID);
	CHECK(o == NULL);
	CHECK(strstr(msg, "object") != NULL);
	CHECK(orc_json_parse_object(&o, "{}", 2, msg, sizeof(msg)) == 0);
	json_object_put(o);
}

static void json_getters_check_types(void)
{
	const char *src = "{\"s\":\"v\",\"b\":true,\"i\":7,\"f\":2.5,\"n\":null,\"big\":1e300,\"o\":{}}";
	json_object *o = NULL, *sub = NULL;
	const char *s = NULL;
	int b = 0;
	int64_t i = 0;
	double d = 0;
	char msg[256] = "";

	CHECK(orc_json_parse_object(&o, src, strlen(src), msg, sizeof(msg)) == 0);
	CHECK(orc_json_get_str(o, "s", &s, msg, sizeof(msg)) == 0 && !strcmp(s, "v"));
	CHECK(orc_json_get_str(o, "missing", &s, msg, sizeof(msg)) == 1);
	CHECK(orc_json_get_str(o, "n", &s, msg, sizeof(msg)) == 1);
	CHECK(orc_json_get_str(o, "i", &s, msg, sizeof(msg)) == ORC_EINVALID);
	CHECK(strstr(msg, "'i'") && strstr(msg, "string"));
	{
		json_object *z = NULL;
		const char *zs = NULL;
		size_t zl = 0;
		CHECK(orc_json_parse_object(&z, "{\"k\":\"ok\\u0000../x\"}", 20, msg, sizeof(msg)) == 0);
		CHECK(orc_json_get_str(z, "k", &zs, msg, sizeof(msg)) == ORC_EINVALID);
		CHECK(strstr(msg, "NUL") != NULL);
		CHECK(orc_json_get_bytes(z, "k", &zs, &zl, msg, sizeof(msg)) == 0 && zl == 7);
		json_object_put(z);
	}
	CHECK(orc_json_get_bool(o, "b", &b, msg, sizeof(msg)) == 0 && b == 1);
	CHECK(orc_json_get_bool(o, "s", &b, msg, sizeof(msg)) == ORC_EINVALID);
	CHECK(orc_json_get_int(o, "i", &i, 0, 10, msg, sizeof(msg)) == 0 && i == 7);
	CHECK(orc_json_get_int(o, "i", &i, 8, 10, msg, sizeof(msg)) == ORC_EINVALID);
	CHECK(orc_json_get_int(o, "f", &i, 0, 10, msg, sizeof(msg)) == ORC_EINVALID);
	CHECK(orc_json_get_int(o, "big", &i, 0, 10, msg, sizeof(msg)) == ORC_EINVALID);
	CHECK(orc_json_get_int(o, "s", &i, 0, 10, msg, sizeof(msg)) == ORC_EINVALID);
	CHECK(orc_json_get_number(o, "f", &d, 0, 10, msg, sizeof(msg)) == 0 && d == 2.5);
	CHECK(orc_json_get_number(o, "i", &d, 0, 10, msg, sizeof(msg)) == 0 && d == 7);
	CHECK(orc_json_get_object(o, "o", &sub, msg, sizeof(msg)) == 0 && sub);
	CHECK(orc_json_get_object(o, "s", &sub, msg, sizeof(msg)) == ORC_EINVALID);
	json_object_put(o);
}

static void json_quote_escapes_controls(void)
{
	struct orc_buf b = ORC_BUF_INIT;

	orc_json_quote_len(&b, "a\"b\\c\n\x01\0", 8);
	CHECK_STR(b.ptr, "\"a\\\"b\\\\c\\n\\u0001\\u0000\"");
	orc_buf_release(&b);
}

static void json_new_text_replaces_invalid_utf8(void)
{
	json_object *o = orc_json_new_text("ok\xff\xc3\xa9\xe2\x82", 7);

	CHECK_STR(json_object_get_string(o), "ok\xef\xbf\xbd\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd");
	json_object_put(o);
	o = orc_json_new_text("plain", 5);
	CHECK_STR(json_object_get_string(o), "plain");
	json_object_put(o);
}

static void json_field_reads_answers_without_type_checks(void)
{
	json_object *o = NULL, *arr = json_object_new_array();

	CHECK(orc_json_parse(&o, "{\"s\":\"x\",\"n\":1,\"z\":null}", 24, NULL, 0) == 0);
	CHECK(orc_json_field(o, "n") && json_object_get_int(orc_json_field(o, "n")) == 1);
	CHECK(orc_json_field(o, "z") == NULL);          /* null reads as absent */
	CHECK(orc_json_field(o, "missing") == NULL);
	CHECK(orc_json_field(NULL, "s") == NULL);
	CHECK(orc_json_field(arr, "s") == NULL);        /* not an object */
	CHECK_STR(orc_json_str_or(o, "s", "d"), "x");
	CHECK_STR(orc_json_str_or(o, "n", "d"), "d");   /* not a string */
	CHECK_STR(orc_json_str_or(o, "missing", "d"), "d");
	CHECK(orc_json_str_or(NULL, "s", NULL) == NULL);
	json_object_put(o);
	json_object_put(arr);
}

const struct unit_test json_tests[] = {
	{ "json_parse_accepts_valid_and_rejects_garbage", json_parse_accepts_valid_and_rejects_garbage },
	{ "json_depth_limit_is_exact", json_depth_limit_is_exact },
	{ "json_parse_object_requires_object", json_parse_object_requires_object },
	{ "json_getters_check_types", json_getters_check_types },
	{ "json_quote_escapes_controls", json_quote_escapes_controls },
	{ "json_new_text_replaces_invalid_utf8", json_new_text_replaces_invalid_utf8 },
	{ "json_field_reads_answers_without_type_checks", json_field_reads_answers_without_type_checks },
	{ NULL, NULL },
};
