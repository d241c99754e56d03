#include <stdio.h>
#include <string.h>

#include "unit.h"

int unit_failures;

static const struct unit_test *const suites[] = { buf_tests, json_tests, strutil_tests, sha256_tests,
							metrics_tests, agent_parser_tests, rmtree_tests,
							pgarray_tests, ws_accept_tests, log_tests, procstat_tests,
							api_rule_tests, controller_rule_tests, imgref_tests };

int main(int argc, char **argv)
{
	int passed = 0, failed = 0;
	size_t s;
	const struct unit_test *t;

	for (s = 0; s < sizeof(suites) / sizeof(*suites); s++) {
		for (t = suites[s]; t->name; t++) {
			int before = unit_failures;
			if (argc > 1 && !strstr(t->name, argv[1]))
				continue;
			t->fn();
			if (unit_failures == before) {
				passed++;
			} else {
				failed++;
				fprintf(stderr, "FAIL %s\n", t->name);
			}
		}
	}
	printf("unit: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
