/*
 * Removing a tree we do not trust (rmtree.h): a sandbox's host directory
 * once the sandbox is dead, an imported image. O_NOFOLLOW and
 * AT_SYMLINK_NOFOLLOW throughout; never onto another filesystem.
 */
#include "rmtree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "log.h"

#define RMTREE_MAX_DEPTH 256

static int rm_dir_contents(int dfd, dev_t dev, int depth);

static int rm_entry(int parent, const char *name, dev_t dev, int depth)
{
	struct stat st;
	int fd, err;

	if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : ORC_ERROR;
	if (!S_ISDIR(st.st_mode)) {
		if (unlinkat(parent, name, 0) < 0 && errno != ENOENT)
			goto fail;
		return 0;
	}
	if (st.st_dev != dev) {
		orc_log(ORC_LOG_ERROR, "refusing to remove a mount point inside a tree",
			"name", name, NULL);
		return ORC_ERROR;
	}
	if (depth >= RMTREE_MAX_DEPTH)
		return ORC_ERROR;
	fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == EACCES) {
		/* A sandbox may chmod 000 its own dirs; we own the tree now. */
		fchmodat(parent, name, 0700, 0);
		fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	}
	if (fd < 0)
		goto fail;
	err = rm_dir_contents(fd, dev, depth + 1);
	close(fd);
	if (err < 0)
		return err;
	if (unlinkat(parent, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
		goto fail;
	return 0;
fail:
	orc_log(ORC_LOG_ERROR, "removing a file of a tree failed", "name", name,
		"error", strerror(errno), NULL);
	return ORC_ERROR;
}

static int rm_dir_contents(int dfd, dev_t dev, int depth)
{
	int fd2 = dup(dfd);
	DIR *d;
	struct dirent *de;
	int err = 0, e;

	if (fd2 < 0)
		return ORC_ERROR;
	fcntl(fd2, F_SETFD, FD_CLOEXEC);
	if (!(d = fdopendir(fd2))) {
		close(fd2);
		return ORC_ERROR;
	}
	/* Owner write permission is needed to unlink inside. */
	fchmod(dfd, 0700);
	while ((de = readdir(d)) != NULL) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if ((e = rm_entry(dfd, de->d_name, dev, depth)) < 0)
			err = e;
	}
	closedir(d);
	return err;
}

int orc_tree_remove_at(int parent_fd, const char *name)
{
	struct stat st;

	if (fstatat(parent_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : ORC_ERROR;
	return rm_entry(parent_fd, name, st.st_dev, 0);
}
