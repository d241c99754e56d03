/*
 * Checkpoints, forks and pause/resume under the local driver
 * (docs/checkpoints.md).
 *
 * A checkpoint is a copy of a sandbox's writable state in
 * $STATE/.checkpoints/<ckpt>/ (".checkpoints" is not a DNS label, so it is
 * never taken for a sandbox):
 *
 *   workspace/, tmp/   the sandbox's /workspace and /tmp
 *   upper/             an imported image's private overlay layer, or
 *   root/              an imported image's copied root (no overlayfs)
 *
 * It is written to <ckpt>.partial and renamed into place when complete,
 * so a crash mid-copy leaves only a .partial, which the next attempt or
 * the sweep removes. The copy is `cp -a --reflink=auto` (hard links,
 * symlinks, modes, owners, times and empty dirs kept; blocks shared where
 * the filesystem can), taken while the sandbox's processes are frozen
 * with the cgroup freezer, so no write of theirs is half done in it.
 * A fork copies the checkpoint back into the new sandbox's directories
 * before its first process starts.
 *
 * The btrfs backend (ORCHARD_CHECKPOINT_BACKEND=btrfs, or auto on btrfs):
 * each sandbox dir is a subvolume, a checkpoint is a read-only snapshot of
 * it made under the freezer unless nothing but the agent runs (atomic, so
 * no .partial; CTL_CHECKPOINT_TAKEN, then the next call finishes it, as it
 * adopts a snapshot a killed controller left), and a fork's dir is a
 * writable snapshot of the checkpoint from which everything but the parts
 * above is removed before the sandbox is prepared. Blocks are shared until
 * written; the snapshot also holds the old run/ and agent.log, which no
 * fork keeps. A sandbox dir that is not a subvolume (made before the
 * switch) is copied as above, and a copied checkpoint is restored by copy.
 */
#include "local.h"
#include "local_driver.h"

#include "btrfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"
#include "err.h"
#include "log.h"
#include "rmtree.h"
#include "strutil.h"
#include "xalloc.h"

#define CKPT_DIR ".checkpoints"
#define PARTIAL ".partial"
#define FREEZE_TIMEOUT_MS 10000
#define CP_BIN "/bin/cp"
/* In a sandbox's dir: it was frozen by a checkpoint, not by a pause. */
#define FROZEN_MARK "checkpoint-frozen"
/* A sandbox at rest: the watchdog's session (orchard-watchdog, bwrap,
 * slirp4netns) and the agent's (bwrap --as-pid-1: controller/bwrap.c).
 * The agent starts every command in a session of its own (agent/), so a
 * third one is a command's. */
#define IDLE_SESSIONS 2

static const char *const cp_args[] = { "cp", "-a", "--reflink=auto", "--" };

extern char **environ;

/* The parts of a sandbox dir that are its writable state. "root" only
 * counts when there is no "upper" (then it is a copy, not a mount). */
static const char *const parts[] = { "workspace", "tmp", "upper", "root" };

static int ckpt_dir_fd(struct local *l)
{
	int fd;

	if (mkdirat(l->state_fd, CKPT_DIR, 0700) < 0 && errno != EEXIST)
		return -1;
	fd = openat(l->state_fd, CKPT_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return fd;
}

/* cp -a --reflink=auto -- src dst */
static void cp_argv(struct ctl_strv *out, const char *src, const char *dst)
{
	size_t i;

	for (i = 0; i < sizeof(cp_args) / sizeof(*cp_args); i++)
		ctl_strv_push(out, cp_args[i]);
	ctl_strv_push(out, src);
	ctl_strv_push(out, dst);
}

/* Run cp -a --reflink=auto src dst; 0 when it exited 0. in_helper: in a
 * launch helper (local_job.c), where the cp must die with it. */
static int run_cp(char **why, const char *src, const char *dst, int in_helper)
{
	struct ctl_strv argv = CTL_STRV_INIT;
	pid_t pid;
	int rc, status;

	cp_argv(&argv, src, dst);
	if (in_helper) {
		rc = local_job_run_cps(&argv.v, 1);
		ctl_strv_release(&argv);
		if (rc != 0)
			*why = xasprintf("copying \"%s\" failed (see the controller's log)", src);
		return rc != 0 ? ORC_ERROR : 0;
	}
	rc = posix_spawn(&pid, CP_BIN, NULL, NULL, argv.v, environ);
	ctl_strv_release(&argv);
	if (rc != 0) {
		*why = xasprintf("starting %s failed: %s", CP_BIN, strerror(rc));
		return ORC_ERROR;
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR) {
			*why = xasprintf("waiting for %s failed: %s", CP_BIN, strerror(errno));
			return ORC_ERROR;
		}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		*why = xasprintf("copying \"%s\" failed (cp exit status %d; see the controller's log)",
				 src, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
		return ORC_ERROR;
	}
	return 0;
}

static int64_t tree_bytes;

static int add_bytes(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)path;
	(void)ftw;
	if (type == FTW_F && S_ISREG(st->st_mode))
		tree_bytes += st->st_size;
	return 0;
}

/* Apparent size of the regular files under path (the controller is one
 * thread, so a static accumulator is safe). */
static int64_t bytes_of(const char *path)
{
	tree_bytes = 0;
	nftw(path, add_bytes, 32, FTW_PHYS);
	return tree_bytes;
}

static int exists_at(int dfd, const char *name)
{
	return faccessat(dfd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

/* The crash tests' window (ORCHARD_TEST_CHECKPOINT_DELAY_MS): the work is
 * on disk, the database does not know yet. */
static void test_delay(const struct ctl_config *cfg, const char *what, const char *id)
{
	struct timespec ts;

	if (cfg->test_checkpoint_delay_ms <= 0)
		return;
	orc_log(ORC_LOG_INFO, "test delay (ORCHARD_TEST_CHECKPOINT_DELAY_MS)", "in", what,
		"id", id, NULL);
	ts.tv_sec = cfg->test_checkpoint_delay_ms / 1000;
	ts.tv_nsec = (cfg->test_checkpoint_delay_ms % 1000) * 1000000;
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* 1 when name is one of a sandbox dir's parts (dfd: that dir). */
static int is_part(int dfd, const char *name)
{
	size_t i;

	if (!strcmp(name, "root"))
		return !exists_at(dfd, "upper");
	for (i = 0; i < sizeof(parts) / sizeof(*parts); i++)
		if (!strcmp(name, parts[i]))
			return 1;
	return 0;
}

/* Apparent size of the parts of checkpoint dir path. */
static int64_t parts_bytes(const char *path)
{
	int64_t n = 0;
	int dfd;
	size_t i;

	if ((dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return 0;
	for (i = 0; i < sizeof(parts) / sizeof(*parts); i++) {
		char *p;
		if (!exists_at(dfd, parts[i]) || !is_part(dfd, parts[i]))
			continue;
		p = xasprintf("%s/%s", path, parts[i]);
		n += bytes_of(p);
		free(p);
	}
	close(dfd);
	return n;
}

int local_checkpoint_backend(struct local *l, const struct ctl_config *cfg)
{
	int on = ctl_btrfs_on(l->state_fd);

	if (!strcmp(cfg->checkpoint_backend, "btrfs") && !on) {
		orc_log(ORC_LOG_ERROR, "ORCHARD_CHECKPOINT_BACKEND=btrfs, but the state dir is not "
			"on btrfs", "path", cfg->state_dir, NULL);
		return ORC_EINVALID;
	}
	l->btrfs = on && strcmp(cfg->checkpoint_backend, "copy");
	orc_log(ORC_LOG_INFO, "checkpoint backend", "backend", l->btrfs ? "btrfs" : "copy", NULL);
	return 0;
}

/* Keep only the parts in the fresh snapshot dir name. */
static int prune_to_parts(int parent_fd, const char *name)
{
	struct dirent *de;
	int dfd, err = 0;
	DIR *dir;

	if ((dfd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return ORC_ERROR;
	if (!(dir = fdopendir(dfd))) {
		close(dfd);
		return ORC_ERROR;
	}
	while ((de = readdir(dir)) != NULL) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") || is_part(dfd, de->d_name))
			continue;
		if (ctl_btrfs_remove(dfd, de->d_name) < 0)
			err = ORC_ERROR;
	}
	closedir(dir);
	return err;
}

/* 1 when checkpoint ckpt is restored by snapshot under this backend. */
static int snapshot_restorable(struct local *l, const char *ckpt)
{
	int cfd, yes;

	if (!l->btrfs || (cfd = ckpt_dir_fd(l)) < 0)
		return 0;
	yes = ctl_btrfs_is_subvol(cfd, ckpt);
	close(cfd);
	return yes;
}

int local_sandbox_dir_make(int *restored, struct ctl_driver *d, const struct ctl_sandbox *sb)
{
	struct local *l = L(d);
	int cfd, err, saved;

	*restored = 0;
	if (!l->btrfs)
		return mkdirat(l->state_fd, sb->id, 0711) < 0 ? ORC_ERROR : 0;
	if (!sb->restore || !orc_is_dns_label(sb->restore) || !snapshot_restorable(l, sb->restore))
		return ctl_btrfs_subvol_create(l->state_fd, sb->id);
	if ((cfd = ckpt_dir_fd(l)) < 0)
		return ORC_ERROR;
	err = ctl_btrfs_snapshot(cfd, sb->restore, l->state_fd, sb->id, 0);
	saved = errno;
	close(cfd);
	if (err < 0) {
		errno = saved;
		return err;
	}
	if ((err = prune_to_parts(l->state_fd, sb->id)) < 0)
		return err;
	*restored = 1;
	return 0;
}

/*
 * 1 when nothing runs in sandbox id but its launch chain (IDLE_SESSIONS),
 * so an atomic snapshot needs no freeze: nothing is mid-write. Between
 * steps that is the rule (the step's command ended, the api's step barrier
 * holds the next); a process a command left running makes it 0.
 */
static int idle(struct local *l, const char *id)
{
	int n = ctl_cgroup_nsessions(&l->cg, id, IDLE_SESSIONS);

	return n >= 0 && n <= IDLE_SESSIONS;
}

/* Freeze sandbox id for a copy unless it is paused (frozen by a pause),
 * or, for a snapshot (snap), idle. FROZEN_MARK in its dir says the freeze
 * is ours, so the next controller thaws a sandbox that one killed mid-copy
 * left frozen. */
static int freeze_for_copy(int *froze_out, char **why, struct local *l, const char *id, int snap)
{
	char *mark = xasprintf("%s/" FROZEN_MARK, id);
	int ours = exists_at(l->state_fd, mark), err = 0, fd;

	*froze_out = 0;
	if (ctl_cgroup_frozen(&l->cg, id) && !ours)
		goto done;
	if (snap && !ours && idle(l, id))
		goto done;
	if ((fd = openat(l->state_fd, mark, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600)) >= 0)
		close(fd);
	if ((err = ctl_cgroup_freeze(&l->cg, id, 1, FREEZE_TIMEOUT_MS)) == 0) {
		*froze_out = 1;
		goto done;
	}
	unlinkat(l->state_fd, mark, 0);
	if (err != ORC_EUNAVAIL) {
		*why = xstrdup("the sandbox's processes could not be frozen for the copy");
		goto done;
	}
	orc_log(ORC_LOG_WARN, "no cgroup freezer for this sandbox: checkpoint taken without "
		"freezing it", "sandbox_id", id, NULL);
	err = 0;
done:
	free(mark);
	return err;
}

static void thaw_after_copy(struct local *l, const char *id, int froze)
{
	char *mark;

	if (!froze)
		return;
	if (ctl_cgroup_freeze(&l->cg, id, 0, FREEZE_TIMEOUT_MS) < 0) {
		orc_log(ORC_LOG_ERROR, "thawing the sandbox after its checkpoint failed",
			"sandbox_id", id, NULL);
		return;
	}
	mark = xasprintf("%s/" FROZEN_MARK, id);
	unlinkat(l->state_fd, mark, 0);
	free(mark);
}

/* cp -a --reflink=auto -- <sbdir>/<part> <dst>/<part> for each part. */
static size_t copy_argvs(struct ctl_strv *out, size_t max, struct local *l, const char *id,
			 const char *sbdir, const char *dst)
{
	size_t i, n = 0;
	int sfd;

	if ((sfd = openat(l->state_fd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return 0;
	for (i = 0; i < sizeof(parts) / sizeof(*parts) && n < max; i++) {
		if (!exists_at(sfd, parts[i]) || !is_part(sfd, parts[i]))
			continue;
		char *src = xasprintf("%s/%s", sbdir, parts[i]), *to = xasprintf("%s/%s", dst, parts[i]);
		cp_argv(&out[n++], src, to);
		free(src);
		free(to);
	}
	close(sfd);
	return n;
}

/* The copy is complete (or the snapshot made): move it into place. */
static int finish(int64_t *bytes_out, char **why, struct ctl_driver *d, int cfd, const char *ckpt,
		  int snap)
{
	char *pname = xasprintf("%s" PARTIAL, ckpt);

	if (snap)
		test_delay(d->cfg, "checkpoint", ckpt);   /* a copy's is in its helper */
	if (!snap && renameat(cfd, pname, cfd, ckpt) < 0) {
		*why = xasprintf("cannot move the checkpoint into place: %s", strerror(errno));
		orc_tree_remove_at(cfd, pname);
		free(pname);
		return ORC_ERROR;
	}
	free(pname);
	/* O(files), unlike a snapshot: counted after the checkpoint is
	 * ready, in a helper (local_checkpoint_bytes) */
	*bytes_out = CTL_BYTES_UNCOUNTED;
	return 0;
}

/* A running copy of ckpt: its result, or CTL_CHECKPOINT_RUNNING. */
static int poll_copy(int64_t *bytes_out, char **why, struct ctl_driver *d, int cfd,
		     const char *id, const char *ckpt)
{
	struct orc_buf out = ORC_BUF_INIT;
	char *pname;
	int froze = 0, rc = local_job_poll(L(d), &out, &froze, LOCAL_JOB_COPY, ckpt);

	if (rc == 1)
		return CTL_CHECKPOINT_RUNNING;
	thaw_after_copy(L(d), id, froze);
	/* one byte: 0 when every cp exited 0 (copy_helper) */
	rc = rc == 0 && out.len == 1 && out.ptr[0] == 0 ? 0 : ORC_ERROR;
	orc_buf_release(&out);
	if (rc == 0)
		return finish(bytes_out, why, d, cfd, ckpt, 0);
	*why = xstrdup("copying the sandbox's state failed (cp; see the controller's log)");
	pname = xasprintf("%s" PARTIAL, ckpt);
	orc_tree_remove_at(cfd, pname);
	free(pname);
	return ORC_ERROR;
}

struct copy_job {
	char ***argvs;
	size_t n;
	int64_t delay_ms;
};

/* In the helper (local_job.c): the cp commands, then one byte, 0 when
 * all of them succeeded. Only async-signal-safe calls. */
static void copy_helper(int wfd, void *arg)
{
	const struct copy_job *job = arg;
	struct timespec ts = { job->delay_ms / 1000, (job->delay_ms % 1000) * 1000000 };
	int failed = local_job_run_cps(job->argvs, job->n);
	char rc = failed ? 1 : 0;

	/* ORCHARD_TEST_CHECKPOINT_DELAY_MS: copied, not yet answered */
	while (job->delay_ms > 0 && nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
	local_job_write(wfd, &rc, 1);
}

/* Start taking ckpt of sandbox id: a snapshot (done at once) or a copy
 * (CTL_CHECKPOINT_RUNNING). */
static int start(int64_t *bytes_out, char **why, struct ctl_driver *d, int cfd, const char *id,
		 const char *ckpt)
{
	struct local *l = L(d);
	struct ctl_strv argvs[sizeof(parts) / sizeof(*parts)];
	char *pname = xasprintf("%s" PARTIAL, ckpt), *sbdir = NULL, *partial = NULL;
	char **vv[sizeof(parts) / sizeof(*parts)];
	struct copy_job job;
	int err, froze = 0, snap = l->btrfs && ctl_btrfs_is_subvol(l->state_fd, id);
	size_t i, n = 0;

	memset(argvs, 0, sizeof(argvs));
	/* Snapshotted already (CTL_CHECKPOINT_TAKEN, or by a controller that
	 * died before the row said so): a snapshot is whole once it exists. */
	if (snap && ctl_btrfs_is_subvol(cfd, ckpt)) {
		err = finish(bytes_out, why, d, cfd, ckpt, 1);
		goto done;
	}
	/* Leftovers of an attempt that crashed. */
	if (ctl_btrfs_remove(cfd, pname) < 0 || ctl_btrfs_remove(cfd, ckpt) < 0) {
		*why = xstrdup("cannot remove an earlier attempt's partial copy");
		err = ORC_ERROR;
		goto done;
	}
	if (!snap && mkdirat(cfd, pname, 0700) < 0) {
		*why = xasprintf("cannot create the checkpoint's directory: %s", strerror(errno));
		err = ORC_ERROR;
		goto done;
	}
	if ((err = freeze_for_copy(&froze, why, l, id, snap)) < 0)
		goto fail;
	if (snap) {
		char ms[24];
		int64_t t0 = orc_mono_ms();
		if ((err = ctl_btrfs_snapshot(l->state_fd, id, cfd, ckpt, 1)) < 0)
			*why = xasprintf("snapshotting the sandbox's subvolume failed: %s",
					 strerror(errno));
		thaw_after_copy(l, id, froze);
		snprintf(ms, sizeof(ms), "%lld", (long long)(orc_mono_ms() - t0));
		orc_log(ORC_LOG_DEBUG, "checkpoint snapshot taken", "checkpoint_id", ckpt,
			"snapshot_ms", ms, ORC_LOG_BOOL("frozen", froze), NULL);
		if (err == 0)
			err = CTL_CHECKPOINT_TAKEN;   /* finished on the next call */
		goto done;
	}
	sbdir = xasprintf("%s/%s", d->cfg->state_dir, id);
	partial = xasprintf("%s/" CKPT_DIR "/%s", d->cfg->state_dir, pname);
	n = copy_argvs(argvs, sizeof(parts) / sizeof(*parts), l, id, sbdir, partial);
	for (i = 0; i < n; i++)
		vv[i] = argvs[i].v;
	if (d->cfg->test_checkpoint_delay_ms > 0)
		orc_log(ORC_LOG_INFO, "test delay (ORCHARD_TEST_CHECKPOINT_DELAY_MS)", "in", "checkpoint",
			"id", ckpt, NULL);
	job.argvs = vv;
	job.n = n;
	job.delay_ms = d->cfg->test_checkpoint_delay_ms;
	if ((err = local_job_start(l, why, LOCAL_JOB_COPY, ckpt, id, froze, copy_helper, &job)) < 0) {
		thaw_after_copy(l, id, froze);
		goto fail;
	}
	err = CTL_CHECKPOINT_RUNNING;
	goto done;
fail:
	orc_tree_remove_at(cfd, pname);
done:
	for (i = 0; i < n; i++)
		ctl_strv_release(&argvs[i]);
	free(pname);
	free(sbdir);
	free(partial);
	return err;
}

int local_checkpoint(struct ctl_driver *d, int64_t *bytes_out, char **why, const char *id,
		     const char *ckpt)
{
	int cfd, err;

	if (!orc_is_dns_label(id) || !orc_is_dns_label(ckpt)) {
		*why = xstrdup("invalid sandbox or checkpoint id");
		return ORC_EINVALID;
	}
	if ((cfd = ckpt_dir_fd(L(d))) < 0) {
		*why = xasprintf("cannot create the checkpoint store: %s", strerror(errno));
		return ORC_ERROR;
	}
	switch (local_job_busy(L(d), LOCAL_JOB_COPY, ckpt, id)) {
	case 1:
		err = poll_copy(bytes_out, why, d, cfd, id, ckpt);
		break;
	case 2:
		/* one copy per sandbox at a time: the freeze is shared */
		err = CTL_CHECKPOINT_RUNNING;
		break;
	default:
		err = start(bytes_out, why, d, cfd, id, ckpt);
	}
	close(cfd);
	return err;
}

int local_checkpoint_remove(struct ctl_driver *d, const char *ckpt)
{
	char *pname, *sandbox;
	int cfd, err = 0, froze;

	if (!orc_is_dns_label(ckpt))
		return ORC_EINVALID;
	/* Deleted mid-copy (or its sandbox went): stop the copy first. */
	if ((sandbox = local_job_cancel(L(d), &froze, LOCAL_JOB_COPY, ckpt)) != NULL) {
		thaw_after_copy(L(d), sandbox, froze);
		free(sandbox);
	}
	free(local_job_cancel(L(d), &froze, LOCAL_JOB_COUNT, ckpt));
	if ((cfd = ckpt_dir_fd(L(d))) < 0)
		return ORC_ERROR;
	pname = xasprintf("%s" PARTIAL, ckpt);
	if (ctl_btrfs_remove(cfd, ckpt) < 0 || ctl_btrfs_remove(cfd, pname) < 0)
		err = ORC_ERROR;
	free(pname);
	close(cfd);
	return err;
}

int local_checkpoint_list(struct ctl_driver *d, char ***out, size_t *nout)
{
	char **v = NULL, *name;
	size_t n = 0, alloc = 0, len;
	struct dirent *de;
	DIR *dir;
	int cfd;

	if ((cfd = ckpt_dir_fd(L(d))) < 0 || !(dir = fdopendir(cfd))) {
		if (cfd >= 0)
			close(cfd);
		return ORC_ERROR;
	}
	while ((de = readdir(dir)) != NULL) {
		name = xstrdup(de->d_name);
		len = strlen(name);
		if (len > strlen(PARTIAL) && !strcmp(name + len - strlen(PARTIAL), PARTIAL))
			name[len - strlen(PARTIAL)] = '\0';
		if (!orc_is_dns_label(name)) {
			free(name);
			continue;
		}
		if (n == alloc) {
			alloc = alloc ? orc_mul_size(alloc, 2) : 16;
			v = xrealloc(v, orc_mul_size(alloc, sizeof(*v)));
		}
		v[n++] = name;
	}
	closedir(dir);
	*out = v;
	*nout = n;
	return 0;
}

int local_pause(struct ctl_driver *d, const char *id, int paused)
{
	if (!orc_is_dns_label(id))
		return ORC_EINVALID;
	return ctl_cgroup_freeze(&L(d)->cg, id, paused, FREEZE_TIMEOUT_MS);
}

int local_checkpoint_restore(struct ctl_driver *d, struct ctl_sandbox *sb, int in_helper)
{
	struct local *l = L(d);
	char *src = NULL, *dst = NULL;
	int cfd, kfd = -1, err = 0;
	size_t i;

	if (!orc_is_dns_label(sb->restore)) {
		sb->error = xstrdup("invalid checkpoint id");
		return ORC_EINVALID;
	}
	if (snapshot_restorable(l, sb->restore)) {
		test_delay(d->cfg, "fork", sb->id);
		return 0;   /* local_sandbox_dir_make() did */
	}
	if ((cfd = ckpt_dir_fd(l)) < 0 ||
	    (kfd = openat(cfd, sb->restore, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		sb->error = xasprintf("checkpoint %s is not available on this host", sb->restore);
		err = ORC_EINVALID;
		goto done;
	}
	for (i = 0; i < sizeof(parts) / sizeof(*parts) && !err; i++) {
		if (!exists_at(kfd, parts[i]))
			continue;
		free(src);
		free(dst);
		/* "dir/." copies the contents (and the dir's own mode, owner
		 * and times) into the directory create() made. */
		src = xasprintf("%s/" CKPT_DIR "/%s/%s/.", d->cfg->state_dir, sb->restore, parts[i]);
		dst = xasprintf("%s/%s/%s", d->cfg->state_dir, sb->id, parts[i]);
		if (mkdir(dst, 0755) < 0 && errno != EEXIST) {
			sb->error = xasprintf("cannot create \"%s\": %s", parts[i], strerror(errno));
			err = ORC_ERROR;
			break;
		}
		err = run_cp(&sb->error, src, dst, in_helper);
	}
	if (!err)
		test_delay(d->cfg, "fork", sb->id);
done:
	if (kfd >= 0)
		close(kfd);
	if (cfd >= 0)
		close(cfd);
	free(src);
	free(dst);
	return err;
}

struct count_job {
	struct ctl_driver *d;
	const char *ckpt;
	const char *path;
};

/* In the helper: the apparent size of the checkpoint's parts, as text. */
static void count_helper(int wfd, void *arg)
{
	const struct count_job *job = arg;
	char num[24], ms[24];
	int64_t t0 = orc_mono_ms(), n = parts_bytes(job->path);

	/* bench/checkpoint.py reports it apart */
	snprintf(ms, sizeof(ms), "%lld", (long long)(orc_mono_ms() - t0));
	orc_log(ORC_LOG_DEBUG, "checkpoint bytes counted", "checkpoint_id", job->ckpt, "count_ms", ms,
		NULL);
	/* the crash tests' window: counted, not yet recorded */
	test_delay(job->d->cfg, "count", job->ckpt);
	snprintf(num, sizeof(num), "%lld", (long long)n);
	local_job_write(wfd, num, strlen(num));
}

int local_checkpoint_bytes(struct ctl_driver *d, int64_t *bytes_out, const char *ckpt)
{
	struct orc_buf out = ORC_BUF_INIT;
	struct count_job job = { d, ckpt, NULL };
	char *why = NULL;
	int64_t n;
	int err, froze;

	if (!orc_is_dns_label(ckpt))
		return ORC_EINVALID;
	if (local_job_busy(L(d), LOCAL_JOB_COUNT, ckpt, NULL) != 1) {
		char *path = xasprintf("%s/" CKPT_DIR "/%s", d->cfg->state_dir, ckpt);
		job.path = path;
		err = local_job_start(L(d), &why, LOCAL_JOB_COUNT, ckpt, ckpt, 0, count_helper, &job);
		free(path);
		if (err < 0) {
			orc_log(ORC_LOG_WARN, "counting a checkpoint's bytes failed to start",
				"checkpoint_id", ckpt, "error", why, NULL);
			free(why);
			return err;
		}
		return CTL_CHECKPOINT_RUNNING;
	}
	if ((err = local_job_poll(L(d), &out, &froze, LOCAL_JOB_COUNT, ckpt)) == 1)
		return CTL_CHECKPOINT_RUNNING;
	err = out.ptr && orc_parse_i64(&n, out.ptr, 0, INT64_MAX) == 0 ? 0 : ORC_ERROR;
	if (err == 0)
		*bytes_out = n;
	orc_buf_release(&out);
	return err;
}
