#include "tar.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "fsutil.h"
#include "xalloc.h"

/*
 * PUT /archive extracts into a staging directory inside the target and
 * moves the result in only once the whole archive was accepted, so a
 * refused archive leaves nothing behind (tar_extract.c). Moving is a rename
 * per entry: a new name or a replaced file or symlink is renamed over; a
 * directory that exists on both sides is merged into (the existing one keeps
 * its mode and times). Every directory descent is an O_NOFOLLOW open at a
 * descriptor, so a symlink in the target is replaced, never followed.
 *
 * The staging tree can hold directories without owner write permission
 * (an entry's mode, applied by libarchive at close); they get it back
 * before their entries are moved or removed, because an agent that is not
 * root needs it (and, for a directory moved to a new parent, to rewrite
 * its ".." entry).
 */

#define MERGE_MAX_DEPTH (AGENT_TAR_MAX_DEPTH + 2)

static int fail_at(char *msg, size_t msglen, const char *call, const char *path,
		   const char *name, int e)
{
	snprintf(msg, msglen, "%s() \"%s/%s\" failed: %s", call, path, name, strerror(e));
	return agent_errno_err(e);
}

static int open_dir_at(int dfd, const char *name)
{
	return openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/* Owner rwx on a staging directory, so it can be emptied and moved. */
static void writable(int dfd, const char *name, const struct stat *st)
{
	if ((st->st_mode & S_IRWXU) != S_IRWXU)
		(void)fchmodat(dfd, name, (st->st_mode & 07777) | S_IRWXU, 0);
}

/* Remove every entry under the open directory fd (closed here). */
static void discard_children(int fd, int depth)
{
	DIR *d = fdopendir(fd);
	struct dirent *de;
	struct stat st;
	int sub;

	if (!d) {
		close(fd);
		return;
	}
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (!S_ISDIR(st.st_mode)) {
			(void)unlinkat(fd, de->d_name, 0);
			continue;
		}
		writable(fd, de->d_name, &st);
		if (depth < MERGE_MAX_DEPTH && (sub = open_dir_at(fd, de->d_name)) >= 0)
			discard_children(sub, depth + 1);
		(void)unlinkat(fd, de->d_name, AT_REMOVEDIR);
	}
	closedir(d);
}

void agent_tar_discard(const char *stage)
{
	struct stat st;
	int fd;

	if (!stage || lstat(stage, &st) < 0 || !S_ISDIR(st.st_mode))
		return;
	(void)chmod(stage, (st.st_mode & 07777) | S_IRWXU);
	if ((fd = open(stage, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) >= 0)
		discard_children(fd, 0);
	(void)rmdir(stage);
}

/* Move a directory to a new parent, with owner write for its "..". */
static int move_dir(int sfd, int dfd, const char *name, const struct stat *st)
{
	int r;

	writable(sfd, name, st);
	r = renameat(sfd, name, dfd, name);
	if (r == 0 && (st->st_mode & S_IRWXU) != S_IRWXU)
		(void)fchmodat(dfd, name, st->st_mode & 07777, 0);
	return r;
}

static int merge_dir(int sfd, int dfd, const char *dpath, int depth, char *msg, size_t msglen);

/* One staging entry into the target directory dfd (named dpath). */
static int merge_entry(int sfd, int dfd, const char *dpath, const char *name, int depth,
		       char *msg, size_t msglen)
{
	struct stat ss, ds;
	int sub_s = -1, sub_d = -1, err = 0;
	char *sub_path;

	if (fstatat(sfd, name, &ss, AT_SYMLINK_NOFOLLOW) < 0)
		return fail_at(msg, msglen, "fstatat", dpath, name, errno);
	if (fstatat(dfd, name, &ds, AT_SYMLINK_NOFOLLOW) < 0) {
		if (errno != ENOENT)
			return fail_at(msg, msglen, "fstatat", dpath, name, errno);
		if (S_ISDIR(ss.st_mode) ? move_dir(sfd, dfd, name, &ss) : renameat(sfd, name, dfd, name))
			return fail_at(msg, msglen, "rename", dpath, name, errno);
		return 0;
	}
	if (S_ISDIR(ss.st_mode) && S_ISDIR(ds.st_mode)) {
		if (depth >= MERGE_MAX_DEPTH) {
			snprintf(msg, msglen, "\"%s/%s\" is more than %d levels deep", dpath, name,
				 MERGE_MAX_DEPTH);
			return ORC_EINVALID;
		}
		writable(sfd, name, &ss);
		if ((sub_s = open_dir_at(sfd, name)) < 0)
			return fail_at(msg, msglen, "open", dpath, name, errno);
		if ((sub_d = open_dir_at(dfd, name)) < 0) {
			err = fail_at(msg, msglen, "open", dpath, name, errno);
			close(sub_s);
			return err;
		}
		sub_path = xasprintf("%s/%s", dpath, name);
		err = merge_dir(sub_s, sub_d, sub_path, depth + 1, msg, msglen);
		free(sub_path);
		close(sub_d);
		if (!err && unlinkat(sfd, name, AT_REMOVEDIR) < 0)
			err = fail_at(msg, msglen, "rmdir", dpath, name, errno);
		return err;
	}
	/* A new non-directory replaces anything but a non-empty directory;
	 * a new directory replaces a file or symlink. */
	if (S_ISDIR(ds.st_mode) && unlinkat(dfd, name, AT_REMOVEDIR) < 0)
		return fail_at(msg, msglen, "rmdir", dpath, name, errno);
	if (S_ISDIR(ss.st_mode) && !S_ISDIR(ds.st_mode) && unlinkat(dfd, name, 0) < 0)
		return fail_at(msg, msglen, "unlink", dpath, name, errno);
	if (S_ISDIR(ss.st_mode) ? move_dir(sfd, dfd, name, &ss) : renameat(sfd, name, dfd, name))
		return fail_at(msg, msglen, "rename", dpath, name, errno);
	return 0;
}

/* Every entry of staging directory sfd (closed here) into dfd. */
static int merge_dir(int sfd, int dfd, const char *dpath, int depth, char *msg, size_t msglen)
{
	DIR *d = fdopendir(sfd);
	struct dirent *de;
	int err = 0;

	if (!d) {
		err = fail_at(msg, msglen, "fdopendir", dpath, "", errno);
		close(sfd);
		return err;
	}
	while (!err && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		err = merge_entry(sfd, dfd, dpath, de->d_name, depth, msg, msglen);
	}
	closedir(d);
	return err;
}

int agent_tar_merge(const char *stage, const char *dir, char *msg, size_t msglen)
{
	const char *dpath = *dir ? dir : "/";
	struct stat st;
	int sfd = -1, dfd = -1, err;

	if (lstat(stage, &st) == 0)
		(void)chmod(stage, (st.st_mode & 07777) | S_IRWXU);
	if ((sfd = open(stage, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return fail_at(msg, msglen, "open", stage, "", errno);
	if ((dfd = open(dpath, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		err = fail_at(msg, msglen, "open", dpath, "", errno);
		close(sfd);
		return err;
	}
	err = merge_dir(sfd, dfd, *dir ? dir : "", 0, msg, msglen);
	close(dfd);
	if (!err && rmdir(stage) < 0)
		err = fail_at(msg, msglen, "rmdir", stage, "", errno);
	return err;
}
