#ifndef AGENT_FILES_H
#define AGENT_FILES_H
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "server.h"
#include "sha256.h"
/*
 * The files and tar endpoints (docs/agent-protocol.md, "Files"): raw and
 * base64 transfer, listing, stat, mkdir, remove, and directories as tar
 * streams. Paths come from the query (?path=) or the JSON body and go
 * through agent_path_resolve (fsutil.h).
 */

#define AGENT_B64_MAX (64u << 20)        /* decoded bytes of the base64 routes */
#define AGENT_B64_BODY (90u << 20)       /* JSON body of POST /files/base64 */
#define AGENT_UPLOAD_MAX_DEFAULT (1ull << 30) /* PUT /files and /archive */

/* Streamed request bodies (server.h) of PUT /files and PUT /archive. */
extern const struct agent_upload_ops agent_files_upload;
extern const struct agent_upload_ops agent_archive_upload;

void agent_handle_files_put(struct agent_reply *reply, const struct agent_request *req);
void agent_handle_files_get(struct agent_reply *reply, const struct agent_request *req);
void agent_handle_files_delete(struct agent_reply *reply, const struct agent_request *req);
void agent_handle_files_stat(struct agent_reply *reply, const struct agent_request *req);
void agent_handle_files_mkdir(struct agent_reply *reply, const struct agent_request *req);
void agent_handle_files_b64_get(struct agent_reply *reply, const struct agent_request *req);
void agent_handle_files_b64_post(struct agent_reply *reply, const struct agent_request *req);
void agent_handle_files_list(struct agent_reply *reply, const struct agent_request *req);
void agent_handle_archive_get(struct agent_reply *reply, const struct agent_request *req);
void agent_handle_archive_put(struct agent_reply *reply, const struct agent_request *req);

/* files_args.c: the request edge shared by files, tar and git. */

/* The decoded query argument key: 0 and *out, 1 when absent, ORC_EINVALID
 * when it holds a NUL byte. */
int agent_arg(const char **out, const struct agent_request *req, const char *key);
/* The query argument key as a resolved path (malloc'd); when absent,
 * def (NULL: required). ORC_EINVALID and msg on failure. */
int agent_arg_resolve(char **out, const struct agent_request *req, const char *key,
		      const char *def, char *msg, size_t msglen);
/* agent_arg_resolve, replying 400 on failure. */
int agent_arg_path(char **out, struct agent_reply *reply, const struct agent_request *req,
		   const char *key, const char *def);
/* A flag: absent → def; "1"/"true" → 1; "0"/"false" → 0; else 400. */
int agent_arg_flag(int *out, struct agent_reply *reply, const struct agent_request *req,
		   const char *key, int def);
/* The body's JSON object, or reply 400 and <0. *out is the caller's to put. */
int agent_body_object(json_object **out, struct agent_reply *reply, const struct agent_request *req);
/* A JSON string field as a resolved path (malloc'd); absent → def
 * (NULL: required). Replies 400 on failure. */
int agent_field_path(char **out, struct agent_reply *reply, json_object *o,
		     const char *key, const char *def);
/* open() path as a directory (O_CLOEXEC): the descriptor, or a reply (400
 * when path is something else, else the errno's status) and -1. */
int agent_open_dir(struct agent_reply *reply, const char *path);
/* Reply {"error": msg} with the status of an orc_err code. */
void agent_reply_err(struct agent_reply *reply, int err, const char *msg);
/* The byte limit of streamed uploads: ORCHARD_AGENT_MAX_UPLOAD or 1 GiB. */
uint64_t agent_upload_limit(void);

/* files_range.c: conditional and partial GET /files. */

#define AGENT_RANGE_NONE 1            /* send the whole file */
#define AGENT_NOT_MODIFIED 2          /* 304 */
#define AGENT_RANGE_UNSATISFIABLE 3   /* 416 */
/* The file's strong ETag, quoted (out: 80 bytes is enough). */
void agent_file_etag(char *out, size_t n, const struct stat *st);
/* What to send of a file with st and etag, from the request's
 * If-None-Match, Range and If-Range: 0 (a range: *off, *len) or one of
 * the AGENT_ values above (*off 0, *len the whole file). */
int agent_file_conditions(uint64_t *off, uint64_t *len, struct MHD_Connection *conn,
			  const struct stat *st, const char *etag);
/* ETag, Last-Modified and Accept-Ranges on resp. */
void agent_file_validators(struct MHD_Response *resp, const struct stat *st, const char *etag);

/* files_http.c, shared with the base64 and list routes. */

/* Open path for reading when it is a regular file (following symlinks):
 * 0 with *fd_out and *st; ORC_ENOTFOUND or ORC_EINVALID with msg. */
int agent_open_regular(int *fd_out, struct stat *st, const char *path, char *msg, size_t msglen);
/* Add name, type, size, mode ("0644"), modified (RFC 3339, UTC) and, for
 * a symlink, target (read at dirfd_/at_path) to o. */
void agent_stat_fields(json_object *o, const char *name, const struct stat *st,
		       int dirfd_, const char *at_path);

/* files_base64.c: decode standard base64 (padding optional, nothing else
 * allowed) into out, which has room for 3 * ceil(n / 4) bytes. */
int agent_b64_decode(unsigned char *out, size_t *outlen, const char *s, size_t n);

/*
 * files_write.c: a file replaced atomically. Data goes to a temporary file
 * in the target's directory (parents created); commit sets the mode,
 * fsyncs and renames it over the target. Without commit, release removes
 * the temporary file. The SHA-256 and size of what was written are kept.
 */
struct agent_file_writer {
	char *path;
	char *tmp;                 /* NULL once committed */
	int fd;
	mode_t mode;
	uint64_t size;
	struct orc_sha256 sha;
};

#define AGENT_FILE_WRITER_INIT { NULL, NULL, -1, 0, 0, { { 0 }, 0, { 0 }, 0 } }

/* mode < 0: keep the mode (and owner) of a file being replaced, else 0644. */
int agent_file_writer_open(struct agent_file_writer *w, const char *path, int mode,
			   char *msg, size_t msglen);
int agent_file_writer_write(struct agent_file_writer *w, const void *data, size_t n,
			    char *msg, size_t msglen);
int agent_file_writer_commit(struct agent_file_writer *w, char *msg, size_t msglen);
void agent_file_writer_release(struct agent_file_writer *w);
#endif
