/*
 * btrfs subvolumes and snapshots through ioctl(2) (btrfs.h): no btrfs
 * binary is run per checkpoint. A subvolume's root directory is inode
 * BTRFS_FIRST_FREE_OBJECTID (256) and has its own st_dev, which is how
 * one is recognised.
 */
#include "btrfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/btrfs.h>
#include <linux/magic.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "err.h"
#include "log.h"
#include "rmtree.h"

#define SUBVOL_ROOT_INO 256 /* BTRFS_FIRST_FREE_OBJECTID */
#define NESTED_MAX_DEPTH 64

int ctl_btrfs_on(int fd)
{
	struct statfs sfs;

	return fstatfs(fd, &sfs) == 0 && sfs.f_type == BTRFS_SUPER_MAGIC;
}

int ctl_btrfs_is_subvol(int parent_fd, const char *name)
{
	struct stat st;
	int fd, on;

	if (fstatat(parent_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode) ||
	    st.st_ino != SUBVOL_ROOT_INO)
		return 0;
	if ((fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return 0;
	on = ctl_btrfs_on(fd);
	close(fd);
	return on;
}

/* A name for vol_args: one path component that fits. */
static int set_name(char *dst, size_t size, const char *name)
{
	size_t len = strlen(name);

	if (!len || len >= size || strchr(name, '/')) {
		errno = EINVAL;
		return ORC_ERROR;
	}
	memcpy(dst, name, len + 1);
	return 0;
}

int ctl_btrfs_subvol_create(int parent_fd, const char *name)
{
	struct btrfs_ioctl_vol_args args;

	memset(&args, 0, sizeof(args));
	if (set_name(args.name, sizeof(args.name), name) < 0)
		return ORC_ERROR;
	return ioctl(parent_fd, BTRFS_IOC_SUBVOL_CREATE, &args) < 0 ? ORC_ERROR : 0;
}

int ctl_btrfs_snapshot(int src_parent_fd, const char *src, int dst_parent_fd, const char *dst,
		       int readonly)
{
	struct btrfs_ioctl_vol_args_v2 args;
	int sfd, rc, saved;

	memset(&args, 0, sizeof(args));
	if (set_name(args.name, sizeof(args.name), dst) < 0)
		return ORC_ERROR;
	if ((sfd = openat(src_parent_fd, src, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return ORC_ERROR;
	args.fd = sfd;
	args.flags = readonly ? BTRFS_SUBVOL_RDONLY : 0;
	rc = ioctl(dst_parent_fd, BTRFS_IOC_SNAP_CREATE_V2, &args);
	saved = errno;
	close(sfd);
	errno = saved;
	return rc < 0 ? ORC_ERROR : 0;
}

/* linux/btrfs.h of Linux 6.7 and later; Debian 12's headers predate it. */
#ifndef BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA
#define BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA 4
#endif

static int quota_ctl(int fd, uint64_t cmd)
{
	struct btrfs_ioctl_quota_ctl_args args;

	memset(&args, 0, sizeof(args));
	args.cmd = cmd;
	return ioctl(fd, BTRFS_IOC_QUOTA_CTL, &args) < 0 ? ORC_ERROR : 0;
}

int ctl_btrfs_quota_enable(const char **mode_out, int fd)
{
	if (quota_ctl(fd, BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA) == 0) {
		*mode_out = "simple";
		return 0;
	}
	if (errno != EINVAL && errno != EOPNOTSUPP)
		return ORC_ERROR;
	if (quota_ctl(fd, BTRFS_QUOTA_CTL_ENABLE) < 0)
		return ORC_ERROR;
	*mode_out = "full";
	return 0;
}

int ctl_btrfs_qgroup_limit(int parent_fd, const char *name, int64_t bytes)
{
	struct btrfs_ioctl_qgroup_limit_args args;
	int fd, rc, saved;

	if (bytes <= 0) {
		errno = EINVAL;
		return ORC_ERROR;
	}
	if ((fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return ORC_ERROR;
	memset(&args, 0, sizeof(args));
	args.qgroupid = 0;   /* the subvolume fd is in */
	args.lim.flags = BTRFS_QGROUP_LIMIT_MAX_RFER;
	args.lim.max_rfer = (uint64_t)bytes;
	rc = ioctl(fd, BTRFS_IOC_QGROUP_LIMIT, &args);
	saved = errno;
	close(fd);
	errno = saved;
	return rc < 0 ? ORC_ERROR : 0;
}

static int destroy(int parent_fd, const char *name)
{
	struct btrfs_ioctl_vol_args args;

	memset(&args, 0, sizeof(args));
	if (set_name(args.name, sizeof(args.name), name) < 0)
		return ORC_ERROR;
	if (ioctl(parent_fd, BTRFS_IOC_SNAP_DESTROY, &args) < 0)
		return errno == ENOENT ? 0 : ORC_ERROR;
	return 0;
}

static int destroy_tree(int parent_fd, const char *name, int depth);

/* Destroy the subvolumes below dfd (a sandbox may make its own: a
 * subvolume is not removed while one is nested in it). */
static int destroy_nested(int dfd, int depth)
{
	struct dirent *de;
	struct stat self, st;
	int fd2, err = 0;
	DIR *dir;

	if (depth >= NESTED_MAX_DEPTH || fstat(dfd, &self) < 0 || (fd2 = dup(dfd)) < 0)
		return ORC_ERROR;
	if (!(dir = fdopendir(fd2))) {
		close(fd2);
		return ORC_ERROR;
	}
	while ((de = readdir(dir)) != NULL) {
		int cfd;
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
			continue;
		if (st.st_dev != self.st_dev) {
			if (ctl_btrfs_is_subvol(dfd, de->d_name) && destroy_tree(dfd, de->d_name, depth + 1) < 0)
				err = ORC_ERROR;
			continue;
		}
		if ((cfd = openat(dfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
			continue;
		if (destroy_nested(cfd, depth + 1) < 0)
			err = ORC_ERROR;
		close(cfd);
	}
	closedir(dir);
	return err;
}

static int destroy_tree(int parent_fd, const char *name, int depth)
{
	int fd, err;

	if (destroy(parent_fd, name) == 0)
		return 0;
	if (errno != ENOTEMPTY)
		return ORC_ERROR;
	if ((fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return ORC_ERROR;
	err = destroy_nested(fd, depth);
	close(fd);
	if (err < 0)
		return err;
	return destroy(parent_fd, name);
}

int ctl_btrfs_remove(int parent_fd, const char *name)
{
	if (!ctl_btrfs_is_subvol(parent_fd, name))
		return orc_tree_remove_at(parent_fd, name);
	if (destroy_tree(parent_fd, name, 0) < 0) {
		orc_log(ORC_LOG_ERROR, "destroying a btrfs subvolume failed", "name", name,
			"error", strerror(errno), NULL);
		return ORC_ERROR;
	}
	return 0;
}
