#include "git_ops.h"

#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "err.h"

/*
 * libgit2 parses git diffs only; `diff -u` and many hand-written patches
 * have no "diff --git" line. Give each such file section one, made from
 * its "--- a/X" / "+++ b/Y" lines, so that both kinds apply (as git apply
 * accepts both). Hunk bodies are skipped by their line counts, so a
 * removed line that starts with "-- " is never taken for a header.
 */

static const char *line_end(const char *p, const char *end)
{
	const char *nl = memchr(p, '\n', (size_t)(end - p));

	return nl ? nl + 1 : end;
}

static int starts(const char *p, const char *end, const char *prefix)
{
	size_t n = strlen(prefix);

	return (size_t)(end - p) >= n && !memcmp(p, prefix, n);
}

/* The path of a "--- " / "+++ " line without its prefix ("a/", "b/") and
 * anything after a tab (diff -u puts the date there); NULL for /dev/null. */
static int header_path(const char **out, size_t *len, const char *p, const char *end)
{
	const char *s = p + 4, *e = s;

	while (e < end && *e != '\n' && *e != '\t' && *e != '\r')
		e++;
	if ((size_t)(e - s) == 9 && !memcmp(s, "/dev/null", 9)) {
		*out = NULL;
		*len = 0;
		return 0;
	}
	if (e - s < 3 || (s[0] != 'a' && s[0] != 'b') || s[1] != '/')
		return ORC_EINVALID; /* only the usual -p1 form is rewritten */
	*out = s + 2;
	*len = (size_t)(e - s - 2);
	return 0;
}

/* "@@ -a[,b] +c[,d] @@": the old and new line counts. */
static int hunk_counts(long *old_n, long *new_n, const char *p, const char *end)
{
	char tmp[128], *q;
	size_t n = (size_t)(line_end(p, end) - p);

	if (n >= sizeof(tmp))
		n = sizeof(tmp) - 1;
	memcpy(tmp, p, n);
	tmp[n] = '\0';
	q = tmp + 3;
	if (*q != '-')
		return ORC_EINVALID;
	strtol(q + 1, &q, 10);
	*old_n = *q == ',' ? strtol(q + 1, &q, 10) : 1;
	while (*q == ' ')
		q++;
	if (*q != '+')
		return ORC_EINVALID;
	strtol(q + 1, &q, 10);
	*new_n = *q == ',' ? strtol(q + 1, &q, 10) : 1;
	return *old_n < 0 || *new_n < 0 ? ORC_EINVALID : 0;
}

/* The header of one file section: a or b NULL for /dev/null. */
static void add_git_header(struct orc_buf *out, const char *a, size_t alen,
			   const char *b, size_t blen)
{
	const char *name = a ? a : b;
	size_t nlen = a ? alen : blen;

	orc_buf_adds(out, "diff --git a/");
	orc_buf_add(out, name, nlen);
	orc_buf_adds(out, " b/");
	orc_buf_add(out, b ? b : a, b ? blen : alen);
	orc_buf_addc(out, '\n');
	if (!a)
		orc_buf_adds(out, "new file mode 100644\n");
	else if (!b)
		orc_buf_adds(out, "deleted file mode 100644\n");
	orc_buf_adds(out, a ? "--- a/" : "--- /dev/null");
	if (a)
		orc_buf_add(out, a, alen);
	orc_buf_adds(out, b ? "\n+++ b/" : "\n+++ /dev/null");
	if (b)
		orc_buf_add(out, b, blen);
	orc_buf_addc(out, '\n');
}

int agent_git_patch_normalise(struct orc_buf *out, const char *patch, size_t len)
{
	const char *p = patch, *end = patch + len, *next, *next2, *a, *b;
	size_t alen, blen;
	long old_n = 0, new_n = 0;
	int in_git = 0;

	/* libgit2 (1.5) copies a hunk line only up to a NUL byte but keeps
	 * its full length, so git_apply reads past the copy; a text patch
	 * never holds NUL (binary content is base85 in "GIT binary patch"). */
	if (memchr(patch, '\0', len))
		return ORC_EINVALID;
	while (p < end) {
		next = line_end(p, end);
		if (old_n > 0 || new_n > 0) {
			/* inside a hunk */
			if (*p == ' ' || *p == '\n' || *p == '\r') {
				old_n--;
				new_n--;
			} else if (*p == '-') {
				old_n--;
			} else if (*p == '+') {
				new_n--;
			} else if (*p != '\\') {
				old_n = new_n = 0; /* short hunk: let libgit2 complain */
				continue;
			}
		} else if (starts(p, end, "diff --git ")) {
			in_git = 1;
		} else if (starts(p, end, "@@ -")) {
			if (hunk_counts(&old_n, &new_n, p, end) < 0)
				old_n = new_n = 0;
		} else if (starts(p, end, "--- ") && next < end && starts(next, end, "+++ ")) {
			next2 = line_end(next, end);
			if (!in_git && header_path(&a, &alen, p, end) == 0 &&
			    header_path(&b, &blen, next, end) == 0 && (a || b)) {
				add_git_header(out, a, alen, b, blen);
			} else if (orc_buf_add(out, p, (size_t)(next2 - p)) < 0) {
				return ORC_ETOOBIG;
			}
			in_git = 0;
			p = next2;
			continue;
		}
		if (orc_buf_add(out, p, (size_t)(next - p)) < 0)
			return ORC_ETOOBIG;
		p = next;
	}
	/* Orchard writes the patch through a heredoc, which ends it with a
	 * newline: its documented example patch has none on its last line,
	 * which git and libgit2 would call corrupt. */
	if (out->len > 0 && out->ptr[out->len - 1] != '\n' && orc_buf_addc(out, '\n') < 0)
		return ORC_ETOOBIG;
	return 0;
}
