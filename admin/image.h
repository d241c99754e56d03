#ifndef ADMIN_IMAGE_H
#define ADMIN_IMAGE_H
#include "imgstore.h"
struct admin_ctx;
/*
 * orchard-admin image: the store's bookkeeping (image.c) and the ways a
 * rootfs is filled from a source (image_import.c). docs/images.md.
 *
 * Every fill writes into an empty directory `rootfs_dir` (an absolute
 * path, also open as rootfs_fd) inside the import's temporary directory
 * `tmp_dir`; ownership and sizes are settled afterwards by image.c. Each
 * returns 0, or -1 after printing why on stderr.
 */

/* --dir PATH: copy the tree (modes, times, symlinks; no devices). */
int img_fill_dir(struct orc_tree_stats *st, int rootfs_fd, const char *src);
/* --tar FILE: extract with libarchive (compression auto-detected); refuses
 * absolute names and "..", skips devices, fifos and sockets. */
int img_fill_tar(struct orc_tree_stats *st, const char *rootfs_dir, const char *file);
/* --oci LAYOUT[:TAG]: umoci raw unpack --rootless. */
int img_fill_oci(const char *rootfs_dir, const char *layout_ref);
/* --docker REF: skopeo copy docker://REF into tmp_dir/oci, then as --oci. */
int img_fill_docker(const char *tmp_dir, const char *rootfs_dir, const char *ref);

/* Leftovers of a dead import or rm (image_sweep.c): removed, or an image an
 * uncommitted rm renamed aside put back. Needs ctx connected. */
void img_sweep(struct admin_ctx *ctx, int store_fd, const char *store);
#endif
