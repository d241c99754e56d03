#ifndef CTL_IMAGE_H
#define CTL_IMAGE_H
#include "ctl.h"
#include "local.h"
/*
 * Imported images under the local driver (docs/images.md): a sandbox's
 * root is the image's rootfs, read-only, under a private writable layer in
 * its host dir:
 *
 *   <state>/<id>/root/     what bwrap binds as "/"
 *   <state>/<id>/upper/    overlayfs upperdir (sandbox uid): the sandbox's writes
 *   <state>/<id>/work/     overlayfs workdir
 *
 * As root the controller mounts overlayfs (lowerdir = the image's rootfs)
 * on root/ in the host's mount namespace; otherwise (or when the mount
 * fails) root/ is a private copy of the rootfs.
 */

/* The image's rootfs under cfg->image_dir. Fresh string. */
char *ctl_image_rootfs(const struct ctl_config *cfg, const char *image);

/*
 * Can a sandbox of image start here? Checks the name, that the rootfs
 * exists and belongs to the sandbox uid, and that the agent bundle is
 * there. On failure *why is a message for the row (fresh string) and the
 * result ORC_EINVALID.
 */
int ctl_image_check(char **why, const struct ctl_config *cfg, const char *image);

/* The agent's command words from the bundle's `command` file
 * (scripts/agent-bundle.sh), which start it from /run/orchard-agent. */
int ctl_image_agent_cmd(struct ctl_strv *out, char **why, const struct ctl_config *cfg);

/*
 * Lay out root/ (and upper/, work/) in the sandbox dir dfd (whose path is
 * dir). 0, or ORC_ERROR with *why set.
 */
int ctl_image_layer_make(char **why, const struct ctl_config *cfg, int dfd, const char *dir,
			 const char *image);

/* Unmount dir/root if it is a mount. 0 when nothing is mounted there. */
int ctl_image_layer_unmount(const char *dir);
#endif
