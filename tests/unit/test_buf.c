#include <string.h>

#include "buf.h"
#include "err.h"
#include "unit.h"

static void buf_appends_and_terminates(void)
{
	struct orc_buf b = ORC_BUF_INIT;

	CHECK_STR(orc_buf_cstr(&b), "");
	CHECK(orc_buf_adds(&b, "abc") == 0);
	CHECK(orc_buf_addf(&b, "-%d-", 42) == 0);
	CHECK(orc_buf_addc(&b, 'z') == 0);
	CHECK(b.len == 8);
	CHECK_STR(b.ptr, "abc-42-z");
	orc_buf_release(&b);
	orc_buf_release(&b); /* twice is harmless */
	CHECK(b.ptr == NULL && b.len == 0);
}

static void buf_enforces_maximum_and_stays_unchanged(void)
{
	struct orc_buf b;

	orc_buf_init(&b, 5);
	CHECK(orc_buf_adds(&b, "12345") == 0);
	CHECK(orc_buf_addc(&b, '6') == ORC_ETOOBIG);
	CHECK(orc_buf_addf(&b, "%s", "x") == ORC_ETOOBIG);
	CHECK(b.len == 5);
	CHECK_STR(b.ptr, "12345");
	orc_buf_release(&b);
}

static void buf_grows_across_many_appends(void)
{
	struct orc_buf b = ORC_BUF_INIT;
	size_t i;
	int ok = 1;

	for (i = 0; i < 100000; i++)
		ok &= orc_buf_addc(&b, (char)('a' + i % 26)) == 0;
	CHECK(ok);
	CHECK(b.len == 100000);
	CHECK(b.ptr[99999] == (char)('a' + 99999 % 26));
	CHECK(b.ptr[100000] == '\0');
	orc_buf_release(&b);
}

static void buf_detach_hands_over_allocation(void)
{
	struct orc_buf b = ORC_BUF_INIT;
	size_t len = 99;
	char *p;

	p = orc_buf_detach(&b, &len);
	CHECK(p && len == 0 && p[0] == '\0');
	free(p);
	orc_buf_add(&b, "a\0b", 3);
	p = orc_buf_detach(&b, &len);
	CHECK(len == 3 && p[0] == 'a' && p[1] == '\0' && p[2] == 'b');
	CHECK(b.ptr == NULL && b.len == 0);
	free(p);
}

const struct unit_test buf_tests[] = {
	{ "buf_appends_and_terminates", buf_appends_and_terminates },
	{ "buf_enforces_maximum_and_stays_unchanged", buf_enforces_maximum_and_stays_unchanged },
	{ "buf_grows_across_many_appends", buf_grows_across_many_appends },
	{ "buf_detach_hands_over_allocation", buf_detach_hands_over_allocation },
	{ NULL, NULL },
};
