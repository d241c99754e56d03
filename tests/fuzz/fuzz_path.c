/*
 * agent_path_resolve (agent/fsutil.c): every path of the files, tar and
 * git endpoints (?path=, JSON "path", "cwd").
 *
 * Properties: NUL bytes and empty paths are refused; a result is absolute
 * and normal (no "//", no "." or ".." component, no trailing '/' except
 * "/"), shorter than PATH_MAX, and resolving it again changes nothing; a
 * relative path is taken from /workspace and a path without ".." that
 * starts there stays there.
 */
#include <limits.h>

#include "fuzz.h"

#include "err.h"
#include "fsutil.h"

static void check_normal(const char *p)
{
	const char *c = p + 1;

	FUZZ_ASSERT(p[0] == '/');
	if (!p[1])
		return;
	FUZZ_ASSERT(p[strlen(p) - 1] != '/');
	for (;;) {
		size_t len = strcspn(c, "/");
		FUZZ_ASSERT(len > 0);
		FUZZ_ASSERT(!(len == 1 && c[0] == '.'));
		FUZZ_ASSERT(!(len == 2 && c[0] == '.' && c[1] == '.'));
		if (!c[len])
			break;
		c += len + 1;
	}
}

static int has_dotdot(const char *s, size_t n)
{
	size_t i = 0;

	while (i < n) {
		size_t len = 0;
		while (i + len < n && s[i + len] != '/')
			len++;
		if (len == 2 && s[i] == '.' && s[i + 1] == '.')
			return 1;
		i += len + 1;
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *in = (const char *)data;
	char *out = NULL, *again = NULL, msg[256] = "";
	size_t n;

	if (agent_path_resolve(&out, in, size, msg, sizeof(msg)) < 0) {
		FUZZ_ASSERT(!out && msg[0]);
		FUZZ_ASSERT(size == 0 || memchr(in, '\0', size) || size >= PATH_MAX ||
			    (in[0] != '/' && size + strlen("/workspace/") >= PATH_MAX));
		return 0;
	}
	FUZZ_ASSERT(size > 0 && !memchr(in, '\0', size));
	n = strlen(out);
	FUZZ_ASSERT(n < PATH_MAX);
	check_normal(out);
	FUZZ_ASSERT(agent_path_resolve(&again, out, n, msg, sizeof(msg)) == 0);
	FUZZ_ASSERT(!strcmp(out, again));
	if (!has_dotdot(in, size) && (in[0] != '/' ||
	    (size >= 10 && !memcmp(in, "/workspace", 10) && (size == 10 || in[10] == '/'))))
		FUZZ_ASSERT(!strncmp(out, "/workspace", 10) && (out[10] == '\0' || out[10] == '/'));
	free(again);
	free(out);
	return 0;
}
