#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "io.h"
#include "fsutil.h"
#include "strutil.h"
#include "xalloc.h"

/* A file replaced atomically: temporary file, fsync, rename (files.h). */

static int fail(char *msg, size_t msglen, const char *call, const char *path)
{
	int e = errno;

	snprintf(msg, msglen, "%s() \"%s\" failed: %s", call, path, strerror(e));
	return e == ENOSPC || e == EDQUOT ? ORC_ETOOBIG : agent_errno_err(e);
}

int agent_file_writer_open(struct agent_file_writer *w, const char *path, int mode,
			   char *msg, size_t msglen)
{
	const char *slash = strrchr(path, '/');
	struct stat st;
	char hex[17];
	int err, have_old;

	memset(w, 0, sizeof(*w));
	w->fd = -1;
	orc_sha256_init(&w->sha);
	if (!slash || !slash[1]) {
		snprintf(msg, msglen, "\"%s\" is a directory", path);
		return ORC_EINVALID;
	}
	have_old = stat(path, &st) == 0;
	if (have_old && !S_ISREG(st.st_mode)) {
		snprintf(msg, msglen, "\"%s\" exists and is not a regular file", path);
		return ORC_EINVALID;
	}
	if ((err = agent_mkdirs_parent(path, msg, msglen)) < 0)
		return err;
	orc_random_hex(hex, 8);
	w->tmp = xasprintf("%.*s/.%.200s.orchard-%s", (int)(slash - path), path, slash + 1, hex);
	w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (w->fd < 0) {
		err = fail(msg, msglen, "open", w->tmp);
		free(w->tmp);
		w->tmp = NULL;
		return err;
	}
	w->mode = mode >= 0 ? (mode_t)mode : have_old ? st.st_mode & 07777 : 0644;
	if (mode < 0 && have_old && fchown(w->fd, st.st_uid, st.st_gid) < 0) {
		/* best effort: the new file is the agent's */
	}
	w->path = xstrdup(path);
	return 0;
}

int agent_file_writer_write(struct agent_file_writer *w, const void *data, size_t n,
			    char *msg, size_t msglen)
{
	if (orc_write_all(w->fd, data, n) < 0)
		return fail(msg, msglen, "write", w->tmp);
	orc_sha256_update(&w->sha, data, n);
	w->size += n;
	return 0;
}

/* fsync the directory holding path so the rename is durable. */
static void sync_parent(const char *path)
{
	const char *slash = strrchr(path, '/');
	char *dir = xstrndup(path, slash == path ? 1 : (size_t)(slash - path));
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
	free(dir);
}

int agent_file_writer_commit(struct agent_file_writer *w, char *msg, size_t msglen)
{
	int err;

	if (fchmod(w->fd, w->mode) < 0)
		return fail(msg, msglen, "fchmod", w->tmp);
	if (fsync(w->fd) < 0)
		return fail(msg, msglen, "fsync", w->tmp);
	err = close(w->fd);
	w->fd = -1;
	if (err < 0 && errno != EINTR)
		return fail(msg, msglen, "close", w->tmp);
	if (rename(w->tmp, w->path) < 0)
		return fail(msg, msglen, "rename", w->path);
	free(w->tmp);
	w->tmp = NULL;
	sync_parent(w->path);
	return 0;
}

void agent_file_writer_release(struct agent_file_writer *w)
{
	if (w->fd >= 0)
		close(w->fd);
	w->fd = -1;
	if (w->tmp)
		unlink(w->tmp);
	free(w->tmp);
	free(w->path);
	w->tmp = NULL;
	w->path = NULL;
}
