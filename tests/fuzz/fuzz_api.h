#ifndef ORC_FUZZ_API_H
#define ORC_FUZZ_API_H
/*
 * For the targets that include an api handler file (fuzz_api_create.c,
 * fuzz_api_exec.c): api_req_param is stubbed so that an input starting
 * with a line "Idempotency-Key: VALUE" sets that header; the rest of the
 * input is the body. Include after the handler file and fuzz.h.
 */

static const char *idem_key;

const char *api_req_param(struct api_req *r, const char *name)
{
	(void)r;
	return strcmp(name, "HTTP_IDEMPOTENCY_KEY") ? NULL : idem_key;
}

/* Split off a leading "Idempotency-Key: ..." line; *key is malloc'd (or
 * NULL); returns how many bytes it took. */
static size_t split_header(char **key, const uint8_t *data, size_t size)
{
	static const char h[] = "Idempotency-Key: ";
	const uint8_t *nl;

	*key = NULL;
	if (size < sizeof(h) - 1 || memcmp(data, h, sizeof(h) - 1))
		return 0;
	nl = memchr(data, '\n', size);
	if (!nl)
		return 0;
	*key = fuzz_cstr(data + sizeof(h) - 1, (size_t)(nl - data) - (sizeof(h) - 1));
	return (size_t)(nl - data) + 1;
}
#endif
