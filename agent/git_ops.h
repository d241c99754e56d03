#ifndef AGENT_GIT_OPS_H
#define AGENT_GIT_OPS_H
#include "dl_git.h"

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
 * that lacks one (plain `diff -u` output), so libgit2 parses it, and a
 * final newline when its last line has none (as Orchard's heredoc adds). */
int agent_git_patch_normalise(struct orc_buf *out, const char *patch, size_t len);

/* dl_git.c: load libgit2 on first use (dl.h) and set it up once (owner
 * validation off: the sandbox is the boundary, and the agent may run as
 * another user). 0, or replies 500 naming the library. Every handler calls
 * it before any libgit2 function, its cleanup included. */
int agent_git_load(struct agent_reply *reply);

/* git_repo.c */

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
