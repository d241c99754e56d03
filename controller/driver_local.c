/*
 * The local driver: each sandbox is a bubblewrap sandbox running
 * orchard-agent, with its host state in $ORCHARD_STATE_DIR/<id>/:
 *
 *   <id>/            root, 0711
 *     handle         "<pid>:<starttime>" of its orchard-watchdog (root, 0600)
 *     cgroup         the sandbox's cgroup directories, one per line (root, 0600)
 *     agent.log      the agent's (and bwrap's) stdout and stderr
 *     run/           sandbox uid, 0700: token (0600), agent.sock  -> /run/orchard
 *                    (a `host` sandbox's uid is its own: local_uid.c)
 *     workspace/     sandbox uid, 0700                            -> /workspace
 *     tmp/           sandbox uid, 0700                            -> /tmp
 *     root/          an imported image's root: overlayfs (or a copy)  -> /
 *     upper/, work/  the overlay's private writable layer (image.c)
 *
 * The sandbox is found again after a controller restart from the handle
 * (in the database row and in <id>/handle) and /proc; nothing is kept in
 * memory that a restart would lose.
 *
 * The driver's operations live one concern a file: this one holds the
 * table and start-up (checking the host, claiming the state dir);
 * local_create.c launches a sandbox, local_destroy.c stops it and removes
 * what it left, local_state.c reads the host state back (alive, list,
 * diagnose), local_ready.c, local_socket.c and checkpoint_local.c do the
 * rest (local.h lists them all).
 */
#include "cgroup.h"
#include "driver.h"
#include "local.h"
#include "local_driver.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <dirent.h>
#include <unistd.h>

#include "err.h"
#include "log.h"
#include "xalloc.h"

#define STATE_MARKER ".orchard-state"

/* Can uid/gid reach (x on every parent) and use (want bits) path? bwrap
 * runs as the sandbox uid, so it must be able to open its bind sources. */
static int reachable_by(const char *path, uid_t uid, gid_t gid, mode_t want_bits)
{
	char buf[PATH_MAX];
	struct stat st;
	size_t i, n = strlen(path);
	mode_t need;

	if (uid == 0)
		return 1;
	if (n >= sizeof(buf))
		return 0;
	memcpy(buf, path, n + 1);
	for (i = 1; i <= n; i++) {
		if (buf[i] != '/' && buf[i] != '\0')
			continue;
		buf[i] = '\0';
		need = i == n ? want_bits : 1;  /* x for parents */
		if (stat(buf, &st) < 0)
			return 0;
		if (st.st_uid == uid)
			need <<= 6;
		else if (st.st_gid == gid)
			need <<= 3;
		if ((st.st_mode & need) != need)
			return 0;
		buf[i] = '/';
		if (i == n)
			break;
	}
	return 1;
}

static int mkdir_p(const char *path, mode_t mode)
{
	char buf[PATH_MAX];
	size_t i, n = strlen(path);

	if (n >= sizeof(buf))
		return -1;
	memcpy(buf, path, n + 1);
	for (i = 1; i < n; i++) {
		if (buf[i] != '/')
			continue;
		buf[i] = '\0';
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			return -1;
		buf[i] = '/';
	}
	if (mkdir(buf, mode) < 0 && errno != EEXIST)
		return -1;
	return 0;
}

/*
 * Everything with a DNS-label name in the state dir counts as a sandbox
 * and may be deleted as an orphan, so never adopt a directory that holds
 * something else: it must be empty or carry our marker.
 */
static int claim_state_dir(int state_fd, const char *path)
{
	struct dirent *de;
	int fd, empty = 1, mfd;
	DIR *dir;

	if (faccessat(state_fd, STATE_MARKER, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
		return 0;
	if ((fd = dup(state_fd)) < 0 || !(dir = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return ORC_ERROR;
	}
	while ((de = readdir(dir)) != NULL)
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			empty = 0;
	closedir(dir);
	if (!empty) {
		orc_logf(ORC_LOG_ERROR, "state dir \"%s\" is not empty and has no %s marker; "
			 "refusing to manage (and possibly delete) what is in it", path, STATE_MARKER);
		return ORC_EINVALID;
	}
	mfd = openat(state_fd, STATE_MARKER, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (mfd < 0) {
		orc_log(ORC_LOG_ERROR, "cannot write the state dir marker", "path", path,
			"error", strerror(errno), NULL);
		return ORC_ERROR;
	}
	close(mfd);
	return 0;
}

/* The sandbox-tools bundle: used when its bin/ is there (a configured
 * one that is not is an error; the default one is simply off). */
static int tools_init(struct local *l, const struct ctl_config *cfg)
{
	char *bin;
	struct stat st;
	int ok;

	if (!cfg->tools_dir)
		return 0;
	bin = xasprintf("%s/bin", cfg->tools_dir);
	ok = !stat(bin, &st) && S_ISDIR(st.st_mode);
	free(bin);
	if (!ok) {
		if (cfg->tools_explicit) {
			orc_logf(ORC_LOG_ERROR, "sandbox-tools bundle \"%s\" has no bin/: build it with "
				 "make tools, or set ORCHARD_SANDBOX_TOOLS=off", cfg->tools_dir);
			return ORC_ERROR;
		}
		orc_log(ORC_LOG_INFO, "no sandbox-tools bundle (make tools); sandboxes get none",
			"path", cfg->tools_dir, NULL);
		return 0;
	}
	if (!reachable_by(cfg->tools_dir, cfg->sandbox_uid, cfg->sandbox_gid, 5)) {
		orc_logf(cfg->tools_explicit ? ORC_LOG_ERROR : ORC_LOG_WARN, "sandbox-tools bundle "
			 "\"%s\" is not readable by the sandbox uid %u%s", cfg->tools_dir,
			 (unsigned)cfg->sandbox_uid, cfg->tools_explicit ? "" : "; sandboxes get none");
		return cfg->tools_explicit ? ORC_ERROR : 0;
	}
	l->tools = cfg->tools_dir;
	ctl_bwrap_tools_profile(&l->tools_profile, l->tools);
	orc_log(ORC_LOG_INFO, "sandbox-tools bundle in every sandbox", "path", l->tools,
		"mount", cfg->tools_mount, NULL);
	return 0;
}

static int local_init(struct ctl_driver *d)
{
	const struct ctl_config *cfg = d->cfg;
	struct local *l = xcalloc(1, sizeof(*l));
	size_t max_state = SUN_PATH_MAX - strlen("/" LINK_DIR "/") - LINK_KEY_LEN;
	int err = 0;

	l->state_fd = -1;
	l->seccomp_fd = -1;
	l->ino_fd = -1;
	l->wake[0] = l->wake[1] = -1;
	d->priv = l;
	if (mkdir_p(cfg->state_dir, 0711) < 0 || chmod(cfg->state_dir, 0711) < 0) {
		orc_log(ORC_LOG_ERROR, "cannot create the state dir", "path", cfg->state_dir,
			"error", strerror(errno), NULL);
		err = ORC_ERROR;
		goto done;
	}
	l->state_fd = open(cfg->state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (l->state_fd < 0) {
		orc_log(ORC_LOG_ERROR, "cannot open the state dir", "path", cfg->state_dir,
			"error", strerror(errno), NULL);
		err = ORC_ERROR;
		goto done;
	}
	if ((err = claim_state_dir(l->state_fd, cfg->state_dir)) < 0)
		goto done;
	if ((err = local_checkpoint_backend(l, cfg)) < 0)
		goto done;
	local_disk_init(l);
	if (access(cfg->bwrap_bin, X_OK) < 0) {
		orc_log(ORC_LOG_ERROR, "bubblewrap not found (apt-get install bubblewrap)",
			"path", cfg->bwrap_bin, NULL);
		err = ORC_ERROR;
		goto done;
	}
	if (access(cfg->watchdog_bin, X_OK) < 0) {
		orc_log(ORC_LOG_ERROR, "orchard-watchdog not found: it is every sandbox's first "
			"process (make builds it beside orchard-controller; ORCHARD_WATCHDOG_BIN)",
			"path", cfg->watchdog_bin, NULL);
		err = ORC_ERROR;
		goto done;
	}
	if ((err = local_uid_init(d)) < 0)
		goto done;
	if (local_job_wake_open(l) < 0) {
		orc_log(ORC_LOG_ERROR, "pipe() for the helpers' wake-ups failed", "error",
			strerror(errno), NULL);
		err = ORC_ERROR;
		goto done;
	}
	l->ino_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (l->ino_fd < 0)
		orc_log(ORC_LOG_WARN, "inotify unavailable; readiness is found by polling",
			"error", strerror(errno), NULL);
	if (!reachable_by(cfg->state_dir, cfg->sandbox_uid, cfg->sandbox_gid, 1)) {
		orc_logf(ORC_LOG_ERROR, "state dir \"%s\" is not reachable by the sandbox uid %u "
			 "(every parent directory needs o+x)", cfg->state_dir, (unsigned)cfg->sandbox_uid);
		err = ORC_ERROR;
		goto done;
	}
	if (access(cfg->agent_bin, X_OK) < 0)
		orc_log(ORC_LOG_WARN, "agent binary not found yet; launches fail until it exists",
			"path", cfg->agent_bin, NULL);
	else if (!reachable_by(cfg->agent_bin, cfg->sandbox_uid, cfg->sandbox_gid, 5))
		orc_logf(ORC_LOG_WARN, "agent binary \"%s\" is not readable by the sandbox uid %u",
			 cfg->agent_bin, (unsigned)cfg->sandbox_uid);
	if (strlen(cfg->state_dir) > max_state)
		orc_logf(ORC_LOG_WARN, "state dir is longer than %zu bytes: no agent socket path "
			 "fits in a unix socket address; every launch will fail", max_state);
	ctl_bwrap_host_layout(&l->layout);
	if ((err = tools_init(l, cfg)) < 0)
		goto done;
	/* Without the filter a sandbox would have more than documented. */
	if ((err = ctl_seccomp_build(&l->seccomp_fd)) < 0)
		goto done;
	{
		/* One base per state dir, so controllers of different state
		 * dirs on one host never touch each other's cgroups. */
		uint32_t h = 2166136261u;
		char tag[16];
		for (const char *p = cfg->state_dir; *p; p++)
			h = (h ^ (unsigned char)*p) * 16777619u;
		snprintf(tag, sizeof(tag), "%08x", h);
		ctl_cgroups_probe(&l->cg, tag);
	}
done:
	return err;
}

static void local_release(struct ctl_driver *d)
{
	struct local *l = L(d);

	if (!l)
		return;
	if (l->state_fd >= 0)
		close(l->state_fd);
	if (l->seccomp_fd >= 0)
		close(l->seccomp_fd);
	for (size_t i = 0; i < l->nwatches; i++)
		free(l->watches[i].id);
	free(l->watches);
	if (l->ino_fd >= 0)
		close(l->ino_fd);
	ctl_strv_release(&l->layout);
	ctl_strv_release(&l->tools_profile);
	ctl_cgroups_release(&l->cg);
	local_job_release(l);
	free(l);
	d->priv = NULL;
}

const struct ctl_driver_ops ctl_driver_local = {
	.name = "local",
	.init = local_init,
	.release = local_release,
	.create = local_create,
	.destroy = local_destroy,
	.alive = local_alive,
	.list_owned = local_list_owned,
	.agent_address = local_agent_address,
	.diagnose = local_diagnose,
	.events_fd = local_events_fd,
	.drain = local_drain,
	.unwatch = local_unwatch,
	.seal = local_seal,
	.jobs_fd = local_jobs_fd,
	.jobs_drain = local_jobs_drain,
	.checkpoint = local_checkpoint,
	.checkpoint_bytes = local_checkpoint_bytes,
	.checkpoint_remove = local_checkpoint_remove,
	.checkpoint_list = local_checkpoint_list,
	.pause = local_pause,
	.capacity = ctl_capacity_host,
};
