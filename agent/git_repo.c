#include "git_ops.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "err.h"
#include "files.h"
#include "fsutil.h"

/* Opening repositories. */

const char *agent_git_error(void)
{
	const git_error *e = git_error_last();

	return e && e->message ? e->message : "unknown error";
}

int agent_git_check_dir(const char *dir, char *msg, size_t msglen)
{
	struct stat st;

	if (stat(dir, &st) < 0) {
		int e = errno;

		snprintf(msg, msglen, "cwd \"%s\": %s", dir, strerror(e));
		return agent_errno_err(e);
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(msg, msglen, "cwd \"%s\" is not a directory", dir);
		return ORC_EINVALID;
	}
	return 0;
}

int agent_git_open_cwd(git_repository **out, struct agent_reply *reply, const char *dir)
{
	char msg[1024];
	int err;

	if ((err = agent_git_check_dir(dir, msg, sizeof(msg))) < 0 ||
	    (err = agent_git_open(out, dir, msg, sizeof(msg))) < 0)
		agent_reply_err(reply, err == ORC_ENOTFOUND ? ORC_EINVALID : err, msg);
	return err;
}

int agent_git_open(git_repository **out, const char *dir, char *msg, size_t msglen)
{
	git_repository *repo = NULL;
	int r;

	r = git_repository_open_ext(&repo, dir, GIT_REPOSITORY_OPEN_NO_SEARCH, NULL);
	if (r == GIT_ENOTFOUND) {
		snprintf(msg, msglen, "\"%s\" is not a git repository", dir);
		return ORC_ENOTFOUND;
	}
	if (r < 0) {
		snprintf(msg, msglen, "opening the repository \"%s\" failed: %s", dir, agent_git_error());
		return ORC_ERROR;
	}
	if (git_repository_is_bare(repo)) {
		git_repository_free(repo);
		snprintf(msg, msglen, "\"%s\" is a bare repository", dir);
		return ORC_EINVALID;
	}
	*out = repo;
	return 0;
}
