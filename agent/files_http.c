#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <microhttpd.h>

#include "err.h"
#include "fsutil.h"
#include "json.h"
#include "strutil.h"
#include "xalloc.h"

/* PUT/GET/DELETE /files, GET /files/stat, POST /files/mkdir. */

/* PUT /files: the body goes to the temporary file as it arrives. */
struct file_upload {
	struct agent_file_writer w;
	uint64_t limit;
	int err;                   /* the first failure, reported at the end */
	char msg[512];
};

static int upload_begin(void **out, const struct agent_request *req)
{
	struct file_upload *up;
	const char *cl = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND,
						     MHD_HTTP_HEADER_CONTENT_LENGTH);
	const char *mode_arg = NULL;
	char *path = NULL;
	mode_t mode = 0;
	int64_t length;
	int err;

	if (cl && orc_parse_i64(&length, cl, 0, INT64_MAX) == 0 &&
	    (uint64_t)length > agent_upload_limit())
		return ORC_ETOOBIG;
	up = xcalloc(1, sizeof(*up));
	up->w.fd = -1;
	up->limit = agent_upload_limit();
	if ((err = agent_arg_resolve(&path, req, "path", NULL, up->msg, sizeof(up->msg))) < 0)
		goto done;
	if ((err = agent_arg(&mode_arg, req, "mode")) == 0 && agent_parse_mode(&mode, mode_arg) < 0) {
		snprintf(up->msg, sizeof(up->msg), "query argument 'mode' must be octal, at most 07777");
		err = ORC_EINVALID;
		goto done;
	}
	err = agent_file_writer_open(&up->w, path, mode_arg ? (int)mode : -1,
				     up->msg, sizeof(up->msg));
done:
	free(path);
	up->err = err < 0 ? err : 0;
	*out = up;
	return 0;
}

static void upload_data(void *p, const char *data, size_t len)
{
	struct file_upload *up = p;

	if (up->err)
		return;
	if (len > up->limit - up->w.size) {
		snprintf(up->msg, sizeof(up->msg), "request body is over the upload limit of %" PRIu64 " bytes",
			 up->limit);
		up->err = ORC_ETOOBIG;
		return;
	}
	up->err = agent_file_writer_write(&up->w, data, len, up->msg, sizeof(up->msg));
}

static void upload_free(void *p)
{
	struct file_upload *up = p;

	agent_file_writer_release(&up->w);
	free(up);
}

const struct agent_upload_ops agent_files_upload = { upload_begin, upload_data, upload_free };

void agent_handle_files_put(struct agent_reply *reply, const struct agent_request *req)
{
	struct file_upload *up = req->upload;
	json_object *o;
	char hex[65];

	if (!up) {
		agent_reply_error(reply, 500, "no upload state");
		return;
	}
	if (!up->err)
		up->err = agent_file_writer_commit(&up->w, up->msg, sizeof(up->msg));
	if (up->err) {
		agent_file_writer_release(&up->w); /* the temporary file goes before the reply */
		agent_reply_err(reply, up->err, up->msg);
		return;
	}
	orc_sha256_hex(&up->w.sha, hex);
	o = json_object_new_object();
	json_object_object_add(o, "path", json_object_new_string(up->w.path));
	json_object_object_add(o, "size", json_object_new_int64((int64_t)up->w.size));
	json_object_object_add(o, "sha256", json_object_new_string(hex));
	agent_reply_json(reply, 200, o);
	json_object_put(o);
}

/* Open path for reading if it is a regular file: 0, 404 or 400 with msg. */
int agent_open_regular(int *fd_out, struct stat *st, const char *path, char *msg, size_t msglen)
{
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0) {
		int e = errno;

		snprintf(msg, msglen, "open() \"%s\" failed: %s", path, strerror(e));
		return agent_errno_err(e);
	}
	if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode)) {
		snprintf(msg, msglen, "\"%s\" is not a regular file", path);
		close(fd);
		return ORC_EINVALID;
	}
	*fd_out = fd;
	return 0;
}

void agent_handle_files_get(struct agent_reply *reply, const struct agent_request *req)
{
	static char empty[1];
	struct MHD_Response *resp;
	struct stat st;
	char *path = NULL, msg[512], num[32], etag[80], crange[80];
	uint64_t off, len;
	int fd, err, what;

	if (agent_arg_path(&path, reply, req, "path", NULL) < 0)
		return;
	if ((err = agent_open_regular(&fd, &st, path, msg, sizeof(msg))) < 0) {
		agent_reply_err(reply, err, msg);
		goto done;
	}
	agent_file_etag(etag, sizeof(etag), &st);
	what = agent_file_conditions(&off, &len, req->conn, &st, etag);
	if (what == AGENT_NOT_MODIFIED || what == AGENT_RANGE_UNSATISFIABLE) {
		close(fd);
		fd = -1;
		resp = MHD_create_response_from_buffer(0, empty, MHD_RESPMEM_PERSISTENT);
	} else {
		/* MHD owns fd from here (and closes it), sending it with sendfile where it can. */
		resp = MHD_create_response_from_fd_at_offset64(len, fd, off);
	}
	if (!resp) {
		if (fd >= 0)
			close(fd);
		agent_reply_error(reply, 500, "could not create the response");
		goto done;
	}
	agent_file_validators(resp, &st, etag);
	if (what == 0) {
		snprintf(crange, sizeof(crange), "bytes %" PRIu64 "-%" PRIu64 "/%lld", off, off + len - 1,
			 (long long)st.st_size);
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_RANGE, crange);
	} else if (what == AGENT_RANGE_UNSATISFIABLE) {
		snprintf(crange, sizeof(crange), "bytes */%lld", (long long)st.st_size);
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_RANGE, crange);
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
	snprintf(num, sizeof(num), "%lld", (long long)st.st_size);
	MHD_add_response_header(resp, "X-File-Size", num);
	agent_mode_str(num, sizeof(num), st.st_mode);
	MHD_add_response_header(resp, "X-File-Mode", num);
	agent_rfc3339(num, sizeof(num), &st.st_mtim);
	MHD_add_response_header(resp, "X-File-Modified", num);
	reply->status = what == 0 ? 206 : what == AGENT_NOT_MODIFIED ? 304 :
			what == AGENT_RANGE_UNSATISFIABLE ? 416 : 200;
	reply->response = resp;
done:
	free(path);
}

/* 200 {"success": true, "path": path}. */
static void reply_done(struct agent_reply *reply, const char *path)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "success", json_object_new_boolean(1));
	json_object_object_add(o, "path", json_object_new_string(path));
	agent_reply_json(reply, 200, o);
	json_object_put(o);
}

void agent_handle_files_delete(struct agent_reply *reply, const struct agent_request *req)
{
	char *path = NULL, msg[512];
	int recursive, err;

	if (agent_arg_path(&path, reply, req, "path", NULL) < 0)
		return;
	if (agent_arg_flag(&recursive, reply, req, "recursive", 0) < 0)
		goto done;
	if ((err = agent_remove(path, recursive, msg, sizeof(msg))) < 0) {
		agent_reply_err(reply, err, msg);
		goto done;
	}
	reply_done(reply, path);
done:
	free(path);
}

/* name, type, size, mode, modified (and target for a symlink) of st. */
void agent_stat_fields(json_object *o, const char *name, const struct stat *st,
		       int dirfd_, const char *at_path)
{
	char buf[32], target[PATH_MAX];
	ssize_t n;

	json_object_object_add(o, "name", json_object_new_string(name));
	json_object_object_add(o, "type", json_object_new_string(agent_file_type(st->st_mode)));
	json_object_object_add(o, "size", json_object_new_int64((int64_t)st->st_size));
	agent_mode_str(buf, sizeof(buf), st->st_mode);
	json_object_object_add(o, "mode", json_object_new_string(buf));
	agent_rfc3339(buf, sizeof(buf), &st->st_mtim);
	json_object_object_add(o, "modified", json_object_new_string(buf));
	if (S_ISLNK(st->st_mode) && (n = readlinkat(dirfd_, at_path, target, sizeof(target))) >= 0 &&
	    (size_t)n < sizeof(target))
		json_object_object_add(o, "target", orc_json_new_text(target, (size_t)n));
}

void agent_handle_files_stat(struct agent_reply *reply, const struct agent_request *req)
{
	json_object *o;
	struct stat st;
	const char *base;
	char *path = NULL, msg[512];

	if (agent_arg_path(&path, reply, req, "path", NULL) < 0)
		return;
	if (lstat(path, &st) < 0) {
		int e = errno;

		snprintf(msg, sizeof(msg), "lstat() \"%s\" failed: %s", path, strerror(e));
		agent_reply_err(reply, agent_errno_err(e), msg);
		goto done;
	}
	base = strrchr(path, '/');
	base = base && base[1] ? base + 1 : path;
	o = json_object_new_object();
	json_object_object_add(o, "path", json_object_new_string(path));
	agent_stat_fields(o, base, &st, AT_FDCWD, path);
	agent_reply_json(reply, 200, o);
	json_object_put(o);
done:
	free(path);
}

void agent_handle_files_mkdir(struct agent_reply *reply, const struct agent_request *req)
{
	json_object *body = NULL;
	const char *mode_s = NULL;
	char *path = NULL, msg[512];
	mode_t mode = 0755;
	int parents = 1, err;

	if (agent_body_object(&body, reply, req) < 0)
		return;
	if (agent_field_path(&path, reply, body, "path", NULL) < 0)
		goto done;
	if ((err = orc_json_get_bool(body, "parents", &parents, msg, sizeof(msg))) < 0 ||
	    (err = orc_json_get_str(body, "mode", &mode_s, msg, sizeof(msg))) < 0) {
		agent_reply_error(reply, 400, msg);
		goto done;
	}
	if (mode_s && agent_parse_mode(&mode, mode_s) < 0) {
		agent_reply_error(reply, 400, "field 'mode' must be octal, at most 07777");
		goto done;
	}
	if (parents) {
		err = agent_mkdirs(path, mode, msg, sizeof(msg));
	} else if ((err = mkdir(path, mode)) < 0) {
		int e = errno;

		snprintf(msg, sizeof(msg), "mkdir() \"%s\" failed: %s", path, strerror(e));
		err = agent_errno_err(e);
	}
	if (err < 0) {
		agent_reply_err(reply, err, msg);
		goto done;
	}
	reply_done(reply, path);
done:
	free(path);
	json_object_put(body);
}
