/*
 * orchard-admin image import|ls|rm: the local driver's image store
 * (lib/imgstore.h, docs/images.md).
 *
 * An import is built in $ORCHARD_IMAGE_DIR/.<name>.tmp-<pid>/ and appears
 * under its name in one step: inside the transaction that inserts its
 * `images` row, the directory is renamed into place (RENAME_NOREPLACE),
 * then the row commits. A crash leaves at most a .tmp- directory, never a
 * half image under its name; the next import or rm sweeps it
 * (image_sweep.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "admin.h"
#include "err.h"
#include "image.h"
#include "io.h"
#include "json.h"
#include "rmtree.h"
#include "strutil.h"
#include "xalloc.h"

static const char import_usage[] =
	"usage: orchard-admin image import NAME (--dir PATH | --tar FILE | --oci LAYOUT[:TAG] |\n"
	"                                        --docker REF)\n"
	"\n"
	"Import a root filesystem under NAME for the local driver's sandboxes\n"
	"(\"image\": \"NAME\" in POST /sandboxes). NAME: [a-z0-9][a-z0-9._-]{0,62},\n"
	"not \"host\". The tree is owned by the sandbox uid afterwards\n"
	"($ORCHARD_SANDBOX_UID/GID, default 65534 as root, else your own).\n"
	"\n"
	"  --dir PATH            copy a directory (modes, times, symlinks)\n"
	"  --tar FILE            extract a tarball (gzip, xz, zstd... detected);\n"
	"                        absolute names and \"..\" are refused, devices skipped\n"
	"  --oci LAYOUT[:TAG]    unpack an OCI image layout with umoci (TAG: latest)\n"
	"  --docker REF          pull with skopeo (docker://REF), then as --oci\n"
	"\n"
	"The store is $ORCHARD_IMAGE_DIR, else \"images\" beside $ORCHARD_STATE_DIR.\n"
	"\n"
	"Example:\n"
	"  orchard-admin image import alpine --tar alpine-minirootfs.tar.gz\n";

static const char ls_usage[] =
	"usage: orchard-admin image ls\n"
	"\n"
	"List imported images: name, size, live sandboxes using it, created, source.\n"
	"STATE is \"missing\" when the row exists but its directory does not.\n";

static const char rm_usage[] =
	"usage: orchard-admin image rm NAME\n"
	"\n"
	"Remove an image (its row and its directory). Refused while a pending,\n"
	"ready or deleting sandbox uses it.\n";

const char image_usage[] =
	"usage: orchard-admin image import NAME (--dir PATH | --tar FILE | --oci LAYOUT[:TAG] |\n"
	"                                        --docker REF)\n"
	"       orchard-admin image ls\n"
	"       orchard-admin image rm NAME\n"
	"\n"
	"The local driver's images (docs/images.md), stored in $ORCHARD_IMAGE_DIR\n"
	"(default: \"images\" beside $ORCHARD_STATE_DIR). Sub-commands take --help.\n"
	"\n"
	"Examples:\n"
	"  orchard-admin image import tools --dir ./rootfs\n"
	"  orchard-admin image import alpine --tar alpine-minirootfs.tar.gz\n"
	"  orchard-admin image import app --oci ./layout:v1\n"
	"  orchard-admin image rm tools\n";

enum img_kind { IMG_DIR, IMG_TAR, IMG_OCI, IMG_DOCKER };
static const char *const kind_names[] = { "dir", "tar", "oci", "docker" };

/* The store: created (0700) if missing; *out_fd open on it. */
static int open_store(char **out_path, int *out_fd)
{
	char *dir = orc_img_dir_default(getenv("ORCHARD_STATE_DIR"));
	int fd;

	if (!dir) {
		admin_error("no image store: set ORCHARD_IMAGE_DIR (or ORCHARD_STATE_DIR, whose "
			    "sibling \"images\" is the default)");
		return -1;
	}
	if (!orc_img_dir_valid(dir)) {
		admin_error("image store \"%s\" must be an absolute path of at most %d bytes without "
			    "',' or ':'", dir, ORC_IMG_DIR_MAX);
		free(dir);
		return -1;
	}
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		admin_error("mkdir() \"%s\" failed: %s", dir, strerror(errno));
		free(dir);
		return -1;
	}
	if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		admin_error("open() \"%s\" failed: %s", dir, strerror(errno));
		free(dir);
		return -1;
	}
	*out_path = dir;
	*out_fd = fd;
	return 0;
}

/* The host identity that owns image trees: the sandboxes' (controller's
 * ORCHARD_SANDBOX_UID/GID as root, else whoever runs this). */
static int sandbox_owner(uid_t *uid, gid_t *gid)
{
	int64_t u = 65534, g = 65534;
	const char *v;

	if (geteuid() != 0) {
		*uid = geteuid();
		*gid = getegid();
		return 0;
	}
	if (((v = getenv("ORCHARD_SANDBOX_UID")) && *v && orc_parse_i64(&u, v, 0, 2147483646) < 0) ||
	    ((v = getenv("ORCHARD_SANDBOX_GID")) && *v && orc_parse_i64(&g, v, 0, 2147483646) < 0)) {
		admin_error("ORCHARD_SANDBOX_UID and ORCHARD_SANDBOX_GID must be numeric ids");
		return -1;
	}
	*uid = (uid_t)u;
	*gid = (gid_t)g;
	return 0;
}

static int write_manifest(int dfd, const char *name, const char *source,
			  const struct orc_tree_stats *st, uid_t uid, gid_t gid)
{
	json_object *o = json_object_new_object();
	char created[32];
	time_t now = time(NULL);
	struct tm tm;
	const char *text;
	int fd, err = 0;

	gmtime_r(&now, &tm);
	strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ", &tm);
	json_object_object_add(o, "name", json_object_new_string(name));
	json_object_object_add(o, "source", json_object_new_string(source));
	json_object_object_add(o, "size_bytes", json_object_new_int64(st->bytes));
	json_object_object_add(o, "uid", json_object_new_int64(uid));
	json_object_object_add(o, "gid", json_object_new_int64(gid));
	json_object_object_add(o, "created", json_object_new_string(created));
	text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
	fd = openat(dfd, "image.json", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0 || orc_write_all(fd, text, strlen(text)) < 0 || orc_write_all(fd, "\n", 1) < 0) {
		admin_error("writing image.json failed: %s", strerror(errno));
		err = -1;
	}
	if (fd >= 0)
		close(fd);
	json_object_put(o);
	return err;
}

static int fill(struct orc_tree_stats *st, enum img_kind kind, const char *arg, int tmp_fd,
		const char *tmp_path)
{
	char *rootfs = xasprintf("%s/rootfs", tmp_path);
	int rfd = -1, rc = -1;

	if (mkdirat(tmp_fd, "rootfs", 0755) < 0 ||
	    (rfd = openat(tmp_fd, "rootfs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		admin_error("mkdir() \"%s\" failed: %s", rootfs, strerror(errno));
		goto done;
	}
	switch (kind) {
	case IMG_DIR: rc = img_fill_dir(st, rfd, arg); break;
	case IMG_TAR: rc = img_fill_tar(st, rootfs, arg); break;
	case IMG_OCI: rc = img_fill_oci(rootfs, arg); break;
	case IMG_DOCKER:
		rc = img_fill_docker(tmp_path, rootfs, arg);
		if (orc_tree_remove_at(tmp_fd, "oci") < 0 && rc == 0) {
			admin_error("removing the pulled layout \"%s/oci\" failed", tmp_path);
			rc = -1;
		}
		break;
	}
done:
	if (rfd >= 0)
		close(rfd);
	free(rootfs);
	return rc;
}

/* Own the tree as the sandboxes and measure it. */
static int settle(struct orc_tree_stats *st, int tmp_fd, uid_t uid, gid_t gid)
{
	struct orc_tree_stats cs = { 0 };
	int rfd = openat(tmp_fd, "rootfs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int err;

	if (rfd < 0) {
		admin_error("the import made no rootfs directory: %s", strerror(errno));
		return -1;
	}
	err = orc_tree_chown(&cs, rfd, uid, gid);
	close(rfd);
	if (err < 0) {
		admin_error("setting the image's owner to %u:%u failed: %s", (unsigned)uid, (unsigned)gid,
			    cs.err);
		return -1;
	}
	st->bytes = cs.bytes;
	st->entries = cs.entries;
	st->skipped += cs.skipped;
	return 0;
}

/* Insert the row and rename the tree into place, both or neither. */
static int publish(struct admin_ctx *ctx, int store_fd, const char *tmp, const char *name,
		   const char *source, int64_t bytes)
{
	char size[24];
	const char *params[3] = { name, source, size };
	int err;

	snprintf(size, sizeof(size), "%" PRId64, bytes);
	if (admin_query(NULL, ctx, "BEGIN", 0, NULL) < 0)
		goto fail;
	err = admin_query(NULL, ctx, "INSERT INTO images (name, source, size_bytes) VALUES ($1, $2, $3)",
			  3, params);
	if (err == ORC_ECONFLICT) {
		admin_error("image \"%s\" already exists (orchard-admin image rm %s first)", name, name);
		admin_query(NULL, ctx, "ROLLBACK", 0, NULL);
		return -1;
	}
	if (err < 0)
		goto fail;
	if (renameat2(store_fd, tmp, store_fd, name, RENAME_NOREPLACE) < 0) {
		if (errno == EEXIST)
			admin_error("image directory \"%s\" exists without a row (a crashed import?); "
				    "remove it with orchard-admin image rm %s", name, name);
		else
			admin_error("rename() \"%s\" to \"%s\" failed: %s", tmp, name, strerror(errno));
		admin_query(NULL, ctx, "ROLLBACK", 0, NULL);
		return -1;
	}
	if (admin_query(NULL, ctx, "COMMIT", 0, NULL) < 0) {
		/* Not published: take the directory back. */
		renameat2(store_fd, name, store_fd, tmp, RENAME_NOREPLACE);
		goto fail;
	}
	return 0;
fail:
	admin_error("recording image \"%s\" failed: %s", name, ctx->errmsg);
	admin_query(NULL, ctx, "ROLLBACK", 0, NULL);
	return -1;
}

static int image_import(struct admin_ctx *ctx, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "dir", required_argument, NULL, 'd' },
		{ "tar", required_argument, NULL, 't' },
		{ "oci", required_argument, NULL, 'o' },
		{ "docker", required_argument, NULL, 'D' },
		{ NULL, 0, NULL, 0 },
	};
	struct orc_tree_stats st = { 0 };
	enum img_kind kind = IMG_DIR;
	const char *name, *arg = NULL, *params[1];
	char *store = NULL, *tmp = NULL, *tmp_path = NULL, *source = NULL;
	int opt, store_fd = -1, tmp_fd = -1, nsrc = 0, rc = ADMIN_FAIL;
	PGresult *res = NULL;
	uid_t uid;
	gid_t gid;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'd': kind = IMG_DIR; break;
		case 't': kind = IMG_TAR; break;
		case 'o': kind = IMG_OCI; break;
		case 'D': kind = IMG_DOCKER; break;
		default: return admin_bad_option(import_usage);
		}
		arg = optarg;
		nsrc++;
	}
	if (argc - optind != 1)
		return admin_usage_error(import_usage, "image import: expected one NAME");
	if (nsrc != 1 || !*arg)
		return admin_usage_error(import_usage, "image import: give exactly one of --dir, --tar, "
					 "--oci or --docker");
	name = argv[optind];
	if (!orc_img_name_valid(name)) {
		admin_error("invalid image name \"%s\": use [a-z0-9][a-z0-9._-]{0,62} (\"host\" is "
			    "reserved)", name);
		return ADMIN_FAIL;
	}
	if (sandbox_owner(&uid, &gid) < 0 || open_store(&store, &store_fd) < 0)
		return ADMIN_FAIL;
	if (admin_connect(ctx) < 0)
		goto done;
	img_sweep(ctx, store_fd, store);
	/* Fail before a long copy when the name is taken. */
	params[0] = name;
	if (admin_query(&res, ctx, "SELECT 1 FROM images WHERE name = $1", 1, params) < 0) {
		admin_error("reading the images table failed: %s (orchard-admin migrate?)", ctx->errmsg);
		goto done;
	}
	if (PQntuples(res) || faccessat(store_fd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
		admin_error("image \"%s\" already exists (orchard-admin image rm %s first)", name, name);
		goto done;
	}
	source = xasprintf("%s %s", kind_names[kind], arg);
	if (kind == IMG_DIR || kind == IMG_TAR) {
		char *abs = realpath(arg, NULL);
		if (abs) {
			free(source);
			source = xasprintf("%s %s", kind_names[kind], abs);
			free(abs);
		}
	}
	tmp = xasprintf(".%s.tmp-%ld", name, (long)getpid());
	tmp_path = xasprintf("%s/%s", store, tmp);
	orc_tree_remove_at(store_fd, tmp);
	if (mkdirat(store_fd, tmp, 0700) < 0 ||
	    (tmp_fd = openat(store_fd, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		admin_error("mkdir() \"%s\" failed: %s", tmp_path, strerror(errno));
		goto done;
	}
	if (fill(&st, kind, arg, tmp_fd, tmp_path) < 0 || settle(&st, tmp_fd, uid, gid) < 0 ||
	    fchmod(tmp_fd, 0755) < 0 || write_manifest(tmp_fd, name, source, &st, uid, gid) < 0 ||
	    publish(ctx, store_fd, tmp, name, source, st.bytes) < 0)
		goto done;
	printf("imported image \"%s\": %" PRId64 " entries, %" PRId64 " bytes", name, st.entries, st.bytes);
	if (st.skipped)
		printf(", %" PRId64 " device nodes, fifos or sockets skipped", st.skipped);
	printf("\n");
	rc = ADMIN_OK;
done:
	if (tmp_fd >= 0)
		close(tmp_fd);
	if (rc != ADMIN_OK && tmp && orc_tree_remove_at(store_fd, tmp) < 0)
		admin_error("could not remove \"%s\"", tmp_path);
	if (store_fd >= 0)
		close(store_fd);
	PQclear(res);
	free(store);
	free(tmp);
	free(tmp_path);
	free(source);
	return rc;
}

static int image_ls(struct admin_ctx *ctx, int argc, char **argv)
{
	PGresult *res = NULL;
	char *store = NULL, *rootfs;
	int store_fd = -1, i, n;

	(void)argv;
	if (argc != 1)
		return admin_usage_error(ls_usage, "image ls: takes no arguments");
	if (open_store(&store, &store_fd) < 0)
		return ADMIN_FAIL;
	if (admin_connect(ctx) < 0 ||
	    admin_query(&res, ctx,
			"SELECT i.name, i.size_bytes,"
			" (SELECT count(*) FROM sandboxes s WHERE s.image = i.name"
			"  AND s.state IN ('pending', 'ready', 'deleting')),"
			" to_char(i.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), i.source"
			" FROM images i ORDER BY i.name", 0, NULL) < 0) {
		if (ctx->conn)
			admin_error("listing images failed: %s", ctx->errmsg);
		close(store_fd);
		free(store);
		return ADMIN_FAIL;
	}
	n = PQntuples(res);
	printf("%-24s %-8s %14s %-9s %-20s %s\n", "NAME", "STATE", "SIZE", "SANDBOXES", "CREATED", "SOURCE");
	for (i = 0; i < n; i++) {
		rootfs = xasprintf("%s/rootfs", PQgetvalue(res, i, 0));
		printf("%-24s %-8s %14s %-9s %-20s %s\n", PQgetvalue(res, i, 0),
		       faccessat(store_fd, rootfs, F_OK, AT_SYMLINK_NOFOLLOW) == 0 ? "ok" : "missing",
		       PQgetvalue(res, i, 1), PQgetvalue(res, i, 2), PQgetvalue(res, i, 3),
		       PQgetvalue(res, i, 4));
		free(rootfs);
	}
	PQclear(res);
	close(store_fd);
	free(store);
	return ADMIN_OK;
}

static int image_rm(struct admin_ctx *ctx, int argc, char **argv)
{
	const char *name, *params[1];
	PGresult *res = NULL;
	char *store = NULL, *gone = NULL;
	int store_fd = -1, have_row = 0, have_dir, i, rc = ADMIN_FAIL;

	if (argc != 2)
		return admin_usage_error(rm_usage, "image rm: expected one NAME");
	name = argv[1];
	if (!orc_img_name_valid(name)) {
		admin_error("invalid image name \"%s\"", name);
		return ADMIN_FAIL;
	}
	if (open_store(&store, &store_fd) < 0)
		return ADMIN_FAIL;
	if (admin_connect(ctx) < 0)
		goto done;
	img_sweep(ctx, store_fd, store);
	params[0] = name;
	/* The row lock makes two rm's (or an rm and an import) take turns. */
	if (admin_query(NULL, ctx, "BEGIN", 0, NULL) < 0 ||
	    admin_query(&res, ctx, "SELECT 1 FROM images WHERE name = $1 FOR UPDATE", 1, params) < 0)
		goto db_fail;
	have_row = PQntuples(res) > 0;
	PQclear(res);
	res = NULL;
	if (admin_query(&res, ctx, "SELECT id FROM sandboxes WHERE image = $1"
			" AND state IN ('pending', 'ready', 'deleting') ORDER BY created_at LIMIT 6",
			1, params) < 0)
		goto db_fail;
	if (PQntuples(res)) {
		fprintf(stderr, "orchard-admin: image \"%s\" is in use by sandboxes:", name);
		for (i = 0; i < PQntuples(res) && i < 5; i++)
			fprintf(stderr, "%s %s", i ? "," : "", PQgetvalue(res, i, 0));
		fprintf(stderr, "%s; delete them first\n", PQntuples(res) > 5 ? ", ..." : "");
		admin_query(NULL, ctx, "ROLLBACK", 0, NULL);
		goto done;
	}
	have_dir = faccessat(store_fd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
	if (!have_row && !have_dir) {
		admin_error("no image \"%s\"", name);
		admin_query(NULL, ctx, "ROLLBACK", 0, NULL);
		goto done;
	}
	gone = xasprintf(".%s.rm-%ld", name, (long)getpid());
	if (have_dir && renameat(store_fd, name, store_fd, gone) < 0) {
		admin_error("rename() \"%s/%s\" failed: %s", store, name, strerror(errno));
		admin_query(NULL, ctx, "ROLLBACK", 0, NULL);
		goto done;
	}
	if (admin_query(NULL, ctx, "DELETE FROM images WHERE name = $1", 1, params) < 0 ||
	    admin_query(NULL, ctx, "COMMIT", 0, NULL) < 0) {
		if (have_dir)
			renameat(store_fd, gone, store_fd, name);
		goto db_fail;
	}
	if (have_dir && orc_tree_remove_at(store_fd, gone) < 0) {
		admin_error("image \"%s\" is removed, but deleting \"%s/%s\" failed", name, store, gone);
		goto done;
	}
	printf("removed image \"%s\"\n", name);
	rc = ADMIN_OK;
	goto done;
db_fail:
	admin_error("removing image \"%s\" failed: %s", name, ctx->errmsg);
	admin_query(NULL, ctx, "ROLLBACK", 0, NULL);
done:
	PQclear(res);
	if (store_fd >= 0)
		close(store_fd);
	free(store);
	free(gone);
	return rc;
}

static const struct admin_cmd image_commands[] = {
	{ "import", image_import, "import a root filesystem", import_usage },
	{ "ls", image_ls, "list images", ls_usage },
	{ "rm", image_rm, "remove an image", rm_usage },
	{ NULL, NULL, NULL, NULL },
};

int cmd_image(struct admin_ctx *ctx, int argc, char **argv)
{
	return admin_dispatch(ctx, image_commands, image_usage, argc, argv);
}
