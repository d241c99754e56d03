#ifndef CTL_BTRFS_H
#define CTL_BTRFS_H
#include <stdint.h>
/*
 * btrfs subvolumes through ioctl(2) (linux/btrfs.h), for the local
 * driver's btrfs checkpoint backend (docs/checkpoints.md). Every call
 * names its target relative to an open directory fd; names are single
 * path components. Errors return ORC_ERROR with errno set.
 */

/* 1 when fd is on a btrfs filesystem, else 0. */
int ctl_btrfs_on(int fd);

/* 1 when parent_fd/name is the root of a btrfs subvolume, else 0. */
int ctl_btrfs_is_subvol(int parent_fd, const char *name);

/* Create the empty subvolume parent_fd/name (mode 0755, owned by us). */
int ctl_btrfs_subvol_create(int parent_fd, const char *name);

/* Snapshot the subvolume src_parent_fd/src as dst_parent_fd/dst (both on
 * one filesystem), read-only when readonly. Atomic: the snapshot appears
 * whole or not at all. */
int ctl_btrfs_snapshot(int src_parent_fd, const char *src, int dst_parent_fd, const char *dst,
		       int readonly);

/* Turn quota groups on for the filesystem of fd (once; again is harmless):
 * simple quotas (Linux 6.7+: a block counts for the subvolume that wrote
 * it, cheap at commit) where the kernel has them, else full qgroups.
 * *mode_out: "simple" or "full" (when quotas were on already, the mode
 * they are in may be the other). Every subvolume created after has its
 * qgroup 0/<id>. Needs CAP_SYS_ADMIN. */
int ctl_btrfs_quota_enable(const char **mode_out, int fd);

/* Limit the qgroup of subvolume parent_fd/name to bytes (max_rfer: under
 * full qgroups what it refers to, blocks shared with snapshots included;
 * under simple quotas what it wrote itself); its writers then get
 * EDQUOT. */
int ctl_btrfs_qgroup_limit(int parent_fd, const char *name, int64_t bytes);

/* Remove parent_fd/name: a subvolume (read-only ones included) with
 * BTRFS_IOC_SNAP_DESTROY, anything else as orc_tree_remove_at() does.
 * Subvolumes nested in it (made by a sandbox) are destroyed first.
 * ENOENT counts as success. */
int ctl_btrfs_remove(int parent_fd, const char *name);
#endif
