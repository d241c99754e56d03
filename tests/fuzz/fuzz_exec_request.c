/*
 * The POST /exec body of the agent: orc_json_parse_object, then
 * parse_request in agent/exec_http.c. parse_request is static (there is no
 * public parse function), so this file includes exec_http.c; the linker's
 * --gc-sections drops the handler and everything it needs (build.sh).
 * If exec_http.c renames parse_request, exec_request_release or struct
 * exec_request, change them here.
 *
 * Properties: success means exactly one of a string command and a
 * non-empty argv (at most 65536, no NULs), env names non-empty without
 * '=', timeout in (0, 7 days], max_output at most 64 MiB, job_id 1..64 of
 * [A-Za-z0-9-], cwd non-empty; failure says why; nothing leaks.
 */
#include "../../agent/exec_http.c"

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct exec_request r;
	json_object *root = NULL;
	char msg[256] = "";
	size_t i;

	memset(&r, 0, sizeof(r));
	if (orc_json_parse_object(&root, (const char *)data, size, msg, sizeof(msg)) < 0) {
		FUZZ_ASSERT(msg[0]);
		return 0;
	}
	if (parse_request(&r, root, msg, sizeof(msg)) < 0) {
		FUZZ_ASSERT(msg[0]);
		goto done;
	}
	FUZZ_ASSERT((r.cmd != NULL) != (r.args != NULL));
	if (r.cmd)
		FUZZ_ASSERT(strlen(r.cmd) == r.cmd_len);
	else
		FUZZ_ASSERT(r.nargs >= 1 && r.nargs <= MAX_ARGS);
	for (i = 0; i < r.nargs; i++)
		FUZZ_ASSERT(r.args[i] != NULL);
	FUZZ_ASSERT(r.nenv <= MAX_ENV);
	for (i = 0; i < r.nenv; i++) {
		FUZZ_ASSERT(r.env_keys[i][0] && !strchr(r.env_keys[i], '='));
		FUZZ_ASSERT(r.env_vals[i] != NULL);
	}
	FUZZ_ASSERT(r.timeout_s > 0 && r.timeout_s <= MAX_TIMEOUT_S);
	FUZZ_ASSERT(r.max_output <= MAX_MAX_OUTPUT);
	FUZZ_ASSERT(!r.cwd || r.cwd[0]);
	FUZZ_ASSERT(!r.job_id || agent_job_id_valid(r.job_id));
	FUZZ_ASSERT(!r.stdin_data || r.stdin_len < ((size_t)1 << 31));
done:
	exec_request_release(&r);
	json_object_put(root);
	return 0;
}
