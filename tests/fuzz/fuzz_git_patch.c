/*
 * agent_git_patch_normalise (agent/git_patch.c) and then libgit2's patch
 * parser, as POST /git/apply hands the "patch" field to them
 * (agent/git_apply.c).
 *
 * Properties: normalising never fails without a size limit and is
 * idempotent: a patch that has been given its "diff --git" lines is left
 * as it is. libgit2 then
 * parses the result, and every delta's patch can be built and printed,
 * without crashing.
 */
#include <git2.h>

#include "fuzz.h"

#include "buf.h"
#include "err.h"
#include "dl.h"
#include "git_ops.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char msg[512];

	(void)argc;
	(void)argv;
	/* as agent_git_load: dlopen libgit2, then git_libgit2_init */
	if (agent_dl_load(&agent_dl_git, msg, sizeof(msg)) < 0) {
		fprintf(stderr, "fuzz_git_patch: %s\n", msg);
		abort();
	}
	return 0;
}

/* What git_apply reads of a parsed patch (agent/git_apply.c applies it):
 * every line's content_len bytes, each read here so that ASan sees an
 * over-read (into a volatile sink the compiler cannot drop). */
static volatile unsigned char sink;

static void through_libgit2(const struct orc_buf *b)
{
	git_diff *diff = NULL;
	const git_diff_line *line;
	size_t i, n, h, l, k, nlines;

	if (git_diff_from_buffer(&diff, orc_buf_cstr(b), b->len) < 0)
		return;
	n = git_diff_num_deltas(diff);
	for (i = 0; i < n; i++) {
		git_patch *patch = NULL;
		FUZZ_ASSERT(git_diff_get_delta(diff, i) != NULL);
		if (git_patch_from_diff(&patch, diff, i) < 0 || !patch)
			continue;
		for (h = 0; h < git_patch_num_hunks(patch); h++) {
			nlines = (size_t)git_patch_num_lines_in_hunk(patch, h);
			for (l = 0; l < nlines; l++) {
				if (git_patch_get_line_in_hunk(&line, patch, h, l) < 0)
					continue;
				for (k = 0; k < line->content_len; k++)
					sink ^= (unsigned char)line->content[k];
			}
		}
		git_patch_free(patch);
	}
	git_diff_free(diff);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct orc_buf once = ORC_BUF_INIT, twice = ORC_BUF_INIT;
	int rc;

	if (size > 65536)
		return 0;
	rc = agent_git_patch_normalise(&once, (const char *)data, size);

	/* The one reason to refuse (once the fix asked for in the report
	 * lands): libgit2 1.5 mishandles NUL bytes in hunk lines. */
	if (rc == ORC_EINVALID) {
		FUZZ_ASSERT(memchr(data, '\0', size) != NULL);
		orc_buf_release(&once);
		return 0;
	}
	FUZZ_ASSERT(rc == 0);
	FUZZ_ASSERT(agent_git_patch_normalise(&twice, orc_buf_cstr(&once), once.len) == 0);
	FUZZ_ASSERT(twice.len == once.len && !memcmp(orc_buf_cstr(&twice), orc_buf_cstr(&once), once.len));
	through_libgit2(&once);
	orc_buf_release(&once);
	orc_buf_release(&twice);
	return 0;
}
