#include "files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "fsutil.h"
#include "json.h"
#include "xalloc.h"

/* GET /files/list: one directory, sorted by name, symlinks not followed. */

#define LIST_MAX_ENTRIES 100000

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in the directory open at fd (which this takes), sorted. */
static int read_names(char ***out, size_t *count, int fd, const char *path,
		      char *msg, size_t msglen)
{
	DIR *d = fdopendir(fd);
	struct dirent *de;
	char **names = NULL;
	size_t n = 0, alloc = 0, i;
	int err = 0;

	if (!d) {
		close(fd);
		snprintf(msg, msglen, "fdopendir() \"%s\" failed: %s", path, strerror(errno));
		return ORC_ERROR;
	}
	for (;;) {
		errno = 0;
		if (!(de = readdir(d))) {
			if (errno) {
				snprintf(msg, msglen, "readdir() \"%s\" failed: %s", path, strerror(errno));
				err = ORC_ERROR;
			}
			break;
		}
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (n == LIST_MAX_ENTRIES) {
			snprintf(msg, msglen, "\"%s\" has more than %d entries", path, LIST_MAX_ENTRIES);
			err = ORC_ETOOBIG;
			break;
		}
		if (n == alloc) {
			alloc = alloc ? 2 * alloc : 64;
			names = xrealloc(names, orc_mul_size(alloc, sizeof(*names)));
		}
		names[n++] = xstrdup(de->d_name);
	}
	closedir(d);
	if (err < 0) {
		for (i = 0; i < n; i++)
			free(names[i]);
		free(names);
		return err;
	}
	if (n)
		qsort(names, n, sizeof(*names), by_name);
	*out = names;
	*count = n;
	return 0;
}

void agent_handle_files_list(struct agent_reply *reply, const struct agent_request *req)
{
	json_object *o = NULL, *files, *entry;
	char **names = NULL, *path = NULL, msg[512];
	struct stat st;
	size_t n = 0, i;
	int fd = -1, err;

	if (agent_arg_path(&path, reply, req, "path", AGENT_WORKSPACE) < 0)
		return;
	if ((fd = agent_open_dir(reply, path)) < 0)
		goto done;
	if ((err = read_names(&names, &n, dup(fd), path, msg, sizeof(msg))) < 0) {
		agent_reply_err(reply, err, msg);
		goto done;
	}
	o = json_object_new_object();
	files = json_object_new_array_ext((int)n);
	json_object_object_add(o, "path", json_object_new_string(path));
	json_object_object_add(o, "files", files);
	for (i = 0; i < n; i++) {
		/* Gone since readdir: skip it rather than fail the listing. */
		if (fstatat(fd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		entry = json_object_new_object();
		agent_stat_fields(entry, names[i], &st, fd, names[i]);
		json_object_array_add(files, entry);
	}
	agent_reply_json(reply, 200, o);
done:
	for (i = 0; i < n; i++)
		free(names[i]);
	free(names);
	json_object_put(o);
	if (fd >= 0)
		close(fd);
	free(path);
}
