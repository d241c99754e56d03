/*
 * orc_json_check and orc_json_parse (lib/json_check.c, lib/json.c): every
 * API and agent body goes through them.
 *
 * Properties: when the strict check accepts valid UTF-8, json-c parses it
 * (the two grammars agree); when the check rejects, parse rejects without
 * crashing; the nesting the check counts is the real one; what parse
 * returns serialises to text that passes the check and parses back to an
 * equal value.
 */
#include "fuzz.h"

#include "err.h"
#include "json.h"
#include "strutil.h"

/* Containers nested in o: a scalar is 0, [] is 1. */
static int nesting(json_object *o)
{
	int d = 0, sub;
	size_t i, n;

	if (json_object_is_type(o, json_type_array)) {
		n = json_object_array_length(o);
		for (i = 0; i < n; i++)
			if ((sub = nesting(json_object_array_get_idx(o, i))) > d)
				d = sub;
		return d + 1;
	}
	if (json_object_is_type(o, json_type_object)) {
		json_object_object_foreach(o, k, v) {
			(void)k;
			if ((sub = nesting(v)) > d)
				d = sub;
		}
		return d + 1;
	}
	return 0;
}

/* The text is the literal null, between whitespace. */
static int is_null(const char *s, size_t n)
{
	size_t a = 0, b = n;

	while (a < n && memchr(" \t\r\n", s[a], 4))
		a++;
	while (b > a && memchr(" \t\r\n", s[b - 1], 4))
		b--;
	return a < n && b - a == 4 && !memcmp(s + a, "null", 4);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data;
	json_object *o = NULL, *again = NULL, *obj = NULL;
	char msg[256] = "";
	const char *out;
	size_t outlen;
	int checked, parsed, depth;

	checked = orc_json_check(text, size, ORC_JSON_MAX_DEPTH, msg, sizeof(msg));
	FUZZ_ASSERT(checked == 0 || (checked == ORC_EINVALID && msg[0]));
	parsed = orc_json_parse(&o, text, size, msg, sizeof(msg));
	if (checked == 0 && orc_utf8_valid(text, size)) {
		if (parsed != 0)
			fprintf(stderr, "fuzz: check accepted, json-c refused: %s\n", msg);
		FUZZ_ASSERT(parsed == 0);
		FUZZ_ASSERT(o || is_null(text, size)); /* json-c's null is NULL */
	} else {
		FUZZ_ASSERT(parsed == ORC_EINVALID && !o);
	}
	FUZZ_ASSERT((orc_json_parse_object(&obj, text, size, msg, sizeof(msg)) == 0) ==
		    (parsed == 0 && json_object_is_type(o, json_type_object)));
	json_object_put(obj);
	if (parsed != 0)
		return 0;

	depth = nesting(o);
	FUZZ_ASSERT(depth <= ORC_JSON_MAX_DEPTH);
	/* The text nests at least as deep as the value (it may nest deeper:
	 * with a duplicate key json-c keeps the last value). */
	if (depth > 0)
		FUZZ_ASSERT(orc_json_check(text, size, depth - 1, NULL, 0) == ORC_EINVALID);

	out = orc_json_str(o, &outlen);
	FUZZ_ASSERT(out && outlen == strlen(out));
	if (orc_json_check(out, outlen, ORC_JSON_MAX_DEPTH, msg, sizeof(msg)) != 0)
		fprintf(stderr, "fuzz: serialised \"%.200s\": %s\n", out, msg);
	FUZZ_ASSERT(orc_json_check(out, outlen, ORC_JSON_MAX_DEPTH, NULL, 0) == 0);
	FUZZ_ASSERT(orc_json_parse(&again, out, outlen, msg, sizeof(msg)) == 0);
	FUZZ_ASSERT(json_object_equal(o, again));
	json_object_put(again);
	json_object_put(o);
	return 0;
}
