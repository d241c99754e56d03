#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <microhttpd.h>

#include "err.h"
#include "fsutil.h"
#include "json.h"
#include "strutil.h"
#include "xalloc.h"

/* The request edge of the files, tar and git endpoints: query arguments,
 * JSON path fields and error replies. */

int agent_arg(const char **out, const struct agent_request *req, const char *key)
{
	const char *v = NULL;
	size_t len = 0;

	if (!req->conn || MHD_lookup_connection_value_n(req->conn, MHD_GET_ARGUMENT_KIND, key,
							strlen(key), &v, &len) != MHD_YES || !v)
		return 1;
	if (strlen(v) != len)
		return ORC_EINVALID;
	*out = v;
	return 0;
}

int agent_arg_resolve(char **out, const struct agent_request *req, const char *key,
		      const char *def, char *msg, size_t msglen)
{
	const char *v = NULL;
	int err;

	if ((err = agent_arg(&v, req, key)) < 0) {
		snprintf(msg, msglen, "query argument '%s' must not contain NUL bytes", key);
		return err;
	}
	if (err == 1 && !def) {
		snprintf(msg, msglen, "query argument '%s' is required", key);
		return ORC_EINVALID;
	}
	if (err == 1)
		v = def;
	return agent_path_resolve(out, v, strlen(v), msg, msglen);
}

int agent_arg_path(char **out, struct agent_reply *reply, const struct agent_request *req,
		   const char *key, const char *def)
{
	char msg[256];
	int err;

	if ((err = agent_arg_resolve(out, req, key, def, msg, sizeof(msg))) < 0)
		agent_reply_error(reply, 400, msg);
	return err;
}

int agent_open_dir(struct agent_reply *reply, const char *path)
{
	char msg[512];
	struct stat st;
	int fd, e;

	if ((fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0)
		return fd;
	e = errno;
	if (e == ENOTDIR && stat(path, &st) == 0) {
		snprintf(msg, sizeof(msg), "\"%s\" is not a directory", path);
		agent_reply_error(reply, 400, msg);
	} else {
		snprintf(msg, sizeof(msg), "open() \"%s\" failed: %s", path, strerror(e));
		agent_reply_err(reply, agent_errno_err(e), msg);
	}
	return -1;
}

int agent_arg_flag(int *out, struct agent_reply *reply, const struct agent_request *req,
		   const char *key, int def)
{
	const char *v = NULL;
	char msg[128];
	int err = agent_arg(&v, req, key);

	if (err == 1) {
		*out = def;
		return 0;
	}
	if (err == 0 && (!strcmp(v, "1") || !strcmp(v, "true"))) {
		*out = 1;
		return 0;
	}
	if (err == 0 && (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, ""))) {
		*out = 0;
		return 0;
	}
	snprintf(msg, sizeof(msg), "query argument '%s' must be 1, 0, true or false", key);
	agent_reply_error(reply, 400, msg);
	return ORC_EINVALID;
}

int agent_body_object(json_object **out, struct agent_reply *reply, const struct agent_request *req)
{
	char msg[256];
	int err;

	if ((err = orc_json_parse_object(out, req->body, req->body_len, msg, sizeof(msg))) < 0)
		agent_reply_error(reply, 400, msg);
	return err;
}

int agent_field_path(char **out, struct agent_reply *reply, json_object *o,
		     const char *key, const char *def)
{
	json_object *v = NULL;
	const char *s = def;
	size_t len = def ? strlen(def) : 0;
	char msg[256];
	int err;

	if (json_object_object_get_ex(o, key, &v) && v) {
		if (!json_object_is_type(v, json_type_string)) {
			snprintf(msg, sizeof(msg), "field '%s' must be a string", key);
			agent_reply_error(reply, 400, msg);
			return ORC_EINVALID;
		}
		s = json_object_get_string(v);
		len = (size_t)json_object_get_string_len(v);
	} else if (!def) {
		snprintf(msg, sizeof(msg), "field '%s' is required", key);
		agent_reply_error(reply, 400, msg);
		return ORC_EINVALID;
	}
	if ((err = agent_path_resolve(out, s, len, msg, sizeof(msg))) < 0) {
		char full[320];

		snprintf(full, sizeof(full), "field '%s': %s", key, msg);
		agent_reply_error(reply, 400, full);
	}
	return err;
}

void agent_reply_err(struct agent_reply *reply, int err, const char *msg)
{
	agent_reply_error(reply, agent_err_status(err), msg);
}

static uint64_t upload_limit = AGENT_UPLOAD_MAX_DEFAULT;
static pthread_once_t upload_limit_once = PTHREAD_ONCE_INIT;

static void read_upload_limit(void)
{
	const char *v = getenv("ORCHARD_AGENT_MAX_UPLOAD");
	int64_t n;

	if (v && orc_parse_i64(&n, v, 0, INT64_MAX) == 0)
		upload_limit = (uint64_t)n;
}

uint64_t agent_upload_limit(void)
{
	pthread_once(&upload_limit_once, read_upload_limit);
	return upload_limit;
}
