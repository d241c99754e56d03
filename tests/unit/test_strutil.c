#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "strutil.h"
#include "unit.h"
#include "url.h"

static void parse_i64_is_strict(void)
{
	int64_t v = -1;

	CHECK(orc_parse_i64(&v, "42", 0, 100) == 0 && v == 42);
	CHECK(orc_parse_i64(&v, "-5", -10, 10) == 0 && v == -5);
	v = 7;
	CHECK(orc_parse_i64(&v, "", 0, 100) == ORC_EINVALID);
	CHECK(orc_parse_i64(&v, "12x", 0, 100) == ORC_EINVALID);
	CHECK(orc_parse_i64(&v, " 1", 0, 100) == ORC_EINVALID);
	CHECK(orc_parse_i64(&v, "+1", 0, 100) == ORC_EINVALID);
	CHECK(orc_parse_i64(&v, "101", 0, 100) == ORC_EINVALID);
	CHECK(orc_parse_i64(&v, "99999999999999999999999", 0, INT64_MAX) == ORC_EINVALID);
	CHECK(v == 7); /* untouched on failure */
}

static void parse_cpu_quantities(void)
{
	int64_t m = 0;

	CHECK(orc_parse_cpu(&m, "4") == 0 && m == 4000);
	CHECK(orc_parse_cpu(&m, "0.5") == 0 && m == 500);
	CHECK(orc_parse_cpu(&m, "250m") == 0 && m == 250);
	CHECK(orc_parse_cpu(&m, "0") == ORC_EINVALID);
	CHECK(orc_parse_cpu(&m, "-1") == ORC_EINVALID);
	CHECK(orc_parse_cpu(&m, "1.5m") == ORC_EINVALID);
	CHECK(orc_parse_cpu(&m, "abc") == ORC_EINVALID);
	CHECK(orc_parse_cpu(&m, "1e3") == ORC_EINVALID);
	CHECK(orc_parse_cpu(&m, "") == ORC_EINVALID);
	CHECK(orc_parse_cpu(&m, ".") == ORC_EINVALID);
}

static void parse_memory_quantities(void)
{
	int64_t b = 0;

	CHECK(orc_parse_memory(&b, "16Gi") == 0 && b == 16LL << 30);
	CHECK(orc_parse_memory(&b, "512Mi") == 0 && b == 512LL << 20);
	CHECK(orc_parse_memory(&b, "1G") == 0 && b == 1000000000LL);
	CHECK(orc_parse_memory(&b, "1.5Gi") == 0 && b == 3LL << 29);
	CHECK(orc_parse_memory(&b, "1048576") == 0 && b == 1048576);
	CHECK(orc_parse_memory(&b, "16GB") == ORC_EINVALID);
	CHECK(orc_parse_memory(&b, "Gi") == ORC_EINVALID);
	CHECK(orc_parse_memory(&b, "-1Gi") == ORC_EINVALID);
	CHECK(orc_parse_memory(&b, "0") == ORC_EINVALID);
}

static void dns_labels(void)
{
	char long_ok[64], too_long[65];

	memset(long_ok, 'a', 63);
	long_ok[63] = '\0';
	memset(too_long, 'a', 64);
	too_long[64] = '\0';
	CHECK(orc_is_dns_label("abc"));
	CHECK(orc_is_dns_label("a-1"));
	CHECK(orc_is_dns_label("0f3a9b2c"));
	CHECK(orc_is_dns_label(long_ok));
	CHECK(!orc_is_dns_label(too_long));
	CHECK(!orc_is_dns_label(""));
	CHECK(!orc_is_dns_label("-a"));
	CHECK(!orc_is_dns_label("a-"));
	CHECK(!orc_is_dns_label("A"));
	CHECK(!orc_is_dns_label("a_b"));
	CHECK(!orc_is_dns_label("a.b"));
	CHECK(!orc_is_dns_label("../x"));
}

static void utf8_validation(void)
{
	CHECK(orc_utf8_valid("h\xc3\xa9llo", 6));
	CHECK(orc_utf8_valid("\xf0\x9f\x98\x80", 4));
	CHECK(!orc_utf8_valid("\xc0\xaf", 2));         /* overlong */
	CHECK(!orc_utf8_valid("\xed\xa0\x80", 3));     /* surrogate */
	CHECK(!orc_utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
	CHECK(!orc_utf8_valid("\xe2\x82", 2));         /* truncated */
	CHECK(!orc_utf8_valid("\x80", 1));
}

static void random_hex_is_hex_and_varies(void)
{
	char a[33], b[33];
	size_t i;
	int ok = 1;

	orc_random_hex(a, 16);
	orc_random_hex(b, 16);
	CHECK(strlen(a) == 32);
	for (i = 0; i < 32; i++)
		ok &= (a[i] >= '0' && a[i] <= '9') || (a[i] >= 'a' && a[i] <= 'f');
	CHECK(ok);
	CHECK(strcmp(a, b) != 0);
}

static void ct_equal_compares(void)
{
	CHECK(orc_ct_equal("abcd", "abcd", 4));
	CHECK(!orc_ct_equal("abcd", "abce", 4));
	CHECK(orc_ct_equal("", "", 0));
}

static void etag_lists(void)
{
	CHECK(orc_etag_listed("\"a1\"", "\"a1\"", 0));
	CHECK(orc_etag_listed("\"x\", \"a1\"", "\"a1\"", 0));
	CHECK(orc_etag_listed("*", "\"a1\"", 0));
	CHECK(!orc_etag_listed("\"a12\"", "\"a1\"", 0));
	CHECK(!orc_etag_listed("\"a\"", "\"a1\"", 0));
	CHECK(!orc_etag_listed("W/\"a1\"", "\"a1\"", 0));   /* If-Match is strong */
	CHECK(orc_etag_listed("W/\"a1\"", "\"a1\"", 1));
	CHECK(!orc_etag_listed("", "\"a1\"", 1));
}

static void url_escape_keeps_unreserved_and_keep(void)
{
	char *a = orc_url_escape("a/b c~d-e_f.g%\xc3\xa9&=", "/");
	char *b = orc_url_escape("a/b c", "");

	CHECK_STR(a, "a/b%20c~d-e_f.g%25%C3%A9%26%3D");
	CHECK_STR(b, "a%2Fb%20c");
	free(a);
	free(b);
	a = orc_url_escape("", "");
	CHECK_STR(a, "");
	free(a);
}

const struct unit_test strutil_tests[] = {
	{ "url_escape_keeps_unreserved_and_keep", url_escape_keeps_unreserved_and_keep },
	{ "parse_i64_is_strict", parse_i64_is_strict },
	{ "parse_cpu_quantities", parse_cpu_quantities },
	{ "parse_memory_quantities", parse_memory_quantities },
	{ "dns_labels", dns_labels },
	{ "utf8_validation", utf8_validation },
	{ "random_hex_is_hex_and_varies", random_hex_is_hex_and_varies },
	{ "ct_equal_compares", ct_equal_compares },
	{ "etag_lists", etag_lists },
	{ NULL, NULL },
};
