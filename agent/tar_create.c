#include "files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <microhttpd.h>

#include "dl_archive.h"
#include "err.h"
#include "io.h"
#include "fsutil.h"
#include "log.h"
#include "revoke.h"
#include "tar.h"
#include "xalloc.h"

/*
 * GET /archive: a directory as a pax tar stream. libarchive pushes and MHD
 * pulls, so a thread writes the archive into a pipe and the response reads
 * from it, a block at a time: nothing is held whole in memory.
 */

#define READ_BLOCK (64 * 1024)

struct tar_out {
	int dirfd;                 /* the directory; the thread closes it */
	int pipe_r, pipe_w;
	pthread_t thread;
	int failed;                /* atomic: the thread gave up mid-stream */
	int cut;                   /* the thread's: on_write writes nothing more */
	char msg[512];
	char *buf;                 /* READ_BLOCK of file data */
	char key[AGENT_KEY_MAX + 1]; /* X-Orchard-Key: revoking it cuts the stream */
};

static la_ssize_t on_write(struct archive *a, void *cls, const void *data, size_t n)
{
	struct tar_out *t = cls;

	if (t->cut) {
		archive_set_error(a, EPIPE, "the stream was cut");
		return -1;
	}
	if (orc_write_all(t->pipe_w, data, n) < 0) {
		archive_set_error(a, errno, "write to the response failed");
		return -1;
	}
	return (la_ssize_t)n;
}

static int fail(struct tar_out *t, const char *what, const char *name, const char *why)
{
	if (!t->msg[0])
		snprintf(t->msg, sizeof(t->msg), "%s \"%s\" failed: %s", what, name, why);
	return ORC_ERROR;
}

static int add_data(struct tar_out *t, struct archive *a, int dfd, const char *name,
		    const char *rel, off_t size)
{
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	ssize_t n;
	int err = 0;

	if (fd < 0)
		return fail(t, "open", rel, strerror(errno));
	while (size > 0) {
		n = read(fd, t->buf, size < READ_BLOCK ? (size_t)size : READ_BLOCK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			err = fail(t, "read", rel, strerror(errno));
			break;
		}
		if (n == 0)
			break; /* shrank: libarchive pads the entry with zeros */
		if (archive_write_data(a, t->buf, (size_t)n) < 0) {
			err = fail(t, "archive", rel, archive_error_string(a));
			break;
		}
		size -= n;
	}
	close(fd);
	return err;
}

/* Archive the entries of the directory open at dfd (taken) under prefix. */
static int add_dir(struct tar_out *t, struct archive *a, int dfd, const char *prefix, int depth)
{
	DIR *d = fdopendir(dfd);
	struct archive_entry *e = archive_entry_new();
	struct dirent *de;
	struct stat st;
	char *rel = NULL, target[PATH_MAX];
	ssize_t n;
	int err = 0, sub;

	if (!d) {
		close(dfd);
		archive_entry_free(e);
		return fail(t, "fdopendir", prefix, strerror(errno));
	}
	while (!err && (errno = 0, de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue; /* gone since readdir */
		if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode))
			continue; /* sockets, fifos, devices */
		free(rel);
		rel = xasprintf("%s%s", prefix, de->d_name);
		archive_entry_clear(e);
		archive_entry_copy_pathname(e, rel);
		archive_entry_copy_stat(e, &st);
		if (S_ISLNK(st.st_mode)) {
			n = readlinkat(dirfd(d), de->d_name, target, sizeof(target) - 1);
			if (n < 0) {
				err = fail(t, "readlink", rel, strerror(errno));
				break;
			}
			target[n] = '\0';
			archive_entry_set_size(e, 0);
			archive_entry_copy_symlink(e, target);
		} else if (S_ISDIR(st.st_mode)) {
			archive_entry_set_size(e, 0);
		}
		if (archive_write_header(a, e) < ARCHIVE_WARN) {
			err = fail(t, "archive", rel, archive_error_string(a));
			break;
		}
		if (S_ISREG(st.st_mode)) {
			err = add_data(t, a, dirfd(d), de->d_name, rel, st.st_size);
		} else if (S_ISDIR(st.st_mode)) {
			if (depth >= AGENT_TAR_MAX_DEPTH) {
				err = fail(t, "archive", rel, "too deeply nested");
				break;
			}
			sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0) {
				err = fail(t, "open", rel, strerror(errno));
				break;
			}
			char *p = xasprintf("%s/", rel);
			err = add_dir(t, a, sub, p, depth + 1);
			free(p);
		}
	}
	if (!err && errno)
		err = fail(t, "readdir", prefix, strerror(errno));
	free(rel);
	archive_entry_free(e);
	closedir(d);
	return err;
}

static void *create_thread(void *cls)
{
	struct tar_out *t = cls;
	struct archive *a = archive_write_new();
	int err;

	archive_write_set_format_pax_restricted(a);
	archive_write_set_bytes_in_last_block(a, 1);
	if (archive_write_open(a, t, NULL, on_write, NULL) != ARCHIVE_OK)
		err = fail(t, "archive", "", archive_error_string(a));
	else
		err = add_dir(t, a, t->dirfd, "", 0);
	t->dirfd = -1;
	if (!err && archive_write_close(a) != ARCHIVE_OK)
		err = fail(t, "archive", "", archive_error_string(a));
	if (err) {
		/* No end-of-archive marker: the stream is cut. Closing with
		 * on_write refusing frees libarchive's block buffer, which
		 * archive_write_fail() would leak. */
		t->cut = 1;
		archive_write_close(a);
		orc_log(ORC_LOG_WARN, "archive stream failed", "detail", t->msg, NULL);
		__atomic_store_n(&t->failed, 1, __ATOMIC_RELEASE);
	}
	archive_write_free(a);
	close(t->pipe_w);
	t->pipe_w = -1;
	return NULL;
}

static ssize_t on_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct tar_out *t = cls;
	ssize_t n;

	(void)pos;
	if (t->key[0] && agent_key_revoked(t->key))
		return MHD_CONTENT_READER_END_WITH_ERROR;
	do
		n = read(t->pipe_r, buf, max);
	while (n < 0 && errno == EINTR);
	if (n > 0)
		return n;
	if (n == 0 && !__atomic_load_n(&t->failed, __ATOMIC_ACQUIRE))
		return MHD_CONTENT_READER_END_OF_STREAM;
	return MHD_CONTENT_READER_END_WITH_ERROR; /* the client sees a cut transfer */
}

static void on_free(void *cls)
{
	struct tar_out *t = cls;

	close(t->pipe_r); /* a thread still writing gets EPIPE and ends */
	pthread_join(t->thread, NULL);
	free(t->buf);
	free(t);
}

void agent_handle_archive_get(struct agent_reply *reply, const struct agent_request *req)
{
	struct MHD_Response *resp;
	struct tar_out *t = NULL;
	const char *key;
	char *path = NULL, msg[512];
	int fds[2], fd = -1;

	if (agent_archive_load(msg, sizeof(msg)) < 0) {
		agent_reply_error(reply, 500, msg);
		return;
	}
	if (agent_arg_path(&path, reply, req, "path", NULL) < 0)
		return;
	if ((fd = agent_open_dir(reply, path)) < 0)
		goto done;
	if (pipe2(fds, O_CLOEXEC) < 0) {
		agent_reply_error(reply, 500, "pipe() failed");
		goto done;
	}
	t = xcalloc(1, sizeof(*t));
	t->dirfd = fd;
	t->pipe_r = fds[0];
	t->pipe_w = fds[1];
	t->buf = xmalloc(READ_BLOCK);
	key = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "X-Orchard-Key");
	if (key && agent_key_valid(key))
		memcpy(t->key, key, strlen(key) + 1);
	if (pthread_create(&t->thread, NULL, create_thread, t) != 0) {
		close(fds[0]);
		close(fds[1]);
		free(t->buf);
		free(t);
		agent_reply_error(reply, 500, "pthread_create() failed");
		goto done;
	}
	fd = -1; /* the thread's now */
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, READ_BLOCK, on_read, t, on_free);
	if (!resp) {
		on_free(t);
		agent_reply_error(reply, 500, "could not create the response");
		goto done;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/x-tar");
	reply->status = 200;
	reply->response = resp;
done:
	if (fd >= 0)
		close(fd);
	free(path);
}
