/*
 * The agent's socket on the host: its address, the short link that stands
 * in for it when <state>/<id>/run/agent.sock is too long for a unix socket
 * address, and sealing run/ once the agent is up so the path stays ours.
 */
#include "local_driver.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "log.h"
#include "xalloc.h"

#define SOCK_SUFFIX "/run/agent.sock"

/* 1 when <state>/<id>/run/agent.sock fits in sun_path. */
int local_direct_fits(const struct ctl_driver *d, const char *id)
{
	return strlen(d->cfg->state_dir) + 1 + strlen(id) + strlen(SOCK_SUFFIX) <= SUN_PATH_MAX;
}

/* The short link name of id: 64-bit FNV-1a in hex. A collision is
 * detected (the link exists and points elsewhere) and fails that launch. */
static void link_key(char out[LINK_KEY_LEN + 1], const char *id)
{
	uint64_t h = 14695981039346656037ULL;

	for (; *id; id++)
		h = (h ^ (unsigned char)*id) * 1099511628211ULL;
	snprintf(out, LINK_KEY_LEN + 1, "%016llx", (unsigned long long)h);
}

/*
 * unix:<state>/<id>/run/agent.sock, or when that does not fit in a unix
 * socket address (a long state dir), the short symlink to it: connect()
 * follows symlinks, and only the path given is limited to 107 bytes.
 */
char *local_agent_address(struct ctl_driver *d, const char *id)
{
	char key[LINK_KEY_LEN + 1];

	if (local_direct_fits(d, id))
		return xasprintf("unix:%s/%s%s", d->cfg->state_dir, id, SOCK_SUFFIX);
	link_key(key, id);
	return xasprintf("unix:%s/" LINK_DIR "/%s", d->cfg->state_dir, key);
}

/* Create (or find in place) <state>/.s/<key> -> ../<id>/run/agent.sock. */
int local_make_link(struct local *l, const char *id)
{
	char key[LINK_KEY_LEN + 1], have[256];
	char *target = xasprintf("../%s%s", id, SOCK_SUFFIX);
	int lfd = -1, err = 0;
	ssize_t n;

	link_key(key, id);
	if ((mkdirat(l->state_fd, LINK_DIR, 0711) < 0 && errno != EEXIST) ||
	    (lfd = openat(l->state_fd, LINK_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		err = ORC_ERROR;
		goto done;
	}
	if (symlinkat(target, lfd, key) == 0)
		goto done;
	n = errno == EEXIST ? readlinkat(lfd, key, have, sizeof(have) - 1) : -1;
	if (n < 0 || (size_t)n != strlen(target) || memcmp(have, target, (size_t)n)) {
		orc_log(ORC_LOG_ERROR, "cannot create the short agent socket link", "sandbox_id", id,
			"link", key, "error", n < 0 ? strerror(errno) : "taken by another sandbox", NULL);
		err = ORC_ERROR;
	}
done:
	if (lfd >= 0)
		close(lfd);
	free(target);
	return err;
}

/* Remove id's short link, if it is id's. */
void local_remove_link(struct local *l, const char *id)
{
	char key[LINK_KEY_LEN + 1], have[256];
	char *target = xasprintf("../%s%s", id, SOCK_SUFFIX);
	int lfd = openat(l->state_fd, LINK_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	ssize_t n;

	link_key(key, id);
	if (lfd >= 0) {
		n = readlinkat(lfd, key, have, sizeof(have) - 1);
		if (n >= 0 && (size_t)n == strlen(target) && !memcmp(have, target, (size_t)n))
			unlinkat(lfd, key, 0);
		close(lfd);
	}
	free(target);
}

/*
 * The agent is up: make run/ root's (0711). From now on nothing in the
 * sandbox can replace agent.sock with a symlink to some other socket on
 * the host, which the API (following the path as root) would connect to.
 * Only possible when we are root and the sandbox is not.
 */
void local_seal(struct ctl_driver *d, const char *id)
{
	int dfd;

	if (!d->cfg->drop_privileges || d->cfg->sandbox_uid == 0)
		return;
	dfd = openat(L(d)->state_fd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return;
	if (fchownat(dfd, "run", 0, 0, AT_SYMLINK_NOFOLLOW) < 0 || fchmodat(dfd, "run", 0711, 0) < 0)
		orc_log(ORC_LOG_WARN, "sealing the agent's run dir failed", "sandbox_id", id,
			"error", strerror(errno), NULL);
	close(dfd);
}
