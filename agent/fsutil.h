#ifndef AGENT_FSUTIL_H
#define AGENT_FSUTIL_H
#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>
/*
 * Filesystem helpers of the files, tar and git endpoints. Functions return
 * 0 or a negative orc_err code (agent_errno_err maps errno) and write a
 * message naming the call and the path into msg.
 */

#define AGENT_WORKSPACE "/workspace"

/*
 * A path from a request, made absolute and normal: at most PATH_MAX-1
 * bytes, no NUL; a relative path is taken from /workspace; "//", "." and
 * ".." are resolved by name (symlinks are not followed here). *out is
 * malloc'd.
 */
int agent_path_resolve(char **out, const char *in, size_t len, char *msg, size_t msglen);

/* errno → ORC_ENOTFOUND (ENOENT, ENOTDIR), ORC_EFORBIDDEN (EACCES, EPERM,
 * EROFS), ORC_ECONFLICT (EEXIST, ENOTEMPTY), ORC_EINVALID (ENAMETOOLONG,
 * ELOOP, EISDIR), ORC_ERROR otherwise. */
int agent_errno_err(int e);
/* The HTTP status of an orc_err code (the agent's one mapping). */
unsigned agent_err_status(int err);

/* mkdir -p: every missing directory of path with mode (0755 usual);
 * an existing non-directory on the way is ORC_ECONFLICT. */
int agent_mkdirs(const char *path, mode_t mode, char *msg, size_t msglen);
/* The parent directories of a file path, as agent_mkdirs. */
int agent_mkdirs_parent(const char *path, char *msg, size_t msglen);

/* Remove path: a file or symlink (the link, never its target), or a
 * directory; a non-empty directory only with recursive, then its whole
 * tree without following symlinks (openat/unlinkat, O_NOFOLLOW). */
int agent_remove(const char *path, int recursive, char *msg, size_t msglen);

/* "file", "directory", "symlink" or "other". */
const char *agent_file_type(mode_t mode);
/* st_mtim as RFC 3339 in UTC, "2026-01-02T03:04:05Z" (out: 32 bytes). */
void agent_rfc3339(char *out, size_t outlen, const struct timespec *ts);
/* The permission bits as 4 octal digits, "0644" (out: 8 bytes). */
void agent_mode_str(char *out, size_t outlen, mode_t mode);
/* "644", "0644", "0755", "4755": octal, at most 07777. */
int agent_parse_mode(mode_t *out, const char *s);
#endif
