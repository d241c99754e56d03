/*
 * orchardctl cp SRC DST: files and directories between here and a sandbox.
 *
 * A file goes as raw bytes (PUT/GET /v1/sandboxes/{id}/files/raw), a
 * directory as a tar stream (PUT/GET .../archive) made or unpacked here by
 * libarchive in a thread (tar_create.c, tar_extract.c); nothing is held
 * whole in memory. The destination follows cp -r: an existing directory
 * receives SRC under its own name, anything else becomes SRC. A download
 * goes to a temporary file renamed over the target, so a failed copy
 * leaves no half file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "transfer.h"
#include "xalloc.h"

const char cp_usage[] =
	"usage: orchardctl cp [-q] [--tar] SRC DST\n"
	"\n"
	"Copy a file or a directory between here and a sandbox. One of SRC and DST\n"
	"is ID:PATH, a path in sandbox ID (relative to /workspace; \"ID:\" is\n"
	"/workspace itself); the other is a local path or -. A local path with a\n"
	"colon in it is written ./a:b.\n"
	"\n"
	"Files are streamed as they are; directories as tar streams, with symlinks\n"
	"kept as symlinks and modes and mtimes kept (not owners). As with cp -r, a\n"
	"DST that is an existing directory receives SRC under its own name;\n"
	"otherwise SRC is copied to DST (a directory's contents into DST, created\n"
	"if missing). A tar from the sandbox is refused entry by entry when it\n"
	"holds absolute names, \"..\" or a path through a symlink.\n"
	"\n"
	"  -            as SRC: stdin becomes the file ID:PATH; as DST: the file's\n"
	"               bytes go to stdout (a directory's as a tar stream)\n"
	"  --tar        with -: stdin is a tar to extract into the directory\n"
	"               ID:PATH, or stdout gets a tar of the directory ID:PATH\n"
	"  -q, --quiet  no progress bar (it is shown only on a terminal, once a\n"
	"               transfer takes more than a second)\n";

enum { OPT_TAR = CLI_OPT_FIRST_FREE };

const struct option cp_opts[] = {
	CLI_COMMON_OPTIONS,
	{ "tar", no_argument, NULL, OPT_TAR },
	{ "quiet", no_argument, NULL, 'q' },
	{ NULL, 0, NULL, 0 },
};

struct cp {
	const struct cli_config *cfg;
	const char *local;           /* a local path or "-" */
	char *id, *path;             /* the sandbox side */
	int tar, quiet;
};

/* The last component of a path ("" for "/", ".", ".."): what cp -r names the copy. */
static char *base_name(const char *path)
{
	size_t end = strlen(path), start;

	while (end > 1 && path[end - 1] == '/')
		end--;
	for (start = end; start > 0 && path[start - 1] != '/'; start--)
		;
	if ((end - start == 1 && path[start] == '.') || (end - start == 2 && !strncmp(path + start, "..", 2)) ||
	    (end == 1 && path[0] == '/'))
		return xstrdup("");
	return xstrndup(path + start, end - start);
}

static char *join(const char *dir, const char *name)
{
	size_t n = strlen(dir);

	if (!*name)
		return xstrdup(dir);
	return xasprintf("%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/", name);
}

/* Report a non-2xx answer; 0 for a 2xx. */
static int check_status(const struct cli_response *r)
{
	if (r->status >= 200 && r->status <= 299)
		return 0;
	cli_report_response(r);
	return ORC_ERROR;
}

/* PUT s's body (an upload) or, without one, GET into it (a download),
 * with a progress bar on label; a non-2xx answer is reported. */
static int transfer(struct cp *c, const char *route, const char *label, struct cli_stream *s)
{
	struct cli_request req = { s->in_fd >= 0 ? "PUT" : "GET", route, NULL, NULL, 0, NULL, NULL };
	struct cli_response r = CLI_RESPONSE_INIT;
	struct cli_progress progress;
	int err;

	cli_progress_init(&progress, label, !c->quiet);
	s->progress = &progress;
	err = cli_http_stream(&r, c->cfg, &req, s);
	if (s->in_fd >= 0)
		cli_progress_end(&progress, s->sent, s->in_size);
	else
		cli_progress_end(&progress, s->received, s->file_size);
	if (err == 0)
		err = check_status(&r);
	cli_response_release(&r);
	return err;
}

/* ---- upload ---- */

/* A file (or stdin) as the file target; mode NULL keeps an existing file's. */
static int put_file(struct cp *c, int fd, int64_t size, int rewind, const char *target, const char *mode,
		    const char *label)
{
	struct cli_stream s;
	char *route = cli_remote_route(c->id, "/files/raw", target);
	struct orc_buf b = ORC_BUF_INIT;
	int err;

	orc_buf_adds(&b, route);
	if (mode)
		cli_path_add_query(&b, "mode", mode);
	cli_stream_init(&s);
	s.in_fd = fd;
	s.in_size = size;
	s.in_rewind = rewind;
	err = transfer(c, orc_buf_cstr(&b), label, &s);
	orc_buf_release(&b);
	free(route);
	return err;
}

/* A tar stream read from fd, extracted into the directory target. */
static int put_tar(struct cp *c, int fd, int64_t size, struct cli_tar *producer, const char *target,
		   const char *label)
{
	struct cli_stream s;
	char *route = cli_remote_route(c->id, "/archive", target);
	int err;

	cli_stream_init(&s);
	s.in_fd = fd;
	s.in_size = size;
	if (producer) {
		s.in_end = cli_tar_in_end;
		s.in_arg = producer;
	}
	err = transfer(c, route, label, &s);
	free(route);
	return err;
}

static int put_dir(struct cp *c, const char *dir, const char *target, const char *label)
{
	struct cli_tar t;
	int fd = -1, err, terr;

	if ((err = cli_tar_create_start(&t, &fd, dir)) < 0)
		return err;
	err = put_tar(c, fd, -1, &t, target, label);
	close(fd);   /* a producer still writing gets EPIPE */
	terr = cli_tar_finish(&t);
	/* The tar's failure is the news when the upload was cut for it or went through. */
	if (terr < 0 && (err == 0 || err == ORC_ERROR)) {
		cli_error("%s", t.msg);
		return ORC_ERROR;
	}
	return err;
}

static int64_t fd_size(int fd, int *regular)
{
	struct stat st;

	*regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
	return *regular ? (int64_t)st.st_size : -1;
}

static int upload(struct cp *c)
{
	json_object *st = NULL, *v;
	char *base = NULL, *target = NULL, mode[8];
	struct stat lst;
	int64_t size;
	int fd = -1, regular, err;

	if (!strcmp(c->local, "-")) {
		size = fd_size(STDIN_FILENO, &regular);
		return c->tar ? put_tar(c, STDIN_FILENO, size, NULL, c->path, "stdin") :
				put_file(c, STDIN_FILENO, size, 0, c->path, NULL, "stdin");
	}
	if (stat(c->local, &lst) < 0) {
		cli_error("cannot read \"%s\": %s", c->local, strerror(errno));
		return ORC_ERROR;
	}
	if (!S_ISREG(lst.st_mode) && !S_ISDIR(lst.st_mode)) {
		cli_error("\"%s\" is not a regular file or a directory", c->local);
		return ORC_ERROR;
	}
	base = base_name(c->local);
	err = cli_remote_stat(&st, c->cfg, c->id, c->path);
	if (err == 0 && json_object_object_get_ex(st, "type", &v) &&
	    !strcmp(json_object_get_string(v), "directory"))
		target = join(cli_field_text(st, "path"), base);
	else if (err == 0 || err == ORC_ENOTFOUND)
		target = c->path[strlen(c->path) - 1] == '/' ? join(c->path, base) : xstrdup(c->path);
	else
		goto done;
	if (S_ISDIR(lst.st_mode)) {
		err = put_dir(c, c->local, target, *base ? base : c->local);
		goto done;
	}
	if ((fd = open(c->local, O_RDONLY | O_CLOEXEC)) < 0) {
		cli_error("cannot open \"%s\": %s", c->local, strerror(errno));
		err = ORC_ERROR;
		goto done;
	}
	size = fd_size(fd, &regular);
	snprintf(mode, sizeof(mode), "%04o", (unsigned)(lst.st_mode & 07777));
	err = put_file(c, fd, size, regular, target, mode, *base ? base : c->local);
done:
	if (fd >= 0)
		close(fd);
	if (st)
		json_object_put(st);
	free(base);
	free(target);
	return err;
}

/* ---- download ---- */

static int get_to_stdout(struct cp *c, const char *suffix, const char *rpath)
{
	struct cli_stream s;
	char *route = cli_remote_route(c->id, suffix, rpath);
	int err;

	cli_stream_init(&s);
	s.out_fd = STDOUT_FILENO;
	err = transfer(c, route, "stdout", &s);
	if (err == ORC_ERROR && s.out_errno)
		cli_error("writing to stdout failed: %s", strerror(s.out_errno));
	free(route);
	return err;
}

static int get_dir(struct cp *c, const char *rpath, const char *target, const char *label)
{
	struct cli_stream s;
	struct cli_tar t;
	char *route = cli_remote_route(c->id, "/archive", rpath);
	int fd = -1, err, terr;

	if ((err = cli_tar_extract_start(&t, &fd, target)) < 0)
		goto done;
	cli_stream_init(&s);
	s.out_fd = fd;
	err = transfer(c, route, label, &s);
	close(fd);   /* the end of the stream for the extractor */
	terr = cli_tar_finish(&t);
	if (terr < 0 && (err == 0 || s.out_errno)) {
		cli_error("%s", t.msg);
		err = ORC_ERROR;
	}
done:
	free(route);
	return err;
}

static int get_file(struct cp *c, const char *rpath, const char *target, const char *label)
{
	struct cli_stream s;
	char *route = cli_remote_route(c->id, "/files/raw", rpath), *tmp, *slash;
	mode_t mask;
	int fd, err;

	slash = strrchr(target, '/');
	tmp = slash ? xasprintf("%.*s/.%s.orchardctl-XXXXXX", (int)(slash - target), target, slash + 1) :
		      xasprintf(".%s.orchardctl-XXXXXX", target);
	if ((fd = mkostemp(tmp, O_CLOEXEC)) < 0) {
		cli_error("cannot create a file beside \"%s\": %s", target, strerror(errno));
		err = ORC_ERROR;
		goto done;
	}
	cli_stream_init(&s);
	s.out_fd = fd;
	err = transfer(c, route, label, &s);
	if (err == ORC_ERROR && s.out_errno)
		cli_error("writing \"%s\" failed: %s", target, strerror(s.out_errno));
	if (err == 0) {
		mask = umask(0);
		umask(mask);
		if (fchmod(fd, s.file_mode ? s.file_mode : 0666 & ~mask) < 0 || rename(tmp, target) < 0) {
			cli_error("cannot write \"%s\": %s", target, strerror(errno));
			err = ORC_ERROR;
		}
	}
	if (err < 0)
		unlink(tmp);
	close(fd);
done:
	free(tmp);
	free(route);
	return err;
}

static int download(struct cp *c)
{
	json_object *st = NULL;
	char *base = NULL, *target = NULL;
	const char *rpath, *type;
	struct stat lst;
	int err, is_dir;

	if ((err = cli_remote_stat(&st, c->cfg, c->id, c->path)) < 0) {
		if (err == ORC_ENOTFOUND)
			cli_error("%s:%s: no such file or directory in the sandbox", c->id, c->path);
		return err;
	}
	rpath = cli_field_text(st, "path");
	type = cli_field_text(st, "type");
	is_dir = !strcmp(type, "directory");
	if (!strcmp(c->local, "-")) {
		if (c->tar && !is_dir) {
			cli_error("%s:%s is not a directory: --tar copies directories", c->id, rpath);
			err = ORC_ERROR;
		} else {
			err = get_to_stdout(c, is_dir ? "/archive" : "/files/raw", rpath);
		}
		goto done;
	}
	base = base_name(rpath);
	if (stat(c->local, &lst) == 0 && S_ISDIR(lst.st_mode))
		target = join(c->local, base);
	else
		target = xstrdup(c->local);
	err = is_dir ? get_dir(c, rpath, target, *base ? base : rpath) :
		       get_file(c, rpath, target, *base ? base : rpath);
done:
	json_object_put(st);
	free(base);
	free(target);
	return err;
}

int cmd_cp(struct cli_config *cfg, int argc, char **argv)
{
	struct cp c = { 0 };
	char *sid = NULL, *spath = NULL, *did = NULL, *dpath = NULL;
	int opt, rc, src_remote, dst_remote;

	c.cfg = cfg;
	optind = 0;
	while ((opt = getopt_long(argc, argv, "q", cp_opts, NULL)) != -1) {
		if (opt == 'q')
			c.quiet = 1;
		else if (opt == OPT_TAR)
			c.tar = 1;
		else if (cli_common_option(cfg, opt, optarg) < 0)
			return cli_bad_option(cp_usage);
	}
	if (argc - optind != 2)
		return cli_usage_error(cp_usage, "cp: expected SRC and DST");
	src_remote = cli_remote_split(&sid, &spath, argv[optind]) == 0;
	dst_remote = cli_remote_split(&did, &dpath, argv[optind + 1]) == 0;
	if (src_remote == dst_remote) {
		rc = cli_usage_error(cp_usage, src_remote ?
				     "cp: both SRC and DST are in a sandbox; copy through a local directory" :
				     "cp: one of SRC and DST must be ID:PATH (a path in a sandbox)");
		goto done;
	}
	c.local = src_remote ? argv[optind + 1] : argv[optind];
	c.id = src_remote ? sid : did;
	c.path = src_remote ? spath : dpath;
	if (c.tar && strcmp(c.local, "-")) {
		rc = cli_usage_error(cp_usage, "cp: --tar is for - (a tar on stdin or stdout)");
		goto done;
	}
	if ((rc = cli_config_check(cfg)) != 0)
		goto done;
	rc = (src_remote ? download(&c) : upload(&c)) < 0 ? CLI_FAIL : CLI_OK;
done:
	free(sid);
	free(spath);
	free(did);
	free(dpath);
	return rc;
}
