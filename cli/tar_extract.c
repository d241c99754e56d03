/*
 * A tar stream into a local directory, for `cp ID:DIR PATH`: curl writes
 * the answer into a pipe and a thread extracts it with libarchive. The
 * archive comes from a sandbox, which runs untrusted code, so every entry
 * must stay inside the directory: absolute names and ".." are refused by
 * name (orc_tar_name_check), writing through a symlink by libarchive
 * (ARCHIVE_EXTRACT_SECURE_SYMLINKS, on the directory's real path so that
 * symlinks above it do not count), and devices, fifos and sockets are
 * refused. The first refusal stops the extraction: what came before it
 * stays, and the transfer is cut (the pipe closes).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <archive.h>
#include <archive_entry.h>

#include "archive_copy.h"
#include "err.h"
#include "tar_name.h"
#include "transfer.h"
#include "xalloc.h"

#define READ_BLOCK (64 * 1024)

/* Point the entry (and a hard link's target) below t->dir; -1 when it may not go there. */
static int place_entry(struct cli_tar *t, struct archive_entry *e)
{
	const char *name = archive_entry_pathname(e), *link = archive_entry_hardlink(e);
	unsigned type = archive_entry_filetype(e);
	char *full;

	if (orc_tar_name_check(name) < 0) {
		cli_tar_fail(t, "refusing entry \"%s\": an absolute name or \"..\" would leave \"%s\"",
			 name ? name : "", t->dir);
		return -1;
	}
	if (link) {
		if (orc_tar_name_check(link) < 0) {
			cli_tar_fail(t, "refusing entry \"%s\": its link target \"%s\" would leave \"%s\"", name, link,
				 t->dir);
			return -1;
		}
		full = xasprintf("%s/%s", t->dir, link);
		archive_entry_copy_hardlink(e, full);
		free(full);
	} else if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
		cli_tar_fail(t, "refusing entry \"%s\": not a file, directory or symlink", name);
		return -1;
	}
	full = xasprintf("%s/%s", t->dir, name);
	archive_entry_copy_pathname(e, full);
	free(full);
	return 0;
}

static int extract(struct cli_tar *t, struct archive *in, struct archive *disk)
{
	struct archive *bad = NULL;
	struct archive_entry *e;
	char *name = NULL;
	int r, rc = -1;

	while ((r = archive_read_next_header(in, &e)) == ARCHIVE_OK) {
		free(name);
		name = xstrdup(archive_entry_pathname(e) ? archive_entry_pathname(e) : "");
		if (place_entry(t, e) < 0)
			goto done;
		if (archive_write_header(disk, e) != ARCHIVE_OK) {
			cli_tar_fail(t, "refusing entry \"%s\": %s", name, archive_error_string(disk));
			goto done;
		}
		if (archive_entry_size(e) > 0 && orc_archive_copy_data(in, disk, &bad) < 0) {
			if (bad == disk)
				cli_tar_fail(t, "cannot write \"%s\": %s", name, archive_error_string(disk));
			else
				cli_tar_fail(t, "the tar stream is broken at \"%s\": %s", name,
					 archive_error_string(in));
			goto done;
		}
		if (archive_write_finish_entry(disk) != ARCHIVE_OK) {
			cli_tar_fail(t, "cannot finish \"%s\": %s", name, archive_error_string(disk));
			goto done;
		}
		t->entries++;
	}
	if (r != ARCHIVE_EOF) {
		cli_tar_fail(t, "the tar stream is broken: %s", archive_error_string(in));
		goto done;
	}
	rc = 0;
done:
	free(name);
	return rc;
}

static void *extract_main(void *arg)
{
	struct cli_tar *t = arg;
	struct archive *in = archive_read_new(), *disk = archive_write_disk_new();
	char *junk = xmalloc(READ_BLOCK);
	ssize_t n;
	int ok = 0;

	if (!in || !disk) {
		cli_tar_fail(t, "libarchive: out of memory");
		goto done;
	}
	archive_read_support_format_tar(in);
	archive_read_support_filter_gzip(in);
	archive_write_disk_set_options(disk, ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM |
					     ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NODOTDOT);
	if (archive_read_open_fd(in, t->fd, READ_BLOCK) != ARCHIVE_OK) {
		cli_tar_fail(t, "not a tar stream: %s", archive_error_string(in));
		goto done;
	}
	if (extract(t, in, disk) < 0)
		goto done;
	/* Directory modes and times are set here, after their contents. */
	if (archive_write_close(disk) != ARCHIVE_OK) {
		cli_tar_fail(t, "cannot finish extracting into \"%s\": %s", t->dir, archive_error_string(disk));
		goto done;
	}
	/* Padding after the end marker: read it, so the writer does not fail. */
	do
		n = read(t->fd, junk, READ_BLOCK);
	while (n > 0 || (n < 0 && errno == EINTR));
	ok = 1;
done:
	if (disk)
		archive_write_free(disk);
	if (in)
		archive_read_free(in);
	free(junk);
	__atomic_store_n(&t->failed, !ok, __ATOMIC_SEQ_CST);
	close(t->fd);
	t->fd = -1;
	return NULL;
}

/* mkdir -p; 0 or -1 with errno. */
static int mkdir_p(const char *dir)
{
	char *p = xstrdup(dir), *s;
	int rc = 0;

	for (s = p + 1; rc == 0; s++) {
		if (*s != '/' && *s != '\0')
			continue;
		char c = *s;
		*s = '\0';
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			rc = -1;
		*s = c;
		if (!c)
			break;
	}
	free(p);
	return rc;
}

int cli_tar_extract_start(struct cli_tar *t, int *write_fd, const char *dir)
{
	char real[PATH_MAX];
	struct stat st;
	int err;

	memset(t, 0, sizeof(*t));
	t->fd = -1;
	if (mkdir_p(dir) < 0) {
		cli_error("cannot create directory \"%s\": %s", dir, strerror(errno));
		return ORC_ERROR;
	}
	if (!realpath(dir, real) || stat(real, &st) < 0) {
		cli_error("cannot resolve \"%s\": %s", dir, strerror(errno));
		return ORC_ERROR;
	}
	if (!S_ISDIR(st.st_mode)) {
		cli_error("\"%s\" is not a directory", dir);
		return ORC_ERROR;
	}
	t->dir = xstrdup(real);
	if ((err = cli_tar_thread_start(t, write_fd, 0, extract_main)) < 0) {
		free(t->dir);
		t->dir = NULL;
	}
	return err;
}
