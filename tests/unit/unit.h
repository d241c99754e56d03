#ifndef ORC_UNIT_H
#define ORC_UNIT_H
/*
 * A minimal unit-test harness: each test is a function that records
 * failures through CHECK(); main.c runs the table and prints
 * "N passed, N failed".
 */
#include <stdio.h>

extern int unit_failures;

#define CHECK(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "    %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
		unit_failures++; \
	} \
} while (0)

#define CHECK_STR(a, b) do { \
	const char *a_ = (a), *b_ = (b); \
	if (!a_ || !b_ || strcmp(a_, b_)) { \
		fprintf(stderr, "    %s:%d: \"%s\" != \"%s\"\n", __FILE__, __LINE__, \
			a_ ? a_ : "(null)", b_ ? b_ : "(null)"); \
		unit_failures++; \
	} \
} while (0)

struct unit_test {
	const char *name;
	void (*fn)(void);
};

/* Each test file exports its table, terminated by { NULL, NULL }. */
extern const struct unit_test buf_tests[];
extern const struct unit_test json_tests[];
extern const struct unit_test strutil_tests[];
extern const struct unit_test sha256_tests[];
extern const struct unit_test metrics_tests[];
extern const struct unit_test agent_parser_tests[];
extern const struct unit_test rmtree_tests[];
extern const struct unit_test pgarray_tests[];
extern const struct unit_test ws_accept_tests[];
extern const struct unit_test log_tests[];
extern const struct unit_test procstat_tests[];
extern const struct unit_test api_rule_tests[];
extern const struct unit_test controller_rule_tests[];
extern const struct unit_test imgref_tests[];
#endif
