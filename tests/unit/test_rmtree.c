/*
 * lib/rmtree.c: removing a tree whose contents we do not trust. The tests
 * build trees under a fresh mkdtemp() directory and check what is left.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "rmtree.h"
#include "unit.h"

struct scratch {
	char dir[64];
	int fd;
};

static int scratch_open(struct scratch *s)
{
	snprintf(s->dir, sizeof(s->dir), "/tmp/orc-rmtree.XXXXXX");
	if (!mkdtemp(s->dir))
		return -1;
	s->fd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return s->fd;
}

static void scratch_close(struct scratch *s)
{
	orc_tree_remove_at(AT_FDCWD, s->dir);
	close(s->fd);
}

static int exists_at(int fd, const char *path)
{
	struct stat st;

	return fstatat(fd, path, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

static void touch_at(int fd, const char *path)
{
	int f = openat(fd, path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	CHECK(f >= 0);
	if (f >= 0) {
		CHECK(write(f, "x", 1) == 1);
		close(f);
	}
}

/* A nested tree with files, empty dirs and a dir without permissions. */
static void rmtree_removes_nested_and_locked_dirs(void)
{
	struct scratch s;

	if (scratch_open(&s) < 0) {
		CHECK(!"mkdtemp");
		return;
	}
	CHECK(mkdirat(s.fd, "t", 0755) == 0);
	CHECK(mkdirat(s.fd, "t/a", 0755) == 0);
	CHECK(mkdirat(s.fd, "t/a/b", 0755) == 0);
	CHECK(mkdirat(s.fd, "t/empty", 0755) == 0);
	touch_at(s.fd, "t/a/b/f");
	touch_at(s.fd, "t/top");
	/* what a sandbox may do to its own dirs */
	CHECK(fchmodat(s.fd, "t/a/b", 0, 0) == 0);
	CHECK(fchmodat(s.fd, "t/a", 0500, 0) == 0);
	CHECK(orc_tree_remove_at(s.fd, "t") == 0);
	CHECK(!exists_at(s.fd, "t"));
	scratch_close(&s);
}

/* A symlink to a directory outside the tree is removed as a link; what it
 * pointed to survives. So does the target of a symlink named as the root. */
static void rmtree_never_follows_symlinks(void)
{
	struct scratch s;

	if (scratch_open(&s) < 0) {
		CHECK(!"mkdtemp");
		return;
	}
	CHECK(mkdirat(s.fd, "outside", 0755) == 0);
	touch_at(s.fd, "outside/keep");
	CHECK(mkdirat(s.fd, "t", 0755) == 0);
	CHECK(symlinkat("../outside", s.fd, "t/link") == 0);
	CHECK(symlinkat("/nonexistent/dangling", s.fd, "t/dangling") == 0);
	CHECK(orc_tree_remove_at(s.fd, "t") == 0);
	CHECK(!exists_at(s.fd, "t"));
	CHECK(exists_at(s.fd, "outside/keep"));
	CHECK(symlinkat("outside", s.fd, "rootlink") == 0);
	CHECK(orc_tree_remove_at(s.fd, "rootlink") == 0);
	CHECK(!exists_at(s.fd, "rootlink"));
	CHECK(exists_at(s.fd, "outside/keep"));
	scratch_close(&s);
}

/* Nothing there is success; a plain file is removed like a tree of one. */
static void rmtree_missing_and_plain_file(void)
{
	struct scratch s;

	if (scratch_open(&s) < 0) {
		CHECK(!"mkdtemp");
		return;
	}
	CHECK(orc_tree_remove_at(s.fd, "nothing-here") == 0);
	touch_at(s.fd, "file");
	CHECK(orc_tree_remove_at(s.fd, "file") == 0);
	CHECK(!exists_at(s.fd, "file"));
	scratch_close(&s);
}

/* Deeper than the bound: refused (an error), never a stack overflow. */
static void rmtree_bounds_its_depth(void)
{
	struct scratch s;
	char path[4096];
	size_t len = 0;
	int i, err;

	if (scratch_open(&s) < 0) {
		CHECK(!"mkdtemp");
		return;
	}
	for (i = 0; i < 300 && len + 3 < sizeof(path); i++) {
		memcpy(path + len, i ? "/d" : "d", i ? 3 : 2);
		len += i ? 2 : 1;
		if (mkdirat(s.fd, path, 0755) < 0)
			break;
	}
	CHECK(i == 300);
	err = orc_tree_remove_at(s.fd, "d");
	CHECK(err == ORC_ERROR);
	/* The refusal removed nothing on the deep path: undo it from the inside. */
	for (;;) {
		path[len] = '\0';
		CHECK(unlinkat(s.fd, path, AT_REMOVEDIR) == 0);
		if (len <= 1)
			break;
		len -= 2;
	}
	scratch_close(&s);
}

const struct unit_test rmtree_tests[] = {
	{ "rmtree_removes_nested_and_locked_dirs", rmtree_removes_nested_and_locked_dirs },
	{ "rmtree_never_follows_symlinks", rmtree_never_follows_symlinks },
	{ "rmtree_missing_and_plain_file", rmtree_missing_and_plain_file },
	{ "rmtree_bounds_its_depth", rmtree_bounds_its_depth },
	{ NULL, NULL },
};
