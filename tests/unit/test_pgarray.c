#include <string.h>

#include "pgarray.h"
#include "unit.h"

static void empty_is_braces(void)
{
	struct orc_pg_array a = ORC_PG_ARRAY_INIT;

	CHECK_STR(orc_pg_array_cstr(&a), "{}");
	orc_pg_array_release(&a);
}

static void elements_are_quoted_and_escaped(void)
{
	struct orc_pg_array a = ORC_PG_ARRAY_INIT;

	orc_pg_array_add(&a, "abc");
	orc_pg_array_add(&a, NULL);
	orc_pg_array_add(&a, "a,b {c} \"q\" \\s");
	orc_pg_array_add(&a, "");
	CHECK_STR(orc_pg_array_cstr(&a), "{\"abc\",NULL,\"a,b {c} \\\"q\\\" \\\\s\",\"\"}");
	orc_pg_array_release(&a);
}

static void add_after_cstr_continues_the_list(void)
{
	struct orc_pg_array a = ORC_PG_ARRAY_INIT;

	orc_pg_array_add(&a, "1");
	CHECK_STR(orc_pg_array_cstr(&a), "{\"1\"}");
	CHECK_STR(orc_pg_array_cstr(&a), "{\"1\"}");
	orc_pg_array_add(&a, "2");
	CHECK_STR(orc_pg_array_cstr(&a), "{\"1\",\"2\"}");
	orc_pg_array_reset(&a);
	CHECK_STR(orc_pg_array_cstr(&a), "{}");
	orc_pg_array_add(&a, "3");
	CHECK_STR(orc_pg_array_cstr(&a), "{\"3\"}");
	orc_pg_array_release(&a);
	orc_pg_array_release(&a);   /* twice is harmless */
}

const struct unit_test pgarray_tests[] = {
	{ "pgarray: empty is {}", empty_is_braces },
	{ "pgarray: elements quoted, NULL, escapes", elements_are_quoted_and_escaped },
	{ "pgarray: add after cstr, reset", add_after_cstr_continues_the_list },
	{ NULL, NULL },
};
