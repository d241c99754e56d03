/*
 * Leftovers of an orchard-admin image import or rm that died halfway
 * (image.c), swept by the next import or rm:
 *
 *   .<name>.tmp-<pid>/   an import that never published: removed
 *   .<name>.rm-<pid>/    an rm renamed the image aside, then died before or
 *                        after its COMMIT: put back under <name> while the
 *                        images row still exists (the rm did not commit),
 *                        else removed
 *
 * Only when <pid> is gone: a running import or rm keeps its directory.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "admin.h"
#include "image.h"
#include "rmtree.h"

enum leftover { LEFT_NONE, LEFT_TMP, LEFT_RM };

/* ".<name>.tmp-<pid>" or ".<name>.rm-<pid>" with a dead pid: which, and the
 * image name into name (ORC_IMG_NAME_MAX + 1 bytes). */
static enum leftover parse_leftover(char *name, const char *entry)
{
	static const struct { const char *tag; enum leftover kind; } tags[] = {
		{ ".tmp-", LEFT_TMP },
		{ ".rm-", LEFT_RM },
	};
	const char *dot, *digits;
	char *end;
	size_t i, n;
	long pid;

	if (entry[0] != '.')
		return LEFT_NONE;
	for (i = 0; i < sizeof(tags) / sizeof(*tags); i++) {
		if (!(dot = strstr(entry + 1, tags[i].tag)))
			continue;
		digits = dot + strlen(tags[i].tag);
		errno = 0;
		pid = strtol(digits, &end, 10);
		n = (size_t)(dot - entry - 1);
		if (!*digits || *end || errno || pid <= 0 || n > ORC_IMG_NAME_MAX)
			return LEFT_NONE;
		memcpy(name, entry + 1, n);
		name[n] = '\0';
		if (!orc_img_name_valid(name))
			return LEFT_NONE;
		if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			return LEFT_NONE;           /* still running (or not ours to tell) */
		return tags[i].kind;
	}
	return LEFT_NONE;
}

/* 1 when the images row of name exists, 0 when not, -1 on a database error. */
static int row_exists(struct admin_ctx *ctx, const char *name)
{
	const char *params[1] = { name };
	PGresult *res = NULL;
	int n;

	if (admin_query(&res, ctx, "SELECT 1 FROM images WHERE name = $1", 1, params) < 0)
		return -1;
	n = PQntuples(res) > 0;
	PQclear(res);
	return n;
}

static void sweep_one(struct admin_ctx *ctx, int store_fd, const char *store, const char *entry,
		      enum leftover kind, const char *name)
{
	if (kind == LEFT_RM) {
		int row = row_exists(ctx, name);

		if (row < 0)
			return;                      /* cannot tell: leave it */
		if (row && renameat2(store_fd, entry, store_fd, name, RENAME_NOREPLACE) == 0) {
			fprintf(stderr, "orchard-admin: restored image \"%s\" from an interrupted rm\n",
				name);
			return;
		}
	}
	if (orc_tree_remove_at(store_fd, entry) < 0)
		admin_error("could not remove the leftover \"%s/%s\"", store, entry);
	else
		fprintf(stderr, "orchard-admin: removed \"%s/%s\", left by an interrupted image %s\n",
			store, entry, kind == LEFT_RM ? "rm" : "import");
}

void img_sweep(struct admin_ctx *ctx, int store_fd, const char *store)
{
	char name[ORC_IMG_NAME_MAX + 1];
	int fd = fcntl(store_fd, F_DUPFD_CLOEXEC, 0);
	struct dirent *de;
	enum leftover kind;
	DIR *d;

	if (fd < 0)
		return;
	if (!(d = fdopendir(fd))) {
		close(fd);
		return;
	}
	while ((de = readdir(d)) != NULL)
		if ((kind = parse_leftover(name, de->d_name)) != LEFT_NONE)
			sweep_one(ctx, store_fd, store, de->d_name, kind, name);
	closedir(d);
}
