#define AGENT_DL_GIT_TABLE
#include "git_ops.h"

#include "dl.h"
#include "err.h"

/* libgit2's function table (dl_git.h) and its process-wide setup. */

#define AGENT_DL_DEFINE(f) __typeof__(f) *agent_dl_##f;
AGENT_GIT_SYMS(AGENT_DL_DEFINE)
#undef AGENT_DL_DEFINE

static const struct agent_dl_sym syms[] = {
#define AGENT_DL_ENTRY(f) { #f, (void **)&agent_dl_##f },
	AGENT_GIT_SYMS(AGENT_DL_ENTRY)
#undef AGENT_DL_ENTRY
	{ NULL, NULL }
};

static void init(void)
{
	agent_dl_git_libgit2_init();
	/* The sandbox is the boundary, and /workspace may belong to another
	 * user than the agent: git's safe.directory check does not apply. */
	agent_dl_git_libgit2_opts(GIT_OPT_SET_OWNER_VALIDATION, 0);
}

struct agent_dl_lib agent_dl_git = { "libgit2", AGENT_LIBGIT2_SONAME, syms, init, NULL };

int agent_git_load(struct agent_reply *reply)
{
	char msg[1024];

	if (agent_dl_load(&agent_dl_git, msg, sizeof(msg)) < 0) {
		agent_reply_error(reply, 500, msg);
		return ORC_ERROR;
	}
	return 0;
}
