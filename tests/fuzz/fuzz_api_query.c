/*
 * The api's query strings: static parse_query and url_decode of
 * api/request.c (the file is included; the FastCGI and PostgreSQL parts
 * are dropped by the linker's --gc-sections, build.sh). api_reply_error is
 * stubbed: it records that the request was refused.
 *
 * Properties: a refusal is a reply (400), never a crash or a half-filled
 * parameter; success gives at most API_MAX_QUERY pairs, none longer than
 * the input, without NUL bytes; percent-encoding every byte of every pair
 * and parsing again gives the same pairs.
 */
#include "../../api/request.c"

#include "fuzz.h"

static int refused;

int api_reply_error(struct api_req *r, int err, const char *fmt, ...)
{
	(void)r;
	(void)fmt;
	refused++;
	return err;
}

static void release(struct api_req *r)
{
	int i;

	for (i = 0; i < r->nquery; i++) {
		free(r->query[i].key);
		free(r->query[i].value);
	}
	r->nquery = 0;
}

static void encode(struct orc_buf *b, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	const unsigned char *p;

	for (p = (const unsigned char *)s; *p; p++) {
		orc_buf_addc(b, '%');
		orc_buf_addc(b, hex[*p >> 4]);
		orc_buf_addc(b, hex[*p & 15]);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct api_req r, again;
	struct orc_buf b = ORC_BUF_INIT;
	char *qs = fuzz_cstr(data, size);
	size_t len = strlen(qs);
	int i, err;

	memset(&r, 0, sizeof(r));
	refused = 0;
	err = parse_query(&r, qs);
	if (err < 0) {
		FUZZ_ASSERT(refused == 1);
		goto done;
	}
	FUZZ_ASSERT(refused == 0 && r.nquery <= API_MAX_QUERY);
	for (i = 0; i < r.nquery; i++) {
		FUZZ_ASSERT(r.query[i].key && r.query[i].value);
		FUZZ_ASSERT(strlen(r.query[i].key) <= len && strlen(r.query[i].value) <= len);
		if (i)
			orc_buf_addc(&b, '&');
		encode(&b, r.query[i].key);
		orc_buf_addc(&b, '=');
		encode(&b, r.query[i].value);
	}
	if (b.len <= QUERY_MAX) {
		memset(&again, 0, sizeof(again));
		FUZZ_ASSERT(parse_query(&again, orc_buf_cstr(&b)) == 0);
		/* "=" alone (an empty key and value) is one pair both times */
		FUZZ_ASSERT(again.nquery == r.nquery);
		for (i = 0; i < r.nquery; i++) {
			FUZZ_ASSERT(!strcmp(again.query[i].key, r.query[i].key));
			FUZZ_ASSERT(!strcmp(again.query[i].value, r.query[i].value));
		}
		release(&again);
	}
done:
	release(&r);
	orc_buf_release(&b);
	free(qs);
	return 0;
}
