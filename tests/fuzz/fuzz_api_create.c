/*
 * The POST /sandboxes body of the api: orc_json_parse_object, then
 * api_create_parse in api/sandbox_create.c with the shared field checks of
 * api/validate.c (labels, env, workdir) and orc_parse_cpu/_memory.
 * The handler is not linked alone, so this file includes sandbox_create.c; the
 * handler and its PostgreSQL and FastCGI calls are dropped by the linker's
 * --gc-sections (build.sh). api_req_param is stubbed (fuzz_api.h): an input that starts
 * with a line "Idempotency-Key: VALUE" sets that header, the rest is the
 * body. api_valid_id is repeated from api/router.c, whose route table
 * would pull in every handler.
 *
 * Properties: success means a non-empty image without whitespace, cpu and
 * memory within their ranges (memory at least 1 MiB), a DNS-label
 * sandbox_id if any, timeout 1..86400, labels and env that pass their
 * checks again, an absolute workdir, a printable Idempotency-Key.
 */
#include "../../api/sandbox_create.c"

#include "fuzz.h"
#include "fuzz_api.h"

int api_valid_id(const char *s)
{
	return orc_is_dns_label(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct api_create_req c;
	struct api_req r;
	json_object *body = NULL;
	char msg[512] = "", *key;
	size_t skip = split_header(&key, data, size);
	int err;

	memset(&r, 0, sizeof(r));
	idem_key = key;
	if (orc_json_parse_object(&body, (const char *)data + skip, size - skip, msg, sizeof(msg)) < 0)
		goto done;
	if ((err = api_create_parse(&c, &r, body)) < 0) {
		FUZZ_ASSERT(r.error[0]);
		goto done;
	}
	FUZZ_ASSERT(c.image && c.image[0] && strlen(c.image) <= IMAGE_MAX && !strpbrk(c.image, " \t\r\n"));
	FUZZ_ASSERT(c.cpu_millis >= 1 && c.cpu_millis <= 1024 * 1000);
	FUZZ_ASSERT(c.memory_bytes >= (1 << 20));
	FUZZ_ASSERT(!c.sandbox_id || orc_is_dns_label(c.sandbox_id));
	FUZZ_ASSERT(c.timeout >= 1 && c.timeout <= 86400);
	FUZZ_ASSERT(c.ttl >= 0 && c.idle >= 0);
	FUZZ_ASSERT(!c.labels || api_check_labels(c.labels, &r) == 0);
	FUZZ_ASSERT(!c.env || api_check_env(c.env, "env", &r) == 0);
	FUZZ_ASSERT(!c.workdir || c.workdir[0] == '/');
	FUZZ_ASSERT(!c.idempotency_key || api_check_idempotency_key(c.idempotency_key));
done:
	json_object_put(body);
	free(key);
	return 0;
}
