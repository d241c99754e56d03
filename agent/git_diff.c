#include "git_ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "files.h"
#include "fsutil.h"
#include "json.h"

/*
 * GET /git/diff: the working tree against HEAD as one patch, untracked
 * files included (ignored ones not), binary files as git binary patches,
 * so that `git apply` on a fresh clone reproduces the working tree: the
 * "model patch" of SWE tasks.
 */

#define DIFF_FLAGS (GIT_DIFF_INCLUDE_UNTRACKED | GIT_DIFF_RECURSE_UNTRACKED_DIRS | \
		    GIT_DIFF_SHOW_UNTRACKED_CONTENT | GIT_DIFF_SHOW_BINARY | \
		    GIT_DIFF_INCLUDE_TYPECHANGE)

/* HEAD's tree, or NULL (*out) for a repository without commits yet. */
static int head_tree(git_tree **out, git_repository *repo)
{
	git_object *obj = NULL;
	int r = git_revparse_single(&obj, repo, "HEAD^{tree}");

	if (r == GIT_ENOTFOUND || r == GIT_EUNBORNBRANCH) {
		*out = NULL;
		return 0;
	}
	if (r < 0)
		return ORC_ERROR;
	*out = (git_tree *)obj;
	return 0;
}

void agent_handle_git_diff(struct agent_reply *reply, const struct agent_request *req)
{
	git_diff_options opts = GIT_DIFF_OPTIONS_INIT;
	git_repository *repo = NULL;
	git_buf patch = GIT_BUF_INIT_CONST(NULL, 0);
	git_tree *tree = NULL;
	git_diff *diff = NULL;
	json_object *o;
	char *cwd = NULL, msg[1024];

	if (agent_git_load(reply) < 0 ||
	    agent_arg_path(&cwd, reply, req, "cwd", AGENT_WORKSPACE) < 0)
		return;
	if (agent_git_open_cwd(&repo, reply, cwd) < 0)
		goto done;
	opts.flags = DIFF_FLAGS;
	opts.id_abbrev = GIT_OID_HEXSZ; /* git apply wants full ids for binary patches */
	if (head_tree(&tree, repo) < 0 ||
	    git_diff_tree_to_workdir_with_index(&diff, repo, tree, &opts) < 0 ||
	    git_diff_to_buf(&patch, diff, GIT_DIFF_FORMAT_PATCH) < 0) {
		snprintf(msg, sizeof(msg), "diff of \"%s\" failed: %s", cwd, agent_git_error());
		agent_reply_error(reply, 500, msg);
		goto done;
	}
	if (patch.size > AGENT_DIFF_MAX) {
		agent_reply_error(reply, 413, "the diff is larger than 64 MiB");
		goto done;
	}
	o = json_object_new_object();
	json_object_object_add(o, "cwd", json_object_new_string(cwd));
	json_object_object_add(o, "patch", orc_json_new_text(patch.ptr ? patch.ptr : "", patch.size));
	json_object_object_add(o, "files", json_object_new_int64((int64_t)git_diff_num_deltas(diff)));
	agent_reply_json(reply, 200, o);
	json_object_put(o);
done:
	git_buf_dispose(&patch);
	git_diff_free(diff);
	git_tree_free(tree);
	git_repository_free(repo);
	free(cwd);
}
