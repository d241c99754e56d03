/*
 * orc_tar_name_check (lib/tar_name.c): the entry names of a tar stream
 * uploaded to PUT /archive (and unpacked by orchardctl cp and image import).
 *
 * Properties: an accepted name is not empty, not absolute and has no ".."
 * component (split here independently), and joined to the target
 * directory it resolves (agent_path_resolve, by name) to that directory
 * or below it.
 */
#include "fuzz.h"

#include "err.h"
#include "fsutil.h"
#include "tar_name.h"

#define DEST "/workspace/dest"

static int has_dotdot(const char *s)
{
	const char *p = s;

	for (;;) {
		size_t len = strcspn(p, "/");
		if (len == 2 && p[0] == '.' && p[1] == '.')
			return 1;
		if (!p[len])
			return 0;
		p += len + 1;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *name, *joined, *resolved = NULL, msg[256];
	size_t n, dn = strlen(DEST);
	int ok;

	if (size > 8192)
		return 0;
	name = fuzz_cstr(data, size);
	ok = orc_tar_name_check(name) == 0;
	FUZZ_ASSERT(ok == (name[0] && name[0] != '/' && !has_dotdot(name)));
	if (ok) {
		n = strlen(name);
		joined = malloc(dn + 1 + n + 1);
		FUZZ_ASSERT(joined);
		memcpy(joined, DEST "/", dn + 1);
		memcpy(joined + dn + 1, name, n + 1);
		if (agent_path_resolve(&resolved, joined, dn + 1 + n, msg, sizeof(msg)) == 0) {
			FUZZ_ASSERT(!strncmp(resolved, DEST, dn) &&
				    (resolved[dn] == '\0' || resolved[dn] == '/'));
			free(resolved);
		}
		free(joined);
	}
	free(name);
	return 0;
}
