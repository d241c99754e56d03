/*
 * A sandbox's root from an imported image (image.h, docs/images.md).
 *
 * Ownership: bubblewrap maps exactly one host uid (the sandbox uid) to
 * root inside, so a file owned by any other host uid is "nobody" inside
 * and root in the sandbox cannot write it, even through the overlay (the
 * overlay checks the caller against the lower file's owner before copying
 * it up). orchard-admin therefore chowns every imported tree to the
 * sandbox uid, and we refuse an image owned by anyone else with a message
 * that says how to fix it.
 */
#include "image.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "imgstore.h"
#include "log.h"
#include "xalloc.h"

#define COMMAND_MAX 4096
#define COMMAND_WORDS_MAX 16
#define AGENT_PREFIX "/run/orchard-agent/"

/* The hint every "not available" message carries. */
#define IMPORT_HINT(name) "import it with: orchard-admin image import " name " --dir PATH | " \
	"--tar FILE | --oci LAYOUT[:TAG]"

char *ctl_image_rootfs(const struct ctl_config *cfg, const char *image)
{
	return xasprintf("%s/%s/rootfs", cfg->image_dir, image);
}

int ctl_image_check(char **why, const struct ctl_config *cfg, const char *image)
{
	char *rootfs = NULL, *cmd = NULL;
	struct stat st;
	int err = ORC_EINVALID;

	if (!orc_img_name_valid(image)) {
		*why = xasprintf("image \"%.100s\" is not available: images are \"host\" or imported "
				 "under a name of [a-z0-9][a-z0-9._-]{0,62}; " IMPORT_HINT("NAME"), image);
		return ORC_EINVALID;
	}
	rootfs = ctl_image_rootfs(cfg, image);
	if (lstat(rootfs, &st) < 0 || !S_ISDIR(st.st_mode)) {
		*why = xasprintf("image \"%s\" is not available in the image store \"%s\": "
				 IMPORT_HINT("%s"), image, cfg->image_dir, image);
		goto done;
	}
	if (st.st_uid != cfg->sandbox_uid) {
		*why = xasprintf("image \"%s\" is owned by uid %u, but sandboxes run as uid %u, whose "
				 "root could not write to it; import it again with "
				 "ORCHARD_SANDBOX_UID=%u", image, (unsigned)st.st_uid,
				 (unsigned)cfg->sandbox_uid, (unsigned)cfg->sandbox_uid);
		goto done;
	}
	cmd = xasprintf("%s/command", cfg->agent_bundle);
	if (access(cmd, R_OK) < 0) {
		*why = xasprintf("the self-contained agent for imported images is missing (\"%s\"); "
				 "build it with scripts/agent-bundle.sh %s", cmd, cfg->agent_bundle);
		err = ORC_ERROR;
		goto done;
	}
	err = 0;
done:
	free(rootfs);
	free(cmd);
	return err;
}

int ctl_image_agent_cmd(struct ctl_strv *out, char **why, const struct ctl_config *cfg)
{
	char *path = xasprintf("%s/command", cfg->agent_bundle);
	char buf[COMMAND_MAX + 1], *p, *save = NULL;
	struct ctl_strv words = CTL_STRV_INIT;
	ssize_t n;
	int fd, err = ORC_ERROR;

	if ((fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		*why = xasprintf("cannot open the agent bundle's \"%s\": %s", path, strerror(errno));
		goto done;
	}
	do
		n = read(fd, buf, COMMAND_MAX);
	while (n < 0 && errno == EINTR);
	close(fd);
	if (n <= 0 || n >= COMMAND_MAX) {
		*why = xasprintf("the agent bundle's \"%s\" is empty or too long", path);
		goto done;
	}
	buf[n] = '\0';
	for (p = strtok_r(buf, " \t\n", &save); p; p = strtok_r(NULL, " \t\n", &save)) {
		if (words.n >= COMMAND_WORDS_MAX)
			break;
		ctl_strv_push(&words, p);
	}
	/* It must start the agent from the bundle, not from the image. */
	if (!words.n || words.n >= COMMAND_WORDS_MAX ||
	    strncmp(words.v[0], AGENT_PREFIX, strlen(AGENT_PREFIX)) || strstr(words.v[0], "..")) {
		*why = xasprintf("the agent bundle's \"%s\" does not start a program in %s: rebuild it "
				 "with scripts/agent-bundle.sh %s", path, AGENT_PREFIX, cfg->agent_bundle);
		goto done;
	}
	for (size_t i = 0; i < words.n; i++)
		ctl_strv_push(out, words.v[i]);
	err = 0;
done:
	ctl_strv_release(&words);
	free(path);
	return err;
}

static int mount_overlay(const struct ctl_config *cfg, int dfd, const char *dir, const char *rootfs,
			 const struct stat *lower)
{
	char *target = xasprintf("%s/root", dir);
	char *opts = xasprintf("lowerdir=%s,upperdir=%s/upper,workdir=%s/work", rootfs, dir, dir);
	int err = ORC_ERROR;

	/* The merged root takes the upper dir's owner and mode: 0700, so no
	 * other local user reaches the layer through root/ or upper/. */
	(void)lower;
	/* "upper" exists in a fork restored from a btrfs snapshot. */
	if ((mkdirat(dfd, "upper", 0700) < 0 && errno != EEXIST) || fchmodat(dfd, "upper", 0700, 0) < 0 ||
	    fchownat(dfd, "upper", cfg->sandbox_uid, cfg->sandbox_gid, AT_SYMLINK_NOFOLLOW) < 0 ||
	    mkdirat(dfd, "work", 0700) < 0) {
		orc_log(ORC_LOG_ERROR, "preparing the overlay dirs failed", "dir", dir,
			"error", strerror(errno), NULL);
		goto done;
	}
	if (mount("overlay", target, "overlay", MS_NOSUID | MS_NODEV, opts) < 0) {
		orc_log(ORC_LOG_WARN, "mounting overlayfs failed; copying the image instead",
			"dir", dir, "error", strerror(errno), NULL);
		unlinkat(dfd, "upper", AT_REMOVEDIR);
		unlinkat(dfd, "work", AT_REMOVEDIR);
		goto done;
	}
	err = 0;
done:
	free(target);
	free(opts);
	return err;
}

static int copy_image(char **why, const struct ctl_config *cfg, int dfd, const char *rootfs)
{
	struct orc_tree_stats st = { 0 };
	int sfd = -1, rfd = -1, err = ORC_ERROR;

	if ((sfd = open(rootfs, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
	    (rfd = openat(dfd, "root", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		*why = xasprintf("cannot open the image's rootfs for copying: %s", strerror(errno));
		goto done;
	}
	if (orc_tree_copy(&st, sfd, rfd, cfg->drop_privileges ? (int64_t)cfg->sandbox_uid : -1,
			  cfg->drop_privileges ? (int64_t)cfg->sandbox_gid : -1) < 0) {
		*why = xasprintf("copying the image into the sandbox's layer failed: %s", st.err);
		goto done;
	}
	/* private to the sandbox uid, as an overlay's merged root is */
	if (fchmod(rfd, 0700) < 0) {
		*why = xasprintf("cannot make the sandbox's root private: %s", strerror(errno));
		goto done;
	}
	err = 0;
done:
	if (sfd >= 0)
		close(sfd);
	if (rfd >= 0)
		close(rfd);
	return err;
}

int ctl_image_layer_make(char **why, const struct ctl_config *cfg, int dfd, const char *dir,
			 const char *image)
{
	char *rootfs = ctl_image_rootfs(cfg, image);
	struct stat lower;
	int err = ORC_ERROR;

	if (stat(rootfs, &lower) < 0 || !S_ISDIR(lower.st_mode)) {
		*why = xasprintf("image \"%s\" is not available in the image store \"%s\": "
				 IMPORT_HINT("%s"), image, cfg->image_dir, image);
		err = ORC_EINVALID;
		goto done;
	}
	if (mkdirat(dfd, "root", 0755) < 0) {
		/* A fork restored from a btrfs snapshot of a copied root. */
		if (errno == EEXIST && faccessat(dfd, "upper", F_OK, AT_SYMLINK_NOFOLLOW) < 0) {
			err = 0;
			goto done;
		}
		*why = xasprintf("cannot create the sandbox's root dir: %s", strerror(errno));
		goto done;
	}
	if (geteuid() == 0 && mount_overlay(cfg, dfd, dir, rootfs, &lower) == 0) {
		err = 0;
		goto done;
	}
	err = copy_image(why, cfg, dfd, rootfs);
done:
	free(rootfs);
	return err;
}

int ctl_image_layer_unmount(const char *dir)
{
	char *target = xasprintf("%s/root", dir);
	int err = 0;

	/* Lazy: nothing may still use it (the sandbox is dead), and a
	 * straggler must not keep the dir from being removed. */
	if (umount2(target, MNT_DETACH | UMOUNT_NOFOLLOW) < 0 &&
	    errno != EINVAL && errno != ENOENT && !(errno == EPERM && geteuid() != 0)) {
		orc_log(ORC_LOG_ERROR, "unmounting the sandbox's overlay failed", "path", target,
			"error", strerror(errno), NULL);
		err = ORC_ERROR;
	}
	free(target);
	return err;
}
