/*
 * The local image store's names and tree walkers (imgstore.h). Every step
 * is relative to an open directory fd with O_NOFOLLOW / AT_SYMLINK_NOFOLLOW,
 * so a symlink inside an imported tree never leads us out of it.
 */
#include "imgstore.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "io.h"
#include "xalloc.h"

#define TREE_MAX_DEPTH 128
#define LINK_MAX_LEN 4096

int orc_img_name_valid(const char *name)
{
	size_t i, n;

	if (!name || !strcmp(name, "host"))
		return 0;
	n = strlen(name);
	if (n < 1 || n > ORC_IMG_NAME_MAX)
		return 0;
	for (i = 0; i < n; i++) {
		char c = name[i];
		int alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
		if (!alnum && (i == 0 || (c != '.' && c != '_' && c != '-')))
			return 0;
	}
	return 1;
}

char *orc_img_dir_default(const char *state_dir)
{
	const char *env = getenv("ORCHARD_IMAGE_DIR");
	size_t n;

	if (env && *env)
		return xstrdup(env);
	if (!state_dir || state_dir[0] != '/')
		return NULL;
	/* dirname(state_dir), ignoring trailing slashes */
	n = strlen(state_dir);
	while (n > 1 && state_dir[n - 1] == '/')
		n--;
	while (n > 0 && state_dir[n - 1] != '/')
		n--;
	while (n > 1 && state_dir[n - 1] == '/')
		n--;
	if (n <= 1)
		return xstrdup("/images");
	return xasprintf("%.*s/images", (int)n, state_dir);
}

int orc_img_dir_valid(const char *path)
{
	size_t n = path ? strlen(path) : 0;

	if (n < 2 || n > ORC_IMG_DIR_MAX || path[0] != '/')
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)path[i] < 0x20 || path[i] == 0x7f || path[i] == ',' || path[i] == ':')
			return 0;
	return 1;
}

static int tree_fail(struct orc_tree_stats *st, const char *what, const char *name)
{
	if (!st->err[0])
		snprintf(st->err, sizeof(st->err), "%s \"%.120s\" failed: %s", what, name,
			 strerror(errno));
	return ORC_ERROR;
}

static DIR *dir_stream(int fd)
{
	int fd2 = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	DIR *d;

	if (fd2 < 0)
		return NULL;
	if (!(d = fdopendir(fd2)))
		close(fd2);
	return d;
}

static int dot(const char *name)
{
	return !strcmp(name, ".") || !strcmp(name, "..");
}

static int copy_file(struct orc_tree_stats *st, int sfd, int dfd, const char *name,
		     const struct stat *sb)
{
	char buf[65536];
	ssize_t n;
	int in = -1, out = -1, err = 0;

	if ((in = openat(sfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return tree_fail(st, "open()", name);
	out = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (out < 0) {
		err = tree_fail(st, "create()", name);
		goto done;
	}
	for (;;) {
		n = read(in, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			err = tree_fail(st, "read()", name);
			goto done;
		}
		if (n == 0)
			break;
		if (orc_write_all(out, buf, (size_t)n) < 0) {
			err = tree_fail(st, "write()", name);
			goto done;
		}
	}
	if (fchmod(out, sb->st_mode & 01777) < 0) {
		err = tree_fail(st, "chmod()", name);
		goto done;
	}
	st->bytes += sb->st_size;
done:
	if (in >= 0)
		close(in);
	if (out >= 0 && close(out) < 0 && !err)
		err = tree_fail(st, "close()", name);
	return err;
}

static int copy_dir(struct orc_tree_stats *st, int sfd, int dfd, int64_t uid, int64_t gid, int depth);

static int copy_entry(struct orc_tree_stats *st, int sfd, int dfd, const char *name,
		      int64_t uid, int64_t gid, int depth)
{
	struct timespec times[2];
	struct stat sb;
	char target[LINK_MAX_LEN + 1];
	ssize_t n;
	int s2 = -1, d2 = -1, err = 0;

	if (fstatat(sfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
		return tree_fail(st, "stat()", name);
	if (S_ISREG(sb.st_mode)) {
		err = copy_file(st, sfd, dfd, name, &sb);
	} else if (S_ISLNK(sb.st_mode)) {
		n = readlinkat(sfd, name, target, sizeof(target) - 1);
		if (n < 0)
			return tree_fail(st, "readlink()", name);
		target[n] = '\0';
		if (symlinkat(target, dfd, name) < 0)
			return tree_fail(st, "symlink()", name);
	} else if (S_ISDIR(sb.st_mode)) {
		if (depth >= TREE_MAX_DEPTH) {
			errno = ELOOP;
			return tree_fail(st, "descending into", name);
		}
		if (mkdirat(dfd, name, 0700) < 0)
			return tree_fail(st, "mkdir()", name);
		if ((s2 = openat(sfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
		    (d2 = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
			err = tree_fail(st, "open()", name);
			goto done;
		}
		if ((err = copy_dir(st, s2, d2, uid, gid, depth + 1)) < 0)
			goto done;
		if (fchmod(d2, sb.st_mode & 01777) < 0) {
			err = tree_fail(st, "chmod()", name);
			goto done;
		}
	} else {
		st->skipped++;
		return 0;
	}
	if (err < 0)
		goto done;
	st->entries++;
	if (uid >= 0 && fchownat(dfd, name, (uid_t)uid, (gid_t)gid, AT_SYMLINK_NOFOLLOW) < 0) {
		err = tree_fail(st, "chown()", name);
		goto done;
	}
	/* chown cleared setuid bits; restore the plain mode of files. */
	if (uid >= 0 && S_ISREG(sb.st_mode) && fchmodat(dfd, name, sb.st_mode & 01777, 0) < 0) {
		err = tree_fail(st, "chmod()", name);
		goto done;
	}
	times[0] = sb.st_atim;
	times[1] = sb.st_mtim;
	utimensat(dfd, name, times, AT_SYMLINK_NOFOLLOW);
done:
	if (s2 >= 0)
		close(s2);
	if (d2 >= 0)
		close(d2);
	return err;
}

static int copy_dir(struct orc_tree_stats *st, int sfd, int dfd, int64_t uid, int64_t gid, int depth)
{
	struct dirent *de;
	DIR *d = dir_stream(sfd);
	int err = 0;

	if (!d)
		return tree_fail(st, "opendir()", ".");
	while (!err && (de = readdir(d)) != NULL)
		if (!dot(de->d_name))
			err = copy_entry(st, sfd, dfd, de->d_name, uid, gid, depth);
	closedir(d);
	return err;
}

int orc_tree_copy(struct orc_tree_stats *st, int src_fd, int dst_fd, int64_t uid, int64_t gid)
{
	struct stat sb;

	if (fstat(src_fd, &sb) < 0)
		return tree_fail(st, "stat()", ".");
	if (copy_dir(st, src_fd, dst_fd, uid, gid, 0) < 0)
		return ORC_ERROR;
	if (fchmod(dst_fd, sb.st_mode & 01777) < 0)
		return tree_fail(st, "chmod()", ".");
	if (uid >= 0 && fchown(dst_fd, (uid_t)uid, (gid_t)gid) < 0)
		return tree_fail(st, "chown()", ".");
	return 0;
}

static int chown_dir(struct orc_tree_stats *st, int fd, uid_t uid, gid_t gid, int depth)
{
	struct dirent *de;
	struct stat sb;
	DIR *d;
	int sub, err = 0;

	if (depth >= TREE_MAX_DEPTH) {
		errno = ELOOP;
		return tree_fail(st, "descending into", "(too deep)");
	}
	if (!(d = dir_stream(fd)))
		return tree_fail(st, "opendir()", ".");
	while (!err && (de = readdir(d)) != NULL) {
		const char *name = de->d_name;
		if (dot(name))
			continue;
		if (fstatat(fd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
			err = tree_fail(st, "stat()", name);
			break;
		}
		if (!S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode) && !S_ISLNK(sb.st_mode)) {
			if (unlinkat(fd, name, 0) < 0)
				err = tree_fail(st, "unlink()", name);
			st->skipped++;
			continue;
		}
		st->entries++;
		if (S_ISREG(sb.st_mode))
			st->bytes += sb.st_size;
		if (fchownat(fd, name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0) {
			err = tree_fail(st, "chown()", name);
			break;
		}
		if (!S_ISLNK(sb.st_mode) && fchmodat(fd, name, sb.st_mode & 01777, 0) < 0) {
			err = tree_fail(st, "chmod()", name);
			break;
		}
		if (!S_ISDIR(sb.st_mode))
			continue;
		if ((sub = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
			err = tree_fail(st, "open()", name);
			break;
		}
		err = chown_dir(st, sub, uid, gid, depth + 1);
		close(sub);
	}
	closedir(d);
	return err;
}

int orc_tree_chown(struct orc_tree_stats *st, int fd, uid_t uid, gid_t gid)
{
	struct stat sb;

	if (fstat(fd, &sb) < 0)
		return tree_fail(st, "stat()", ".");
	if (fchown(fd, uid, gid) < 0 || fchmod(fd, sb.st_mode & 01777) < 0)
		return tree_fail(st, "chown()", ".");
	return chown_dir(st, fd, uid, gid, 0);
}
