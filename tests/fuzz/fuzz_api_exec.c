/*
 * The POST /sandboxes/{id}/exec body of the api: orc_json_parse_object,
 * then parse_exec in api/exec.c with api_check_command, api_check_path
 * and api_check_env (api/validate.c). parse_exec is static, so this file
 * includes exec.c; the handler and its PostgreSQL and FastCGI calls are
 * dropped by the linker's --gc-sections (build.sh). api_req_param is
 * stubbed by fuzz_api.h ("Idempotency-Key: VALUE" first line).
 *
 * Properties: success means a command that passes api_check_command again
 * (a non-empty string, or 1..4096 strings with a non-empty program name,
 * no NULs), timeout 1..86400, an absolute cwd, a valid env, stdin at most
 * 8 MiB, a printable Idempotency-Key.
 */
#include "../../api/exec.c"

#include "fuzz.h"
#include "fuzz_api.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct exec_req x;
	struct api_req r;
	json_object *body = NULL;
	char msg[512] = "", *key;
	size_t skip = split_header(&key, data, size);
	int err;

	memset(&r, 0, sizeof(r));
	idem_key = key;
	if (orc_json_parse_object(&body, (const char *)data + skip, size - skip, msg, sizeof(msg)) < 0)
		goto done;
	if ((err = parse_exec(&x, &r, body)) < 0) {
		FUZZ_ASSERT(r.error[0]);
		goto done;
	}
	FUZZ_ASSERT(x.command && api_check_command(x.command, &r) == 0);
	FUZZ_ASSERT(x.timeout >= 1 && x.timeout <= 86400);
	FUZZ_ASSERT(!x.cwd || x.cwd[0] == '/');
	FUZZ_ASSERT(!x.env || api_check_env(x.env, "env", &r) == 0);
	FUZZ_ASSERT(!x.stdin_data || x.stdin_len <= STDIN_MAX);
	FUZZ_ASSERT(!x.idempotency_key || api_check_idempotency_key(x.idempotency_key));
done:
	json_object_put(body);
	free(key);
	return 0;
}
