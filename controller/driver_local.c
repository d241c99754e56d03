/*
 * The local driver: each sandbox is a bubblewrap sandbox running
 * orchard-agent, with its host state in $ORCHARD_STATE_DIR/<id>/:
 *
 *   <id>/            root, 0711
 *     handle         "<pid>:<starttime>" of its orchard-watchdog (root, 0600)
 *     cgroup         the sandbox's cgroup directories, one per line (root, 0600)
 *     agent.log      the agent's (and bwrap's) stdout and stderr
 *     run/           sandbox uid, 0700: token (0600), agent.sock  -> /run/orchard
 *     workspace/     sandbox uid, 0700                            -> /workspace
 *     tmp/           sandbox uid, 0700                            -> /tmp
 *     root/          an imported image's root: overlayfs (or a copy)  -> /
 *     upper/, work/  the overlay's private writable layer (image.c)
 *
 * The sandbox is found again after a controller restart from the handle
 * (in the database row and in <id>/handle) and /proc; nothing is kept in
 * memory that a restart would lose.
 */
#include "btrfs.h"
#include "cgroup.h"
#include "driver.h"
#include "image.h"
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
#include <sys/un.h>
#include <dirent.h>
#include <unistd.h>

#include "buf.h"
#include "err.h"
#include "log.h"
#include "rmtree.h"
#include "strutil.h"
#include "xalloc.h"

#define KILL_TIMEOUT_MS 2000
/* The watchdog fires this long after the TTL, so that a running controller
 * always gets there first and records why. */
#define HARD_DEADLINE_GRACE_S 3
#define STATE_MARKER ".orchard-state"
#define CGROUP_FILE_MAX 4096

static char env_path[] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
static char env_home[] = "HOME=/root";
static char *const bwrap_env[] = { env_path, env_home, NULL };

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
		ctl_cgroups_init(&l->cg, tag);
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
	free(l);
	d->priv = NULL;
}

/* The handle recorded in <id>/handle, if any. */
static int read_handle_file(struct ctl_proc_id *out, struct local *l, const char *id)
{
	char path[128], buf[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/handle", id);
	if ((fd = openat(l->state_fd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return ORC_ENOTFOUND;
	do
		n = read(fd, buf, sizeof(buf) - 1);
	while (n < 0 && errno == EINTR);
	close(fd);
	if (n <= 0)
		return ORC_ENOTFOUND;
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	return ctl_proc_id_parse(out, buf);
}

static int write_file_at(int dfd, const char *name, const char *data, mode_t mode,
			 uid_t uid, gid_t gid, int chown_it)
{
	size_t len = strlen(data), off = 0;
	ssize_t w;
	int fd, err = 0;

	fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode);
	if (fd < 0)
		return ORC_ERROR;
	if (chown_it && fchown(fd, uid, gid) < 0)
		err = ORC_ERROR;
	while (!err && off < len) {
		w = write(fd, data + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			err = ORC_ERROR;
			break;
		}
		off += (size_t)w;
	}
	if (close(fd) < 0)
		err = ORC_ERROR;
	return err;
}

/* <id>/ and its subdirectories, the token, and the log (returned open). */
static int prepare_dir(int *log_out, struct ctl_driver *d, const struct ctl_sandbox *sb)
{
	static const struct { const char *name; mode_t mode; } subdirs[] = {
		/* Private to the sandbox uid: <id>/ stays 0711 so nginx reaches
		 * run/agent.sock, so these must close themselves (issue 19). */
		{ "run", 0700 }, { "workspace", 0700 }, { "tmp", 0700 },
	};
	const struct ctl_config *cfg = d->cfg;
	int chown_it = cfg->drop_privileges;
	int dfd = -1, rfd = -1, logfd = -1, err = 0, restored = 0;
	size_t i;

	if (local_sandbox_dir_make(&restored, d, sb) < 0 ||
	    (dfd = openat(L(d)->state_fd, sb->id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		goto fail;
	fchmod(dfd, 0711);
	for (i = 0; i < sizeof(subdirs) / sizeof(*subdirs); i++) {
		if (mkdirat(dfd, subdirs[i].name, subdirs[i].mode) < 0) {
			/* A fork's snapshot brought it, its mode and owner too. */
			if (restored && errno == EEXIST)
				continue;
			goto fail;
		}
		if (fchmodat(dfd, subdirs[i].name, subdirs[i].mode, 0) < 0)
			goto fail;
		if (chown_it && fchownat(dfd, subdirs[i].name, cfg->sandbox_uid, cfg->sandbox_gid,
					 AT_SYMLINK_NOFOLLOW) < 0)
			goto fail;
	}
	if ((rfd = openat(dfd, "run", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		goto fail;
	if (write_file_at(rfd, "token", sb->token, 0600, cfg->sandbox_uid, cfg->sandbox_gid, chown_it) < 0)
		goto fail;
	logfd = openat(dfd, "agent.log", O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0640);
	if (logfd < 0)
		goto fail;
	*log_out = logfd;
	logfd = -1;
	goto done;
fail:
	orc_log(ORC_LOG_ERROR, "preparing the sandbox dir failed", "sandbox_id", sb->id,
		"error", strerror(errno), NULL);
	err = ORC_ERROR;
done:
	if (dfd >= 0)
		close(dfd);
	if (rfd >= 0)
		close(rfd);
	if (logfd >= 0)
		close(logfd);
	return err;
}

static char *local_diagnose(struct ctl_driver *d, const char *id)
{
	char path[128], buf[1024];
	ssize_t n;
	off_t size;
	char *end, *line;
	int fd;

	snprintf(path, sizeof(path), "%s/agent.log", id);
	if ((fd = openat(L(d)->state_fd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return NULL;
	size = lseek(fd, 0, SEEK_END);
	if (size > (off_t)sizeof(buf) - 1)
		lseek(fd, size - (off_t)(sizeof(buf) - 1), SEEK_SET);
	else
		lseek(fd, 0, SEEK_SET);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return NULL;
	buf[n] = '\0';
	/* The last non-empty line, bounded and made printable. */
	end = buf + n;
	while (end > buf && (end[-1] == '\n' || end[-1] == '\r'))
		*--end = '\0';
	line = end;
	while (line > buf && line[-1] != '\n')
		line--;
	if (!*line)
		return NULL;
	for (char *p = line; *p; p++)
		if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f)
			*p = ' ';
	if (!orc_utf8_valid(line, strlen(line)))
		return NULL;
	return xstrndup(line, 300);
}

struct scan_kill {
	const char *id;
	int found;
};

static void scan_kill_fn(const char *id, pid_t pid, void *arg)
{
	struct scan_kill *sk = arg;
	struct ctl_proc_id p;

	if (strcmp(id, sk->id) || ctl_proc_id_of(&p, pid) < 0)
		return;
	sk->found++;
	ctl_proc_id_kill(&p, KILL_TIMEOUT_MS);
}

/* The cgroup dirs recorded in <id>/cgroup, plus where they would be now. */
static void sandbox_cgroups(struct ctl_strv *out, struct local *l, const char *id)
{
	char path[128], buf[CGROUP_FILE_MAX], *line, *save;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/cgroup", id);
	if ((fd = openat(l->state_fd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) >= 0) {
		do
			n = read(fd, buf, sizeof(buf) - 1);
		while (n < 0 && errno == EINTR);
		close(fd);
		if (n > 0) {
			buf[n] = '\0';
			for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
				ctl_strv_push(out, line);
		}
	}
	ctl_cgroup_dirs(out, &l->cg, id);
}

/* Empty (SIGKILL) and remove the sandbox's cgroups. */
static int remove_cgroups(struct local *l, const char *id)
{
	struct ctl_strv dirs = CTL_STRV_INIT;
	size_t i;
	int err = 0;

	sandbox_cgroups(&dirs, l, id);
	for (i = 0; i < dirs.n; i++)
		if (ctl_cgroup_remove(dirs.v[i], id, KILL_TIMEOUT_MS) < 0)
			err = ORC_ERROR;
	ctl_strv_release(&dirs);
	return err;
}

static int local_destroy(struct ctl_driver *d, const char *id, const char *handle)
{
	struct ctl_proc_id row_p, file_p;
	int have_row, have_file, err = 0;

	if (!orc_is_dns_label(id))
		return ORC_EINVALID;
	local_unwatch(d, id);
	/* A paused sandbox: frozen processes do not die of SIGKILL. */
	if (ctl_cgroup_frozen(&L(d)->cg, id))
		ctl_cgroup_freeze(&L(d)->cg, id, 0, KILL_TIMEOUT_MS);
	have_row = handle && ctl_proc_id_parse(&row_p, handle) == 0;
	have_file = read_handle_file(&file_p, L(d), id) == 0;
	if (have_row && ctl_proc_id_kill(&row_p, KILL_TIMEOUT_MS) < 0)
		err = ORC_ETIMEOUT;
	if (have_file && (!have_row || file_p.pid != row_p.pid) &&
	    ctl_proc_id_kill(&file_p, KILL_TIMEOUT_MS) < 0)
		err = ORC_ETIMEOUT;
	if (!have_row && !have_file && !ctl_cgroups_any(&L(d)->cg)) {
		/* Lost track of it (a crash mid-launch) and no cgroup to empty:
		 * look in /proc. */
		struct scan_kill sk = { id, 0 };
		ctl_proc_scan_bwrap(d->cfg->state_dir, scan_kill_fn, &sk);
	}
	/* A killed watchdog is our zombie (spawn.c) until reaped. */
	ctl_spawn_reap();
	if (err < 0) {
		orc_log(ORC_LOG_ERROR, "sandbox did not die after SIGKILL", "sandbox_id", id, NULL);
		return err;
	}
	/* Also kills what is left outside the pid namespace (the watchdog,
	 * bwrap's monitor). Before the dir, which records the cgroups. */
	if (remove_cgroups(L(d), id) < 0)
		return ORC_ERROR;
	ctl_cgroups_tidy(&L(d)->cg);
	local_remove_link(L(d), id);
	{
		/* An imported image's overlay, mounted on the host. */
		char *dir = xasprintf("%s/%s", d->cfg->state_dir, id);
		int uerr = ctl_image_layer_unmount(dir);
		free(dir);
		if (uerr < 0)
			return uerr;
	}
	if (ctl_btrfs_remove(L(d)->state_fd, id) < 0) {
		orc_log(ORC_LOG_ERROR, "removing the sandbox dir failed", "sandbox_id", id, NULL);
		return ORC_ERROR;
	}
	return 0;
}

static int local_alive(struct ctl_driver *d, const char *id, const char *handle)
{
	struct ctl_proc_id p;

	if (handle && ctl_proc_id_parse(&p, handle) == 0)
		return ctl_proc_id_alive(&p);
	if (read_handle_file(&p, L(d), id) == 0)
		return ctl_proc_id_alive(&p);
	return 0;
}

static int check_request(struct ctl_driver *d, struct ctl_sandbox *sb)
{
	size_t max_path = sizeof(((struct sockaddr_un *)0)->sun_path) - 1;

	if (!orc_is_dns_label(sb->id)) {
		sb->error = xstrdup("invalid sandbox id");
		return ORC_EINVALID;
	}
	if (strcmp(sb->image, "host")) {
		int err = ctl_image_check(&sb->error, d->cfg, sb->image);
		if (err < 0)
			return err;
	}
	if (!local_direct_fits(d, sb->id) &&
	    strlen(d->cfg->state_dir) + strlen("/" LINK_DIR "/") + LINK_KEY_LEN > max_path) {
		sb->error = xasprintf("the agent socket path under state dir \"%s\" is longer than "
				      "a unix socket address allows; use a shorter ORCHARD_STATE_DIR",
				      d->cfg->state_dir);
		return ORC_EINVALID;
	}
	if (access(d->cfg->agent_bin, X_OK) < 0) {
		sb->error = xasprintf("agent binary \"%s\" is missing on the host", d->cfg->agent_bin);
		return ORC_ERROR;
	}
	return 0;
}

/* The sandbox's cgroups with its limits, recorded in <id>/cgroup first so
 * that a crash right after still lets destroy find them. */
static int make_cgroups(struct ctl_strv *dirs, struct ctl_driver *d, const struct ctl_sandbox *sb)
{
	struct ctl_cg_limits lim = { sb->cpu_millis, sb->memory_bytes, d->cfg->pids_max };
	struct orc_buf rec = ORC_BUF_INIT;
	struct ctl_strv want = CTL_STRV_INIT;
	size_t i;
	int dfd = -1, err;

	if (!ctl_cgroups_any(&L(d)->cg))
		return 0;
	ctl_cgroup_dirs(&want, &L(d)->cg, sb->id);
	for (i = 0; i < want.n; i++)
		orc_buf_addf(&rec, "%s\n", want.v[i]);
	dfd = openat(L(d)->state_fd, sb->id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0 || (err = write_file_at(dfd, "cgroup", orc_buf_cstr(&rec), 0600, 0, 0, 0)) < 0) {
		err = ORC_ERROR;
		goto done;
	}
	err = ctl_cgroup_create(dirs, &L(d)->cg, sb->id, &lim);
done:
	if (dfd >= 0)
		close(dfd);
	orc_buf_release(&rec);
	ctl_strv_release(&want);
	return err;
}

/* An imported image: the root with its private layer (image.c) and the
 * bundled agent's command. */
static int image_root(struct ctl_driver *d, struct ctl_sandbox *sb, const char *dir,
		      struct ctl_strv *agent_cmd)
{
	int dfd, err;

	if ((err = ctl_image_agent_cmd(agent_cmd, &sb->error, d->cfg)) < 0)
		return err;
	dfd = openat(L(d)->state_fd, sb->id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0) {
		sb->error = xasprintf("cannot open the sandbox dir: %s", strerror(errno));
		return ORC_ERROR;
	}
	err = ctl_image_layer_make(&sb->error, d->cfg, dfd, dir, sb->image);
	close(dfd);
	return err;
}

static int local_create(struct ctl_driver *d, struct ctl_sandbox *sb)
{
	struct ctl_strv argv = CTL_STRV_INIT, cgdirs = CTL_STRV_INIT, procs = CTL_STRV_INIT;
	struct ctl_strv agent_cmd = CTL_STRV_INIT;
	struct ctl_proc_id p;
	struct ctl_spawn sp;
	char handle[48], *why, *dir = NULL;
	int logfd = -1, scfd = -1, err, imported = strcmp(sb->image, "host") != 0;
	pid_t watchdog;

	if ((err = check_request(d, sb)) < 0)
		return err;
	if (read_handle_file(&p, L(d), sb->id) == 0 && ctl_proc_id_alive(&p)) {
		/* Launched by a controller that died before recording it. */
		ctl_proc_id_format(handle, sizeof(handle), &p);
		orc_log(ORC_LOG_INFO, "adopting a running sandbox", "sandbox_id", sb->id,
			"handle", handle, NULL);
		goto out;
	}
	/* Leftovers of an earlier attempt. */
	if (faccessat(L(d)->state_fd, sb->id, F_OK, AT_SYMLINK_NOFOLLOW) == 0 &&
	    (err = local_destroy(d, sb->id, NULL)) < 0) {
		sb->error = xstrdup("could not clean up an earlier attempt");
		return err;
	}
	if ((err = prepare_dir(&logfd, d, sb)) < 0) {
		sb->error = xstrdup("could not prepare the sandbox directory on the host");
		goto fail;
	}
	dir = xasprintf("%s/%s", d->cfg->state_dir, sb->id);
	if (imported && (err = image_root(d, sb, dir, &agent_cmd)) < 0)
		goto fail;
	if (sb->restore && (err = local_checkpoint_restore(d, sb)) < 0)
		goto fail;
	if (!local_direct_fits(d, sb->id) && (err = local_make_link(L(d), sb->id)) < 0) {
		sb->error = xstrdup("could not create the agent socket's short link on the host");
		goto fail;
	}
	if ((err = make_cgroups(&cgdirs, d, sb)) < 0) {
		sb->error = xstrdup("could not create the sandbox's cgroups (resource limits)");
		goto fail;
	}
	for (size_t i = 0; i < cgdirs.n; i++)
		ctl_strv_pushf(&procs, "%s/cgroup.procs", cgdirs.v[i]);
	if ((scfd = ctl_seccomp_open(L(d)->seccomp_fd)) < 0) {
		sb->error = xstrdup("could not open the seccomp filter");
		err = ORC_ERROR;
		goto fail;
	}
	{
		char *root = imported ? xasprintf("%s/root", dir) : NULL;
		struct ctl_bwrap_spec spec = {
			d->cfg->bwrap_bin, &L(d)->layout, sb->id, dir, d->cfg->agent_bin,
			sb->block_network, CTL_SPAWN_SECCOMP_FD,
			root, d->cfg->agent_bundle, &agent_cmd,
			sb->tools ? L(d)->tools : NULL, d->cfg->tools_mount, &L(d)->tools_profile,
			&cgdirs,
		};
		ctl_bwrap_argv(&argv, &spec);
		free(root);
	}
	sp = (struct ctl_spawn){
		d->cfg->watchdog_bin, sb->ttl_left_s > 0 ? sb->ttl_left_s + HARD_DEADLINE_GRACE_S : 1,
		argv.v, bwrap_env, logfd, d->cfg->drop_privileges,
		d->cfg->sandbox_uid, d->cfg->sandbox_gid,
		procs.n ? procs.v : NULL, scfd,
	};
	local_watch_run_dir(L(d), d->cfg->state_dir, sb->id);
	if ((err = ctl_spawn_sandbox(&watchdog, &sp)) < 0) {
		why = local_diagnose(d, sb->id);
		sb->error = xasprintf("launching bubblewrap failed%s%s", why ? ": " : "", why ? why : "");
		free(why);
		goto fail;
	}
	/* The handle names the watchdog: it lives exactly as long as the
	 * sandbox, and killing it kills the sandbox. */
	if ((err = ctl_proc_id_of(&p, watchdog)) < 0) {
		why = local_diagnose(d, sb->id);
		sb->error = xasprintf("the sandbox exited at once%s%s", why ? ": " : "", why ? why : "");
		free(why);
		goto fail;
	}
	ctl_proc_id_format(handle, sizeof(handle), &p);
	{
		int dfd = openat(L(d)->state_fd, sb->id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (dfd < 0 || write_file_at(dfd, "handle", handle, 0600, 0, 0, 0) < 0) {
			if (dfd >= 0)
				close(dfd);
			ctl_proc_id_kill(&p, KILL_TIMEOUT_MS);
			sb->error = xstrdup("could not record the sandbox handle on the host");
			err = ORC_ERROR;
			goto fail;
		}
		close(dfd);
	}
out:
	free(sb->handle);
	sb->handle = xstrdup(handle);
	free(sb->address);
	sb->address = local_agent_address(d, sb->id);
	err = 0;
	goto done;
fail:
	local_destroy(d, sb->id, NULL);
done:
	if (logfd >= 0)
		close(logfd);
	if (scfd >= 0)
		close(scfd);
	ctl_strv_release(&argv);
	ctl_strv_release(&cgdirs);
	ctl_strv_release(&procs);
	ctl_strv_release(&agent_cmd);
	free(dir);
	return err;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

struct id_list {
	char **v;
	size_t n, alloc;
};

static void id_list_add(struct id_list *l, const char *id)
{
	if (l->n == l->alloc) {
		l->alloc = l->alloc ? orc_mul_size(l->alloc, 2) : 32;
		l->v = xrealloc(l->v, orc_mul_size(l->alloc, sizeof(*l->v)));
	}
	l->v[l->n++] = xstrdup(id);
}

static void scan_list_fn(const char *id, pid_t pid, void *arg)
{
	(void)pid;
	id_list_add(arg, id);
}

static void cgroup_list_fn(const char *id, void *arg)
{
	id_list_add(arg, id);
}

static int local_list_owned(struct ctl_driver *d, char ***out, size_t *nout)
{
	struct id_list l = { NULL, 0, 0 };
	struct dirent *de;
	size_t i, j;
	int fd;
	DIR *dir;

	ctl_spawn_reap();
	if ((fd = dup(L(d)->state_fd)) < 0)
		return ORC_ERROR;
	if (!(dir = fdopendir(fd))) {
		close(fd);
		return ORC_ERROR;
	}
	rewinddir(dir);
	while ((de = readdir(dir)) != NULL)
		if (orc_is_dns_label(de->d_name))
			id_list_add(&l, de->d_name);
	closedir(dir);
	/* Every process of a sandbox is in its cgroup, so with cgroups the
	 * cgroup dirs find what lost its host dir; the /proc scan (every
	 * bwrap on the host, costly with thousands) is the fallback. */
	if (ctl_cgroups_any(&L(d)->cg))
		ctl_cgroups_list(&L(d)->cg, cgroup_list_fn, &l);
	else
		ctl_proc_scan_bwrap(d->cfg->state_dir, scan_list_fn, &l);
	/* Sort and drop duplicates (a sandbox has a dir and two processes). */
	if (l.n)
		qsort(l.v, l.n, sizeof(*l.v), cmp_str);
	for (i = 0, j = 0; i < l.n; i++) {
		if (j && !strcmp(l.v[j - 1], l.v[i])) {
			free(l.v[i]);
			continue;
		}
		l.v[j++] = l.v[i];
	}
	*out = l.v;
	*nout = j;
	return 0;
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
	.checkpoint = local_checkpoint,
	.checkpoint_remove = local_checkpoint_remove,
	.checkpoint_list = local_checkpoint_list,
	.pause = local_pause,
	.capacity = ctl_capacity_host,
};
