/*
 * One host uid per sandbox (issue 19 item 8). Per-uid kernel limits
 * (inotify instances and watches, RLIMIT_NPROC, user namespaces, ...) are
 * counted against the host uid that owns a sandbox's user namespace, so
 * sandboxes sharing one uid share those limits across every stack on the
 * host. Each `host` sandbox instead runs as a uid (and the gid of the same
 * number) of its own from [cfg->uid_base, cfg->uid_base + cfg->uid_count).
 *
 * The claims are host-wide, one file per uid in cfg->uid_dir (root,
 * 0700): "<uid>" holding "<state dir>\n<sandbox id>\n", made complete in a
 * temporary file and linked into place (link() fails on an existing name),
 * so two controllers of one host never take the same uid and a crash
 * never leaves a claim nobody can attribute. Nothing is kept in memory:
 * a restarted controller finds a sandbox's uid in its claim. A claim goes
 * when its sandbox is destroyed (local_destroy.c), including by an orphan
 * sweep or `orchard-controller reap`, which see the ids of our claims in
 * list_owned; a claim of a state dir that no longer exists is stale and
 * removed at start-up.
 */
#include "local.h"
#include "local_driver.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"
#include "err.h"
#include "imgstore.h"
#include "io.h"
#include "log.h"
#include "strutil.h"
#include "xalloc.h"

#define CLAIM_MAX 1024          /* a state dir of <= 512 bytes and a DNS label */
#define TMP_PREFIX "tmp."
#define TMP_STALE_S 60

/* The sandbox parts a fork restores, which must become the fork's. */
static const char *const owned_parts[] = { "workspace", "tmp" };

int local_uid_own(const struct ctl_driver *d, const char *image)
{
	return d->cfg->drop_privileges && d->cfg->uid_count > 0 && !strcmp(image, "host");
}

static char *claim_text(const struct ctl_driver *d, const char *id)
{
	return xasprintf("%s\n%s\n", d->cfg->state_dir, id);
}

/* The contents of claim name in dirfd, NUL-terminated, into buf. */
static int claim_read(char *buf, size_t len, int dirfd, const char *name)
{
	ssize_t n;
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return ORC_ENOTFOUND;
	do
		n = read(fd, buf, len - 1);
	while (n < 0 && errno == EINTR);
	close(fd);
	if (n < 0)
		return ORC_ERROR;
	buf[n] = '\0';
	return 0;
}

static int is_uid_name(int64_t *out, const char *name)
{
	if (!*name || strspn(name, "0123456789") != strlen(name))
		return 0;
	return orc_parse_i64(out, name, 0, 2147483646) == 0;
}

typedef int (*claim_fn)(int dirfd, const char *name, uid_t uid, const char *text, void *arg);

/* fn on every claim in the claims dir; stops at fn's first nonzero answer
 * and returns it. ORC_ERROR when the dir cannot be read. */
static int claims_each(const struct ctl_driver *d, claim_fn fn, void *arg)
{
	char text[CLAIM_MAX];
	struct dirent *de;
	int64_t uid;
	int dirfd, fd, rc = 0;
	DIR *dir;

	if ((dirfd = open(d->cfg->uid_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return errno == ENOENT ? 0 : ORC_ERROR;
	if ((fd = dup(dirfd)) < 0 || !(dir = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		close(dirfd);
		return ORC_ERROR;
	}
	while (!rc && (de = readdir(dir)) != NULL) {
		if (!is_uid_name(&uid, de->d_name) || claim_read(text, sizeof(text), dirfd, de->d_name) < 0)
			continue;
		rc = fn(dirfd, de->d_name, (uid_t)uid, text, arg);
	}
	closedir(dir);
	close(dirfd);
	return rc;
}

struct find {
	const char *want;
	uid_t uid;
	int release;
};

static int find_fn(int dirfd, const char *name, uid_t uid, const char *text, void *arg)
{
	struct find *f = arg;

	if (strcmp(text, f->want))
		return 0;
	f->uid = uid;
	if (!f->release)
		return 1;
	if (unlinkat(dirfd, name, 0) < 0 && errno != ENOENT) {
		orc_log(ORC_LOG_ERROR, "releasing a sandbox uid failed", "claim", name,
			"error", strerror(errno), NULL);
		return ORC_ERROR;
	}
	orc_log(ORC_LOG_DEBUG, "sandbox uid released", "uid", name, NULL);
	return 0;   /* on: a crash may have left two */
}

int local_uid_find(uid_t *out, struct ctl_driver *d, const char *id)
{
	struct find f = { NULL, 0, 0 };
	char *want;
	int rc;

	if (!d->cfg->uid_count)
		return ORC_ENOTFOUND;
	f.want = want = claim_text(d, id);
	rc = claims_each(d, find_fn, &f);
	free(want);
	if (rc < 0)
		return rc;
	if (rc == 0)
		return ORC_ENOTFOUND;
	*out = f.uid;
	return 0;
}

int local_uid_release(struct ctl_driver *d, const char *id)
{
	struct find f = { NULL, 0, 1 };
	char *want;
	int rc;

	if (!d->cfg->uid_count || !d->cfg->drop_privileges)
		return 0;
	f.want = want = claim_text(d, id);
	rc = claims_each(d, find_fn, &f);
	free(want);
	return rc < 0 ? rc : 0;
}

/* The claim text, complete, in a temporary file of the claims dir. */
static int tmp_write(char *name, size_t len, int dirfd, const char *text)
{
	size_t n = strlen(text);
	int fd;

	snprintf(name, len, TMP_PREFIX "%ld.%lld", (long)getpid(), (long long)orc_mono_ms());
	fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return ORC_ERROR;
	if (orc_write_all(fd, text, n) < 0) {
		close(fd);
		unlinkat(dirfd, name, 0);
		return ORC_ERROR;
	}
	if (close(fd) < 0) {
		unlinkat(dirfd, name, 0);
		return ORC_ERROR;
	}
	return 0;
}

int local_uid_claim(uid_t *out, struct ctl_driver *d, const char *id)
{
	const struct ctl_config *cfg = d->cfg;
	char tmp[64], name[24];
	char *text = NULL;
	int dirfd = -1, err = ORC_ERROR;
	int64_t i;

	/* Launched again after a crash: the claim it had is still its own. */
	if (local_uid_find(out, d, id) == 0)
		return 0;
	if ((dirfd = open(cfg->uid_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		orc_log(ORC_LOG_ERROR, "cannot open the sandbox uid claims dir", "path", cfg->uid_dir,
			"error", strerror(errno), NULL);
		goto done;
	}
	text = claim_text(d, id);
	if (tmp_write(tmp, sizeof(tmp), dirfd, text) < 0) {
		orc_log(ORC_LOG_ERROR, "writing a sandbox uid claim failed", "path", cfg->uid_dir,
			"error", strerror(errno), NULL);
		goto done;
	}
	/* The lowest free uid: a released one is taken again first. */
	for (i = 0; i < cfg->uid_count; i++) {
		uid_t uid = (uid_t)(cfg->uid_base + i);
		snprintf(name, sizeof(name), "%u", (unsigned)uid);
		if (linkat(dirfd, tmp, dirfd, name, 0) == 0) {
			*out = uid;
			err = 0;
			orc_log(ORC_LOG_DEBUG, "sandbox uid claimed", "sandbox_id", id, "uid", name, NULL);
			break;
		}
		if (errno != EEXIST) {
			orc_log(ORC_LOG_ERROR, "claiming a sandbox uid failed", "path", cfg->uid_dir,
				"uid", name, "error", strerror(errno), NULL);
			break;
		}
	}
	if (i == cfg->uid_count)
		orc_logf(ORC_LOG_ERROR, "every sandbox uid of %u..%u is taken (ORCHARD_SANDBOX_UID_COUNT)",
			 (unsigned)cfg->uid_base, (unsigned)(cfg->uid_base + cfg->uid_count - 1));
	unlinkat(dirfd, tmp, 0);
done:
	if (dirfd >= 0)
		close(dirfd);
	free(text);
	return err;
}

struct list {
	const char *prefix;
	size_t plen;
	local_uid_list_fn fn;
	void *arg;
};

static int list_fn(int dirfd, const char *name, uid_t uid, const char *text, void *arg)
{
	struct list *l = arg;
	char id[64];
	size_t n;

	(void)dirfd;
	(void)name;
	(void)uid;
	if (strncmp(text, l->prefix, l->plen))
		return 0;
	n = strcspn(text + l->plen, "\n");
	if (n == 0 || n >= sizeof(id))
		return 0;
	memcpy(id, text + l->plen, n);
	id[n] = '\0';
	if (orc_is_dns_label(id))
		l->fn(id, l->arg);
	return 0;
}

void local_uid_list(struct ctl_driver *d, local_uid_list_fn fn, void *arg)
{
	char *prefix;
	struct list l;

	if (!d->cfg->uid_count || !d->cfg->drop_privileges)
		return;
	prefix = xasprintf("%s\n", d->cfg->state_dir);
	l = (struct list){ prefix, strlen(prefix), fn, arg };
	claims_each(d, list_fn, &l);
	free(prefix);
}

/* A claim of a state dir that is gone, or a temporary file a crash left. */
static int stale_fn(int dirfd, const char *name, uid_t uid, const char *text, void *arg)
{
	char state[CLAIM_MAX];
	size_t n = strcspn(text, "\n");
	struct stat st;

	(void)uid;
	(void)arg;
	if (n == 0 || n >= sizeof(state))
		return 0;
	memcpy(state, text, n);
	state[n] = '\0';
	if (lstat(state, &st) < 0 && errno == ENOENT) {
		orc_log(ORC_LOG_INFO, "removing a sandbox uid claim of a state dir that is gone",
			"uid", name, "state_dir", state, NULL);
		unlinkat(dirfd, name, 0);
	}
	return 0;
}

static void tmp_sweep(int dirfd)
{
	struct dirent *de;
	struct stat st;
	int fd = dup(dirfd);
	DIR *dir;

	if (fd < 0 || !(dir = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((de = readdir(dir)) != NULL)
		if (!strncmp(de->d_name, TMP_PREFIX, strlen(TMP_PREFIX)) &&
		    fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    st.st_mtime < time(NULL) - TMP_STALE_S)
			unlinkat(dirfd, de->d_name, 0);
	closedir(dir);
}

int local_uid_init(struct ctl_driver *d)
{
	const struct ctl_config *cfg = d->cfg;
	struct stat st;
	int dirfd;

	if (!cfg->uid_count || !cfg->drop_privileges)
		return 0;
	if (mkdir(cfg->uid_dir, 0700) < 0 && errno != EEXIST) {
		orc_log(ORC_LOG_ERROR, "cannot create the sandbox uid claims dir", "path", cfg->uid_dir,
			"error", strerror(errno), NULL);
		return ORC_ERROR;
	}
	/* Only root may write claims: they decide who a sandbox runs as. */
	if ((dirfd = open(cfg->uid_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
	    fstat(dirfd, &st) < 0 || st.st_uid != 0 || fchmod(dirfd, 0700) < 0) {
		orc_log(ORC_LOG_ERROR, "the sandbox uid claims dir must be a directory of root's",
			"path", cfg->uid_dir, "error", strerror(errno), NULL);
		if (dirfd >= 0)
			close(dirfd);
		return ORC_ERROR;
	}
	tmp_sweep(dirfd);
	close(dirfd);
	claims_each(d, stale_fn, NULL);
	orc_logf(ORC_LOG_INFO, "host sandboxes run as uids of their own from %u..%u (claims in %s)",
		 (unsigned)cfg->uid_base, (unsigned)(cfg->uid_base + cfg->uid_count - 1), cfg->uid_dir);
	return 0;
}

int local_uid_chown_parts(char **why, struct ctl_driver *d, const char *id, uid_t uid, gid_t gid)
{
	struct orc_tree_stats st = { 0 };
	int dfd, fd, err = 0;
	size_t i;

	if ((dfd = openat(L(d)->state_fd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		*why = xasprintf("cannot open the sandbox dir: %s", strerror(errno));
		return ORC_ERROR;
	}
	for (i = 0; i < sizeof(owned_parts) / sizeof(*owned_parts) && !err; i++) {
		if ((fd = openat(dfd, owned_parts[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
			if (errno == ENOENT)
				continue;
			*why = xasprintf("cannot open the restored \"%s\": %s", owned_parts[i],
					 strerror(errno));
			err = ORC_ERROR;
			break;
		}
		if (orc_tree_chown(&st, fd, uid, gid) < 0) {
			*why = xasprintf("giving the restored \"%s\" to the sandbox's uid failed: %s",
					 owned_parts[i], st.err);
			err = ORC_ERROR;
		}
		close(fd);
	}
	close(dfd);
	return err;
}
