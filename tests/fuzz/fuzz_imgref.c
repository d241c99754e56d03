/*
 * orc_imgref_parse (lib/imgref.c): image references from outside (issue
 * 27: the image of POST /sandboxes, and what a pull hands skopeo).
 *
 * Properties: a refusal leaves *out untouched and says why; an accepted
 * reference normalises to DOMAIN/PATH[:TAG][@DIGEST] with a non-empty
 * domain, a lowercase path and a tag or a digest, holds no character
 * skopeo or a shell could take for something else, and parses back to
 * itself (normalising is idempotent).
 */
#include "fuzz.h"

#include "err.h"
#include "imgref.h"

static void check_plain(const char *s)
{
	for (; *s; s++)
		FUZZ_ASSERT((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
			    (*s >= '0' && *s <= '9') || strchr("._-/:@", *s));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct orc_imgref r = ORC_IMGREF_INIT, again = ORC_IMGREF_INIT;
	char *s, *why = NULL, *norm, *norm2;
	const char *c;

	if (size > ORC_IMGREF_MAX + 8)
		return 0;
	s = fuzz_cstr(data, size);
	if (orc_imgref_parse(&r, &why, s) < 0) {
		FUZZ_ASSERT(why && *why);
		FUZZ_ASSERT(!r.domain && !r.path && !r.tag && !r.digest);
		free(why);
		free(s);
		return 0;
	}
	FUZZ_ASSERT(r.domain && *r.domain && r.path && *r.path && (r.tag || r.digest));
	for (c = r.path; *c; c++)
		FUZZ_ASSERT(!(*c >= 'A' && *c <= 'Z'));
	FUZZ_ASSERT(!r.digest || (strlen(r.digest) == 71 && !strncmp(r.digest, "sha256:", 7)));
	norm = orc_imgref_string(&r);
	check_plain(norm);
	FUZZ_ASSERT(orc_imgref_parse(&again, &why, norm) == 0);
	norm2 = orc_imgref_string(&again);
	FUZZ_ASSERT(!strcmp(norm, norm2));
	free(norm);
	free(norm2);
	orc_imgref_release(&r);
	orc_imgref_release(&again);
	free(s);
	return 0;
}
