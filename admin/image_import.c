/*
 * orchard-admin image import: the sources a rootfs comes from. Nothing here
 * touches the database or the final image directory; image.c does that
 * once a fill has succeeded.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <archive.h>
#include <archive_entry.h>

#include "admin.h"
#include "archive_copy.h"
#include "image.h"
#include "tar_name.h"
#include "xalloc.h"

#define READ_BLOCK (64 * 1024)

extern char **environ;

int img_fill_dir(struct orc_tree_stats *st, int rootfs_fd, const char *src)
{
	int sfd = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int err;

	if (sfd < 0) {
		admin_error("open() \"%s\" failed: %s", src, strerror(errno));
		return -1;
	}
	err = orc_tree_copy(st, sfd, rootfs_fd, -1, -1);
	close(sfd);
	if (err < 0) {
		admin_error("copying \"%s\" failed: %s", src, st->err);
		return -1;
	}
	return 0;
}

/* Put the entry (and a hard link's target) below dir. 1: extract it,
 * 0: skip it (a device, fifo or socket), -1: refuse the whole archive. */
static int place_entry(struct archive_entry *e, const char *dir, const char *file)
{
	const char *name = archive_entry_pathname(e), *link = archive_entry_hardlink(e);
	unsigned type = archive_entry_filetype(e);
	char *full;

	if (orc_tar_name_check(name) < 0) {
		admin_error("\"%s\": refusing entry \"%s\": an absolute name or \"..\" would leave "
			    "the image root", file, name ? name : "");
		return -1;
	}
	if (link) {
		if (orc_tar_name_check(link) < 0) {
			admin_error("\"%s\": refusing entry \"%s\": its link target \"%s\" would leave "
				    "the image root", file, name, link);
			return -1;
		}
		full = xasprintf("%s/%s", dir, link);
		archive_entry_copy_hardlink(e, full);
		free(full);
	} else if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
		return 0;
	}
	full = xasprintf("%s/%s", dir, name);
	archive_entry_copy_pathname(e, full);
	free(full);
	return 1;
}

static int extract(struct orc_tree_stats *st, struct archive *in, struct archive *disk,
		   const char *dir, const char *file)
{
	struct archive *bad = NULL;
	struct archive_entry *e;
	char *name = NULL;
	int r, placed, rc = -1;

	while ((r = archive_read_next_header(in, &e)) == ARCHIVE_OK) {
		free(name);
		name = xstrdup(archive_entry_pathname(e) ? archive_entry_pathname(e) : "");
		if ((placed = place_entry(e, dir, file)) < 0)
			goto done;
		if (!placed) {
			st->skipped++;
			continue;
		}
		if (archive_write_header(disk, e) != ARCHIVE_OK) {
			admin_error("\"%s\": refusing entry \"%s\": %s", file, name, archive_error_string(disk));
			goto done;
		}
		if (archive_entry_size(e) > 0 && orc_archive_copy_data(in, disk, &bad) < 0) {
			if (bad == disk)
				admin_error("\"%s\": cannot write \"%s\": %s", file, name,
					    archive_error_string(disk));
			else
				admin_error("\"%s\" is broken at \"%s\": %s", file, name,
					    archive_error_string(in));
			goto done;
		}
		if (archive_write_finish_entry(disk) != ARCHIVE_OK) {
			admin_error("\"%s\": cannot finish \"%s\": %s", file, name, archive_error_string(disk));
			goto done;
		}
	}
	if (r != ARCHIVE_EOF) {
		admin_error("\"%s\" is not a readable tar archive: %s", file, archive_error_string(in));
		goto done;
	}
	rc = 0;
done:
	free(name);
	return rc;
}

int img_fill_tar(struct orc_tree_stats *st, const char *rootfs_dir, const char *file)
{
	struct archive *in = archive_read_new(), *disk = archive_write_disk_new();
	char real[PATH_MAX];
	int rc = -1;

	if (!in || !disk) {
		admin_error("libarchive: out of memory");
		goto done;
	}
	/* Symlinks above the rootfs (say, /tmp -> /private/tmp) must not
	 * count as "extracting through a symlink". */
	if (!realpath(rootfs_dir, real)) {
		admin_error("realpath() \"%s\" failed: %s", rootfs_dir, strerror(errno));
		goto done;
	}
	archive_read_support_format_tar(in);
	archive_read_support_format_gnutar(in);
	archive_read_support_filter_all(in);
	/* No ARCHIVE_EXTRACT_OWNER: the whole tree is chowned afterwards.
	 * Absolute names are refused by place_entry (which then makes every
	 * name absolute under the rootfs, so libarchive's own check cannot
	 * be used). */
	archive_write_disk_set_options(disk, ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM |
					     ARCHIVE_EXTRACT_SECURE_SYMLINKS |
					     ARCHIVE_EXTRACT_SECURE_NODOTDOT);
	if (archive_read_open_filename(in, file, READ_BLOCK) != ARCHIVE_OK) {
		admin_error("cannot read \"%s\": %s", file, archive_error_string(in));
		goto done;
	}
	if (extract(st, in, disk, real, file) < 0)
		goto done;
	/* Directory modes and times are set here, after their contents. */
	if (archive_write_close(disk) != ARCHIVE_OK) {
		admin_error("cannot finish extracting \"%s\": %s", file, archive_error_string(disk));
		goto done;
	}
	rc = 0;
done:
	if (disk)
		archive_write_free(disk);
	if (in)
		archive_read_free(in);
	return rc;
}

/* Run argv (argv[0] looked up in PATH) with its stdout on our stderr, so
 * that ours stays for results; 0 when it exits 0. */
static int run(char *const *argv, const char *package)
{
	posix_spawn_file_actions_t fa;
	pid_t pid;
	int status, err;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, STDERR_FILENO, STDOUT_FILENO);
	err = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (err) {
		if (err == ENOENT)
			admin_error("%s is not installed (apt-get install %s)", argv[0], package);
		else
			admin_error("starting %s failed: %s", argv[0], strerror(err));
		return -1;
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR) {
			admin_error("waitpid() for %s failed: %s", argv[0], strerror(errno));
			return -1;
		}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		admin_error("%s failed (%s %d)", argv[0], WIFEXITED(status) ? "exit status" : "signal",
			    WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
		return -1;
	}
	return 0;
}

int img_fill_oci(const char *rootfs_dir, const char *layout_ref)
{
	char a0[] = "umoci", a1[] = "raw", a2[] = "unpack", a3[] = "--rootless", a4[] = "--image";
	char *argv[] = { a0, a1, a2, a3, a4, NULL, NULL, NULL };
	const char *colon = strrchr(layout_ref, ':');
	char *ref, *dir;
	int rc;

	/* LAYOUT[:TAG]: a colon inside a directory name is not a tag. */
	if (colon && strchr(colon, '/'))
		colon = NULL;
	ref = colon ? xstrdup(layout_ref) : xasprintf("%s:latest", layout_ref);
	dir = xstrdup(rootfs_dir);
	argv[5] = ref;
	argv[6] = dir;
	rc = run(argv, "umoci");
	free(ref);
	free(dir);
	return rc;
}

int img_fill_docker(const char *tmp_dir, const char *rootfs_dir, const char *ref)
{
	char *src = xasprintf("docker://%s", ref);
	char *layout = xasprintf("%s/oci", tmp_dir);
	char *dst = xasprintf("oci:%s:image", layout);
	char *oci = xasprintf("%s:image", layout);
	char a0[] = "skopeo", a1[] = "copy";
	char *argv[] = { a0, a1, src, dst, NULL };
	int rc;

	rc = run(argv, "skopeo");
	if (rc == 0)
		rc = img_fill_oci(rootfs_dir, oci);
	free(src);
	free(layout);
	free(dst);
	free(oci);
	return rc;
}
