#include "git_ops.h"

#include <git2/sys/mempack.h>
#include <git2/sys/odb_backend.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "err.h"
#include "files.h"
#include "fsutil.h"
#include "json.h"
#include "xalloc.h"

/*
 * POST /git/apply: libgit2 reads every file the patch touches, applies all
 * hunks in memory and only then writes the results (a checkout of just
 * those paths), so a patch that does not apply leaves the directory as it
 * was. A directory that is not a repository is patched through a
 * temporary bare repository whose working directory it becomes; nothing is
 * written into the directory but the patched files.
 */

/* Which file and hunk libgit2 was on when it failed (its own message
 * names neither). */
struct apply_progress {
	char path[1024];
	char hunk[256];
	int hunk_no;
};

static int on_delta(const git_diff_delta *d, void *payload)
{
	struct apply_progress *p = payload;
	const char *path = d->new_file.path ? d->new_file.path : d->old_file.path;

	snprintf(p->path, sizeof(p->path), "%s", path ? path : "");
	p->hunk[0] = '\0';
	p->hunk_no = 0;
	return 0;
}

static int on_hunk(const git_diff_hunk *h, void *payload)
{
	struct apply_progress *p = payload;
	size_t n = h->header_len;

	while (n && (h->header[n - 1] == '\n' || h->header[n - 1] == '\r'))
		n--;
	snprintf(p->hunk, sizeof(p->hunk), "%.*s", (int)n, h->header);
	p->hunk_no++;
	return 0;
}

/*
 * libgit2 stores the blobs of the files it patches in the object database
 * as it goes; an in-memory backend in front of the repository's keeps
 * them out of .git (git apply does not write objects either).
 */
static int use_mempack(git_repository *repo)
{
	git_odb *odb = NULL;
	git_odb_backend *mempack = NULL;
	int r;

	if ((r = git_repository_odb(&odb, repo)) < 0 || (r = git_mempack_new(&mempack)) < 0)
		goto done;
	if ((r = git_odb_add_backend(odb, mempack, 1000)) < 0)
		mempack->free(mempack);
done:
	git_odb_free(odb);
	return r;
}

/* A temporary bare repository whose working directory is dir. */
static int open_scratch(git_repository **out, char **gitdir_out, const char *dir,
			char *msg, size_t msglen)
{
	git_repository_init_options io = GIT_REPOSITORY_INIT_OPTIONS_INIT;
	git_repository *repo = NULL;
	char tmpl[] = "/tmp/.orchard-apply-XXXXXX";

	if (!mkdtemp(tmpl)) {
		snprintf(msg, msglen, "mkdtemp() \"%s\" failed: %s", tmpl, strerror(errno));
		return ORC_ERROR;
	}
	io.flags = GIT_REPOSITORY_INIT_BARE | GIT_REPOSITORY_INIT_NO_REINIT;
	if (git_repository_init_ext(&repo, tmpl, &io) < 0 ||
	    git_repository_set_workdir(repo, dir, 0) < 0) {
		snprintf(msg, msglen, "preparing to patch \"%s\" failed: %s", dir, agent_git_error());
		git_repository_free(repo);
		agent_remove(tmpl, 1, msg, msglen);
		return ORC_ERROR;
	}
	*out = repo;
	*gitdir_out = xstrdup(tmpl);
	return 0;
}

static void add_file(json_object *files, const char *path)
{
	size_t i, n = json_object_array_length(files);

	if (!path)
		return;
	for (i = 0; i < n; i++)
		if (!strcmp(json_object_get_string(json_object_array_get_idx(files, i)), path))
			return;
	json_object_array_add(files, orc_json_new_text(path, strlen(path)));
}

static json_object *changed_files(git_diff *diff)
{
	json_object *files = json_object_new_array();
	const git_diff_delta *d;
	size_t i, n = git_diff_num_deltas(diff);

	for (i = 0; i < n; i++) {
		d = git_diff_get_delta(diff, i);
		if (d->status != GIT_DELTA_ADDED)
			add_file(files, d->old_file.path);
		if (d->status != GIT_DELTA_DELETED)
			add_file(files, d->new_file.path);
	}
	return files;
}

static void reply_result(struct agent_reply *reply, int check, json_object *files, const char *error)
{
	json_object *o = json_object_new_object();
	struct orc_buf err = ORC_BUF_INIT;

	if (error)
		orc_buf_addf(&err, "error: %s\n", error);
	json_object_object_add(o, "success", json_object_new_boolean(!error));
	json_object_object_add(o, "check", json_object_new_boolean(check));
	json_object_object_add(o, "files", files ? files : json_object_new_array());
	json_object_object_add(o, "error", error ? orc_json_new_text(error, strlen(error)) : NULL);
	json_object_object_add(o, "stdout", json_object_new_string(""));
	json_object_object_add(o, "stderr", json_object_new_string(orc_buf_cstr(&err)));
	json_object_object_add(o, "exit_code", json_object_new_int(error ? 1 : 0));
	agent_reply_json(reply, 200, o);
	json_object_put(o);
	orc_buf_release(&err);
}

void agent_handle_git_apply(struct agent_reply *reply, const struct agent_request *req)
{
	git_apply_options opts = GIT_APPLY_OPTIONS_INIT;
	struct apply_progress progress = { "", "", 0 };
	json_object *body = NULL, *patch = NULL, *files = NULL;
	struct orc_buf text = ORC_BUF_INIT;
	git_repository *repo = NULL;
	git_diff *diff = NULL;
	char *cwd = NULL, *scratch = NULL, msg[4096], detail[512];
	int check = 0, err;

	if (agent_git_load(reply) < 0 || agent_body_object(&body, reply, req) < 0)
		return;
	if (agent_field_path(&cwd, reply, body, "cwd", AGENT_WORKSPACE) < 0)
		goto done;
	if (!json_object_object_get_ex(body, "patch", &patch) ||
	    !json_object_is_type(patch, json_type_string)) {
		agent_reply_error(reply, 400, "field 'patch' is required and must be a string");
		goto done;
	}
	if ((err = orc_json_get_bool(body, "check", &check, msg, sizeof(msg))) < 0) {
		agent_reply_error(reply, 400, msg);
		goto done;
	}
	/* libgit2 mishandles NUL inside hunk lines (it over-reads); a text
	 * patch never holds one, binary content travels as base85. */
	if (memchr(json_object_get_string(patch), '\0', (size_t)json_object_get_string_len(patch))) {
		agent_reply_error(reply, 400, "patch contains NUL bytes");
		goto done;
	}
	if ((err = agent_git_check_dir(cwd, msg, sizeof(msg))) < 0) {
		agent_reply_err(reply, err, msg);
		goto done;
	}
	err = agent_git_open(&repo, cwd, msg, sizeof(msg));
	if (err == ORC_ENOTFOUND)
		err = open_scratch(&repo, &scratch, cwd, msg, sizeof(msg));
	if (err < 0) {
		agent_reply_err(reply, err, msg);
		goto done;
	}
	if (use_mempack(repo) < 0) {
		snprintf(msg, sizeof(msg), "preparing to patch \"%s\" failed: %s", cwd, agent_git_error());
		agent_reply_error(reply, 500, msg);
		goto done;
	}
	if (agent_git_patch_normalise(&text, json_object_get_string(patch),
				      (size_t)json_object_get_string_len(patch)) < 0) {
		agent_reply_error(reply, 400, "patch contains NUL bytes");
		goto done;
	}
	if (git_diff_from_buffer(&diff, orc_buf_cstr(&text), text.len) < 0) {
		snprintf(msg, sizeof(msg), "malformed patch: %s", agent_git_error());
		reply_result(reply, check, NULL, msg);
		goto done;
	}
	if (git_diff_num_deltas(diff) == 0) {
		reply_result(reply, check, NULL, "no valid patches in input");
		goto done;
	}
	files = changed_files(diff);
	opts.delta_cb = on_delta;
	opts.hunk_cb = on_hunk;
	opts.payload = &progress;
	opts.flags = check ? GIT_APPLY_CHECK : 0;
	if (git_apply(repo, diff, GIT_APPLY_LOCATION_WORKDIR, &opts) < 0) {
		snprintf(detail, sizeof(detail), "%s", agent_git_error());
		if (progress.hunk_no)
			snprintf(msg, sizeof(msg), "patch does not apply to \"%s\": hunk #%d (%s): %s",
				 progress.path, progress.hunk_no, progress.hunk, detail);
		else
			snprintf(msg, sizeof(msg), "patch does not apply to \"%s\": %s",
				 progress.path, detail);
		reply_result(reply, check, files, msg);
		files = NULL;
		goto done;
	}
	reply_result(reply, check, files, NULL);
	files = NULL;
done:
	orc_buf_release(&text);
	json_object_put(files);
	git_diff_free(diff);
	git_repository_free(repo);
	if (scratch)
		agent_remove(scratch, 1, detail, sizeof(detail));
	free(scratch);
	free(cwd);
	json_object_put(body);
}
