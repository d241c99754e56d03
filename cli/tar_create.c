/*
 * A local directory as a tar stream, for `cp DIR ID:PATH`: a thread walks
 * the directory with libarchive's disk reader (symlinks not followed,
 * stored as symlinks) and writes a pax tar into a pipe that curl reads as
 * the request body. Names are relative to the directory, as the agent's
 * archive routes use them. A failure (an unreadable file) stops the
 * stream without an end marker and is reported by cli_tar_finish; the
 * upload is aborted by cli_tar_in_end, so a cut archive is never taken
 * for a whole one.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <archive.h>
#include <archive_entry.h>

#include "err.h"
#include "transfer.h"
#include "xalloc.h"

#define DATA_CHUNK (64 * 1024)

/* Copy one regular file's data; 0 or -1 with the message set. */
static int copy_data(struct cli_tar *t, struct archive *disk, struct archive *out, const char *path)
{
	char *buf = xmalloc(DATA_CHUNK);
	la_ssize_t n;
	int rc = 0;

	while ((n = archive_read_data(disk, buf, DATA_CHUNK)) > 0)
		if (archive_write_data(out, buf, (size_t)n) < 0) {
			cli_tar_fail(t, "writing the tar stream failed: %s", archive_error_string(out));
			rc = -1;
			break;
		}
	if (n < 0) {
		cli_tar_fail(t, "cannot read \"%s\": %s", path, archive_error_string(disk));
		rc = -1;
	}
	free(buf);
	return rc;
}

static int walk(struct cli_tar *t, struct archive *disk, struct archive *out)
{
	struct archive_entry *e = archive_entry_new();
	size_t root = strlen(t->dir);
	const char *path, *name;
	char *rel = NULL;
	unsigned type;
	int r, rc = -1;

	for (;;) {
		archive_entry_clear(e);
		if ((r = archive_read_next_header2(disk, e)) == ARCHIVE_EOF)
			break;
		path = archive_entry_pathname(e);
		if (r != ARCHIVE_OK) {
			cli_tar_fail(t, "cannot read \"%s\": %s", path ? path : t->dir, archive_error_string(disk));
			goto done;
		}
		type = archive_entry_filetype(e);
		if (type == AE_IFDIR && archive_read_disk_descend(disk) != ARCHIVE_OK) {
			cli_tar_fail(t, "cannot read \"%s\": %s", path, archive_error_string(disk));
			goto done;
		}
		if (!path || strncmp(path, t->dir, root)) {
			cli_tar_fail(t, "unexpected path \"%s\" under \"%s\"", path ? path : "", t->dir);
			goto done;
		}
		for (name = path + root; *name == '/'; name++)
			;
		if (!*name)
			continue;    /* the directory itself */
		if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
			fprintf(stderr, "orchardctl: skipping \"%s\": not a file, directory or symlink\n", path);
			continue;
		}
		free(rel);
		rel = xstrdup(name);
		archive_entry_copy_pathname(e, rel);
		if (archive_write_header(out, e) != ARCHIVE_OK) {
			cli_tar_fail(t, "cannot add \"%s\" to the tar stream: %s", path, archive_error_string(out));
			goto done;
		}
		if (type == AE_IFREG && copy_data(t, disk, out, path) < 0)
			goto done;
		t->entries++;
	}
	rc = 0;
done:
	free(rel);
	archive_entry_free(e);
	return rc;
}

static void *create_main(void *arg)
{
	struct cli_tar *t = arg;
	struct archive *disk = archive_read_disk_new(), *out = archive_write_new();
	int ok = 0;

	if (!disk || !out) {
		cli_tar_fail(t, "libarchive: out of memory");
		goto done;
	}
	archive_read_disk_set_symlink_physical(disk);
	archive_read_disk_set_behavior(disk, ARCHIVE_READDISK_NO_XATTR | ARCHIVE_READDISK_NO_ACL |
					     ARCHIVE_READDISK_NO_FFLAGS);
	archive_write_set_bytes_in_last_block(out, 1);
	if (archive_write_set_format_pax_restricted(out) != ARCHIVE_OK ||
	    archive_write_open_fd(out, t->fd) != ARCHIVE_OK) {
		cli_tar_fail(t, "cannot start the tar stream: %s", archive_error_string(out));
		goto done;
	}
	if (archive_read_disk_open(disk, t->dir) != ARCHIVE_OK) {
		cli_tar_fail(t, "cannot read \"%s\": %s", t->dir, archive_error_string(disk));
		goto done;
	}
	if (walk(t, disk, out) < 0)
		goto done;
	if (archive_write_close(out) != ARCHIVE_OK) {
		cli_tar_fail(t, "writing the tar stream failed: %s", archive_error_string(out));
		goto done;
	}
	ok = 1;
done:
	if (out && !ok)
		archive_write_fail(out);   /* no end marker for a cut stream */
	if (out)
		archive_write_free(out);
	if (disk)
		archive_read_free(disk);
	__atomic_store_n(&t->failed, !ok, __ATOMIC_SEQ_CST);
	close(t->fd);
	t->fd = -1;
	return NULL;
}

int cli_tar_create_start(struct cli_tar *t, int *read_fd, const char *dir)
{
	size_t len;
	int err;

	memset(t, 0, sizeof(*t));
	t->dir = xstrdup(dir);
	for (len = strlen(t->dir); len > 1 && t->dir[len - 1] == '/'; len--)
		t->dir[len - 1] = '\0';
	if ((err = cli_tar_thread_start(t, read_fd, 1, create_main)) < 0) {
		free(t->dir);
		t->dir = NULL;
	}
	return err;
}
