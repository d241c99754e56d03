#ifndef ORC_IMGSTORE_H
#define ORC_IMGSTORE_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
/*
 * The local image store (docs/images.md), shared by orchard-admin (import,
 * ls, rm) and the controller's local driver (which lays a sandbox's private
 * writable layer over an image's rootfs):
 *
 *   $ORCHARD_IMAGE_DIR/            root, 0700
 *     <name>/image.json            name, source, size_bytes, uid, gid, created
 *     <name>/rootfs/               the read-only tree, owned by the sandbox uid
 *     .<name>.tmp-<pid>/           an import in progress (renamed into place)
 *
 * The tree walkers below work relative to directory fds, never follow a
 * symlink and bound their depth, because an imported tree comes from
 * outside.
 */

#define ORC_IMG_NAME_MAX 63
#define ORC_IMG_DIR_MAX 512

/* [a-z0-9][a-z0-9._-]{0,62} and not the reserved "host". */
int orc_img_name_valid(const char *name);

/*
 * The store's directory: $ORCHARD_IMAGE_DIR when set, else "images" beside
 * the state dir (<dirname state_dir>/images), else NULL. Fresh string.
 */
char *orc_img_dir_default(const char *state_dir);

/* An absolute path of at most ORC_IMG_DIR_MAX bytes without ',', ':' or
 * control characters (it goes into overlayfs mount options). */
int orc_img_dir_valid(const char *path);

struct orc_tree_stats {
	int64_t bytes;       /* apparent size of regular files */
	int64_t entries;     /* files, dirs and symlinks */
	int64_t skipped;     /* device nodes, fifos and sockets left out */
	char err[256];       /* what failed, for the caller's message */
};

/*
 * Copy the contents of directory src_fd into the (empty) directory dst_fd:
 * directories, regular files (data, mode, mtime) and symlinks (as links).
 * Devices, fifos and sockets are skipped and counted; hard links become
 * separate files; setuid/setgid bits are dropped. When uid >= 0 every
 * created entry is chowned to uid:gid. 0, or ORC_ERROR with st->err set.
 */
int orc_tree_copy(struct orc_tree_stats *st, int src_fd, int dst_fd, int64_t uid, int64_t gid);

/* lchown everything under (and including) directory fd to uid:gid, drop
 * setuid/setgid bits, remove device nodes, fifos and sockets, and count
 * sizes into st. 0, or ORC_ERROR with st->err set. */
int orc_tree_chown(struct orc_tree_stats *st, int fd, uid_t uid, gid_t gid);

/* Removing a tree: rmtree.h. */
#endif
