#ifndef AGENT_GIT_OPS_H
#define AGENT_GIT_OPS_H
#include <git2.h>

#include "server.h"
/*
 * Git in the agent (libgit2; the image needs no git): apply a patch, diff
 * the working tree against HEAD, reset (docs/agent-protocol.md, "Git").
 */

#define AGENT_PATCH_BODY (64u << 20)     /* JSON body of POST /git/apply */
#define AGENT_DIFF_MAX (64u << 20)       /* largest patch GET /git/diff returns */

void agent_handle_git_apply(struct agent_reply *reply, const struct agent_request *req);
void agent_handle_git_diff(struct agent_reply *reply, const struct agent_request *req);
void agent_handle_git_reset(struct agent_reply *reply, const struct agent_request *req);

/* git_patch.c: patch with a "diff --git" line added to every file section
 * that lacks one (plain `diff -u` output), so libgit2 parses it. */
int agent_git_patch_normalise(struct orc_buf *out, const char *patch, size_t len);

/* git_repo.c */

/* git_libgit2_init once per process (and owner validation off: the
 * sandbox is the boundary, and the agent may run as another user). */
void agent_git_init(void);
/* The repository whose working directory is exactly dir (no search
 * upwards): 0, ORC_ENOTFOUND when dir is not one, ORC_ERROR. */
int agent_git_open(git_repository **out, const char *dir, char *msg, size_t msglen);
/* dir exists and is a directory: 0, or ORC_ENOTFOUND / ORC_EINVALID. */
int agent_git_check_dir(const char *dir, char *msg, size_t msglen);
/* agent_git_check_dir and agent_git_open, replying on failure (404 for a
 * missing directory, 400 when it is not a repository). */
int agent_git_open_cwd(git_repository **out, struct agent_reply *reply, const char *dir);
/* The last libgit2 error as text ("unknown error" when none). */
const char *agent_git_error(void);
#endif
