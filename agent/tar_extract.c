#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <microhttpd.h>

#include "dl_archive.h"
#include "err.h"
#include "io.h"
#include "fsutil.h"
#include "json.h"
#include "strutil.h"
#include "tar.h"
#include "tar_name.h"
#include "xalloc.h"

/*
 * PUT /archive: extract a tar stream into a directory as it arrives. MHD
 * pushes the body and libarchive pulls, so the body goes into a pipe that
 * an extraction thread reads. Entries are checked by name (lib/tar_name.c) and
 * against symlinks already on their way in the directory, placed under a
 * staging directory inside the directory's real path, and written with
 * libarchive's SECURE_NODOTDOT and SECURE_SYMLINKS, so an entry cannot land
 * outside the directory, through a symlink either. The first refused entry,
 * or passing the expansion bound (tar.h), stops the extraction and the
 * staging directory is removed; only an archive accepted whole is moved
 * into place (tar_merge.c).
 */

#define EXTRACT_FLAGS (ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME | \
		       ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_SYMLINKS)

struct tar_in {
	char *path;                /* the target directory as requested */
	char *dir;                 /* its real path ("" for "/") */
	char *stage;               /* the staging directory inside it */
	int pipe_r, pipe_w;
	pthread_t thread;
	int started, joined;
	uint64_t received, limit;
	int err;                   /* before or outside the thread */
	char msg[512];
	/* written by the thread, read after the join */
	int t_err;
	char t_msg[PATH_MAX + 256];
	uint64_t entries, bytes;
};

static int t_fail(struct tar_in *t, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Remember the thread's failure (err and message); returns err. */
static int t_fail(struct tar_in *t, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(t->t_msg, sizeof(t->t_msg), fmt, ap);
	va_end(ap);
	t->t_err = err;
	return err;
}

static const char *why(struct archive *a)
{
	const char *s = archive_error_string(a);

	return s ? s : "unknown error";
}

/* No symlink among the existing parents of name in the target: the
 * staging directory has none of them, so libarchive cannot see them. */
static int check_parents(struct tar_in *t, const char *name)
{
	char *p = xasprintf("%s/%s", t->dir, name), *slash;
	size_t skip = strlen(t->dir) + 1;
	struct stat st;
	int err = 0, depth = 0;

	for (slash = strchr(p + skip, '/'); slash && !err; slash = strchr(slash + 1, '/')) {
		if (++depth > AGENT_TAR_MAX_DEPTH) {
			err = t_fail(t, ORC_EINVALID, "entry \"%s\" is more than %d levels deep",
				     name, AGENT_TAR_MAX_DEPTH);
			break;
		}
		*slash = '\0';
		if (lstat(p, &st) < 0) {
			*slash = '/';
			break; /* not there yet: nothing more to follow */
		}
		if (S_ISLNK(st.st_mode))
			err = t_fail(t, ORC_EINVALID, "entry \"%s\" refused: \"%s\" is a symlink",
				     name, p + skip);
		*slash = '/';
	}
	free(p);
	return err;
}

/* The entry's path (and hard link target) under t->stage. */
static int place(struct tar_in *t, struct archive_entry *e)
{
	const char *name = archive_entry_pathname(e), *link = archive_entry_hardlink(e);
	char *full;
	int err;

	if (orc_tar_name_check(name) < 0)
		return t_fail(t, ORC_EINVALID, "entry \"%s\" is outside the target directory",
			      name ? name : "");
	if (link && orc_tar_name_check(link) < 0)
		return t_fail(t, ORC_EINVALID, "entry \"%s\" links outside the target directory",
			      name);
	if ((err = check_parents(t, name)) < 0)
		return err;
	full = xasprintf("%s/%s", t->stage, name);
	archive_entry_copy_pathname(e, full);
	free(full);
	if (link) {
		full = xasprintf("%s/%s", t->stage, link);
		archive_entry_copy_hardlink(e, full);
		free(full);
	}
	return 0;
}

/* The expansion bound (tar.h) after more output. */
static int check_bound(struct tar_in *t, struct archive *in)
{
	const struct agent_tar_limits *l = agent_tar_limits();
	uint64_t expanded = t->bytes + 512 * t->entries;
	int64_t raw;

	if (t->bytes > l->bytes)
		return t_fail(t, ORC_ETOOBIG, "archive expands to more than %" PRIu64 " bytes of file data",
			      l->bytes);
	if (t->entries > l->entries)
		return t_fail(t, ORC_ETOOBIG, "archive has more than %" PRIu64 " entries", l->entries);
	if (l->ratio && expanded > l->ratio_floor) {
		raw = archive_filter_bytes(in, -1);
		if (raw > 0 && expanded / (uint64_t)raw >= l->ratio)
			return t_fail(t, ORC_ETOOBIG, "archive expands more than %" PRIu64
				      " times its size (%" PRIu64 " bytes from %" PRId64 ")",
				      l->ratio, expanded, raw);
	}
	return 0;
}

static int copy_data(struct tar_in *t, struct archive *in, struct archive *out, const char *name)
{
	const void *block;
	size_t size;
	la_int64_t offset;
	int r;

	for (;;) {
		r = archive_read_data_block(in, &block, &size, &offset);
		if (r == ARCHIVE_EOF)
			return 0;
		if (r < ARCHIVE_WARN)
			return t_fail(t, ORC_EINVALID, "reading entry \"%s\" failed: %s", name, why(in));
		t->bytes += size;
		if (check_bound(t, in) < 0)
			return t->t_err;
		if (archive_write_data_block(out, block, size, offset) < ARCHIVE_WARN)
			return t_fail(t, ORC_ERROR, "writing entry \"%s\" failed: %s", name, why(out));
	}
}

static void *extract_thread(void *cls)
{
	struct tar_in *t = cls;
	struct archive *in = archive_read_new(), *out = archive_write_disk_new();
	struct archive_entry *e;
	char *name = NULL;
	int r, err = 0;

	archive_read_support_format_tar(in);
	archive_read_support_filter_gzip(in);
	archive_write_disk_set_options(out, EXTRACT_FLAGS);
	if (archive_read_open_fd(in, t->pipe_r, 64 * 1024) != ARCHIVE_OK)
		err = t_fail(t, ORC_EINVALID, "reading the archive failed: %s", why(in));
	while (!err) {
		r = archive_read_next_header(in, &e);
		if (r == ARCHIVE_EOF)
			break;
		if (r < ARCHIVE_WARN) {
			err = t_fail(t, ORC_EINVALID, "reading the archive failed: %s", why(in));
			break;
		}
		free(name);
		name = xstrdup(archive_entry_pathname(e) ? archive_entry_pathname(e) : "");
		t->entries++;
		if ((err = check_bound(t, in)) < 0 || (err = place(t, e)) < 0)
			break;
		if (archive_write_header(out, e) < ARCHIVE_WARN) {
			err = t_fail(t, ORC_EINVALID, "entry \"%s\" refused: %s", name, why(out));
			break;
		}
		if (archive_entry_size(e) > 0 && (err = copy_data(t, in, out, name)) < 0)
			break;
		if (archive_write_finish_entry(out) < ARCHIVE_WARN) {
			err = t_fail(t, ORC_ERROR, "writing entry \"%s\" failed: %s", name, why(out));
			break;
		}
	}
	/* close applies the deferred directory modes and times */
	if (archive_write_close(out) < ARCHIVE_WARN && !err)
		t_fail(t, ORC_ERROR, "finishing the extraction failed: %s", why(out));
	archive_write_free(out);
	archive_read_free(in);
	free(name);
	close(t->pipe_r); /* the rest of the body now gets EPIPE: ignored */
	t->pipe_r = -1;
	return NULL;
}

static int begin(void **out, const struct agent_request *req)
{
	const char *cl = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND,
						     MHD_HTTP_HEADER_CONTENT_LENGTH);
	struct tar_in *t;
	char *path = NULL, *real = NULL;
	int64_t length;
	int fds[2], err;

	if (cl && orc_parse_i64(&length, cl, 0, INT64_MAX) == 0 &&
	    (uint64_t)length > agent_upload_limit())
		return ORC_ETOOBIG;
	t = xcalloc(1, sizeof(*t));
	t->pipe_r = t->pipe_w = -1;
	t->limit = agent_upload_limit();
	*out = t;
	if ((err = agent_archive_load(t->msg, sizeof(t->msg))) < 0 ||
	    (err = agent_arg_resolve(&path, req, "path", NULL, t->msg, sizeof(t->msg))) < 0 ||
	    (err = agent_mkdirs(path, 0755, t->msg, sizeof(t->msg))) < 0)
		goto done;
	if (!(real = realpath(path, NULL))) {
		snprintf(t->msg, sizeof(t->msg), "realpath() \"%s\" failed: %s", path, strerror(errno));
		err = agent_errno_err(errno);
		goto done;
	}
	t->dir = strcmp(real, "/") ? xstrdup(real) : xstrdup("");
	t->path = path;
	path = NULL;
	t->stage = xasprintf("%s/.orchard-archive-XXXXXX", t->dir);
	if (!mkdtemp(t->stage)) {
		snprintf(t->msg, sizeof(t->msg), "mkdtemp() \"%s\" failed: %s", t->stage, strerror(errno));
		err = agent_errno_err(errno);
		free(t->stage);
		t->stage = NULL;
		goto done;
	}
	if (pipe2(fds, O_CLOEXEC) < 0) {
		snprintf(t->msg, sizeof(t->msg), "pipe() failed: %s", strerror(errno));
		err = ORC_ERROR;
		goto done;
	}
	t->pipe_r = fds[0];
	t->pipe_w = fds[1];
	if (pthread_create(&t->thread, NULL, extract_thread, t) != 0) {
		snprintf(t->msg, sizeof(t->msg), "pthread_create() failed");
		err = ORC_ERROR;
		goto done;
	}
	t->started = 1;
done:
	t->err = err < 0 ? err : 0;
	free(real);
	free(path);
	return 0;
}

static void close_input(struct tar_in *t)
{
	if (t->pipe_w >= 0)
		close(t->pipe_w);
	t->pipe_w = -1;
}

static void data(void *cls, const char *buf, size_t len)
{
	struct tar_in *t = cls;

	if (t->err || t->pipe_w < 0)
		return;
	if (len > t->limit - t->received) {
		snprintf(t->msg, sizeof(t->msg), "request body is over the upload limit of %" PRIu64 " bytes",
			 t->limit);
		t->err = ORC_ETOOBIG;
		close_input(t); /* the thread sees a cut archive and stops */
		return;
	}
	t->received += len;
	if (orc_write_all(t->pipe_w, buf, len) < 0)
		close_input(t); /* EPIPE: the thread is done; the rest is ignored */
}

static void finish(struct tar_in *t)
{
	close_input(t);
	if (t->started && !t->joined) {
		pthread_join(t->thread, NULL);
		t->joined = 1;
	}
	if (t->pipe_r >= 0) {
		close(t->pipe_r);
		t->pipe_r = -1;
	}
}

static void free_upload(void *cls)
{
	struct tar_in *t = cls;

	finish(t);
	agent_tar_discard(t->stage);
	free(t->stage);
	free(t->dir);
	free(t->path);
	free(t);
}

const struct agent_upload_ops agent_archive_upload = { begin, data, free_upload };

void agent_handle_archive_put(struct agent_reply *reply, const struct agent_request *req)
{
	struct tar_in *t = req->upload;
	json_object *o;

	if (!t) {
		agent_reply_error(reply, 500, "no upload state");
		return;
	}
	finish(t);
	if (!t->err && !t->t_err &&
	    (t->t_err = agent_tar_merge(t->stage, t->dir, t->t_msg, sizeof(t->t_msg))) == 0) {
		free(t->stage);
		t->stage = NULL;
	}
	/* a refused archive leaves nothing, before the reply is sent */
	agent_tar_discard(t->stage);
	if (t->err) {
		agent_reply_err(reply, t->err, t->msg);
		return;
	}
	if (t->t_err) {
		agent_reply_err(reply, t->t_err, t->t_msg);
		return;
	}
	o = json_object_new_object();
	json_object_object_add(o, "path", json_object_new_string(t->path));
	json_object_object_add(o, "entries", json_object_new_int64((int64_t)t->entries));
	json_object_object_add(o, "bytes", json_object_new_int64((int64_t)t->bytes));
	agent_reply_json(reply, 200, o);
	json_object_put(o);
}
