#include "fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "xalloc.h"

/* Deeper trees are refused by agent_remove (one descriptor per level). */
#define REMOVE_MAX_DEPTH 256

int agent_path_resolve(char **out, const char *in, size_t len, char *msg, size_t msglen)
{
	char *res;
	size_t n = 0, i, seg;
	const char *prefix = AGENT_WORKSPACE "/";

	if (len == 0 || memchr(in, '\0', len)) {
		snprintf(msg, msglen, "path must be non-empty and without NUL bytes");
		return ORC_EINVALID;
	}
	if (len >= PATH_MAX) {
		snprintf(msg, msglen, "path is longer than %d bytes", PATH_MAX - 1);
		return ORC_EINVALID;
	}
	/* Room for the prefix, the path and a NUL; never longer after. */
	res = xmalloc(strlen(prefix) + len + 2);
	if (in[0] == '/') {
		res[n++] = '/';
	} else {
		n = strlen(prefix);
		memcpy(res, prefix, n);
	}
	for (i = 0; i < len;) {
		while (i < len && in[i] == '/')
			i++;
		for (seg = 0; i + seg < len && in[i + seg] != '/'; seg++)
			;
		if (seg == 0)
			break;
		if (seg == 1 && in[i] == '.') {
			/* nothing */
		} else if (seg == 2 && in[i] == '.' && in[i + 1] == '.') {
			if (n > 1) {
				n--; /* the trailing '/' */
				while (n > 1 && res[n - 1] != '/')
					n--;
			}
		} else {
			memcpy(res + n, in + i, seg);
			n += seg;
			res[n++] = '/';
		}
		i += seg;
	}
	if (n > 1)
		n--; /* no trailing '/' except for the root */
	res[n] = '\0';
	if (n >= PATH_MAX) {
		free(res);
		snprintf(msg, msglen, "path is longer than %d bytes", PATH_MAX - 1);
		return ORC_EINVALID;
	}
	*out = res;
	return 0;
}

int agent_errno_err(int e)
{
	switch (e) {
	case ENOENT:
	case ENOTDIR:
		return ORC_ENOTFOUND;
	case EACCES:
	case EPERM:
	case EROFS:
		return ORC_EFORBIDDEN;
	case EEXIST:
	case ENOTEMPTY:
		return ORC_ECONFLICT;
	case ENAMETOOLONG:
	case ELOOP:
	case EISDIR:
		return ORC_EINVALID;
	default:
		return ORC_ERROR;
	}
}

unsigned agent_err_status(int err)
{
	switch (err) {
	case ORC_ENOTFOUND:
		return 404;
	case ORC_EFORBIDDEN:
		return 403;
	case ORC_ECONFLICT:
		return 409;
	case ORC_EINVALID:
		return 400;
	case ORC_ETOOBIG:
		return 413;
	case ORC_EUNAVAIL:
		return 503;
	default:
		return 500;
	}
}

static int sys_fail(char *msg, size_t msglen, const char *call, const char *path)
{
	int e = errno;

	snprintf(msg, msglen, "%s() \"%s\" failed: %s", call, path, strerror(e));
	return agent_errno_err(e);
}

int agent_mkdirs(const char *path, mode_t mode, char *msg, size_t msglen)
{
	char *p = xstrdup(path), *s;
	struct stat st;
	int err = 0;

	if (!strcmp(path, "/")) {
		free(p);
		return 0;
	}
	for (s = p + 1;; s++) {
		if (*s != '/' && *s != '\0')
			continue;
		char c = *s;
		*s = '\0';
		if (mkdir(p, mode) < 0 && errno != EEXIST) {
			err = sys_fail(msg, msglen, "mkdir", p);
			break;
		}
		if (stat(p, &st) < 0) {
			err = sys_fail(msg, msglen, "stat", p);
			break;
		}
		if (!S_ISDIR(st.st_mode)) {
			snprintf(msg, msglen, "\"%s\" exists and is not a directory", p);
			err = ORC_ECONFLICT;
			break;
		}
		*s = c;
		if (c == '\0')
			break;
	}
	free(p);
	return err;
}

int agent_mkdirs_parent(const char *path, char *msg, size_t msglen)
{
	const char *slash = strrchr(path, '/');
	char *dir;
	int err;

	if (!slash || slash == path)
		return 0;
	dir = xstrndup(path, (size_t)(slash - path));
	err = agent_mkdirs(dir, 0755, msg, msglen);
	free(dir);
	return err;
}

/* Empty the directory open at dfd (which this closes), depth levels down. */
static int remove_children(int dfd, const char *path, int depth, char *msg, size_t msglen)
{
	DIR *d = fdopendir(dfd);
	struct dirent *de;
	int err = 0, fd;

	if (!d) {
		close(dfd);
		return sys_fail(msg, msglen, "fdopendir", path);
	}
	if (depth > REMOVE_MAX_DEPTH) {
		closedir(d);
		snprintf(msg, msglen, "\"%s\" is nested more than %d levels deep", path, REMOVE_MAX_DEPTH);
		return ORC_EINVALID;
	}
	while (!err) {
		errno = 0;
		if (!(de = readdir(d))) {
			if (errno)
				err = sys_fail(msg, msglen, "readdir", path);
			break;
		}
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (unlinkat(dirfd(d), de->d_name, 0) == 0)
			continue;
		if (errno != EISDIR && errno != EPERM) {
			err = sys_fail(msg, msglen, "unlinkat", de->d_name);
			break;
		}
		/* A directory (never a symlink: unlinkat removed those). */
		fd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			err = sys_fail(msg, msglen, "openat", de->d_name);
			break;
		}
		if ((err = remove_children(fd, de->d_name, depth + 1, msg, msglen)) < 0)
			break;
		if (unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR) < 0)
			err = sys_fail(msg, msglen, "unlinkat", de->d_name);
	}
	closedir(d);
	return err;
}

int agent_remove(const char *path, int recursive, char *msg, size_t msglen)
{
	struct stat st;
	int fd, err;

	if (!strcmp(path, "/")) {
		snprintf(msg, msglen, "refusing to remove \"/\"");
		return ORC_EINVALID;
	}
	if (lstat(path, &st) < 0)
		return sys_fail(msg, msglen, "lstat", path);
	if (!S_ISDIR(st.st_mode))
		return unlink(path) < 0 ? sys_fail(msg, msglen, "unlink", path) : 0;
	if (rmdir(path) == 0)
		return 0;
	if (errno != ENOTEMPTY && errno != EEXIST)
		return sys_fail(msg, msglen, "rmdir", path);
	if (!recursive) {
		snprintf(msg, msglen, "directory \"%s\" is not empty (use recursive=1)", path);
		return ORC_ECONFLICT;
	}
	fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return sys_fail(msg, msglen, "open", path);
	if ((err = remove_children(fd, path, 1, msg, msglen)) < 0)
		return err;
	return rmdir(path) < 0 ? sys_fail(msg, msglen, "rmdir", path) : 0;
}

const char *agent_file_type(mode_t mode)
{
	if (S_ISREG(mode))
		return "file";
	if (S_ISDIR(mode))
		return "directory";
	if (S_ISLNK(mode))
		return "symlink";
	return "other";
}

void agent_rfc3339(char *out, size_t outlen, const struct timespec *ts)
{
	struct tm tm;
	time_t t = ts->tv_sec;

	if (!gmtime_r(&t, &tm) || !strftime(out, outlen, "%Y-%m-%dT%H:%M:%SZ", &tm))
		snprintf(out, outlen, "1970-01-01T00:00:00Z");
}

void agent_mode_str(char *out, size_t outlen, mode_t mode)
{
	snprintf(out, outlen, "%04o", (unsigned)(mode & 07777));
}

int agent_parse_mode(mode_t *out, const char *s)
{
	unsigned v = 0;
	size_t i, n = strlen(s);

	if (n == 0 || n > 5)
		return ORC_EINVALID;
	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '7')
			return ORC_EINVALID;
		v = v * 8 + (unsigned)(s[i] - '0');
	}
	if (v > 07777)
		return ORC_EINVALID;
	*out = (mode_t)v;
	return 0;
}
