/*
 * Checkpoints on the kubernetes driver (docs/checkpoints.md, "Kubernetes
 * driver"): pods share no host snapshot, so a checkpoint is the agent's
 * tar stream (GET /archive) of each checkpoint path, kept in the
 * controller's checkpoint store (a directory; in a cluster a PVC).
 *
 * The store file <dir>/<ckpt>.tar is itself a ustar archive with one
 * member per path: "workspace.tar" holds the agent's tar of /workspace,
 * "tmp.tar" that of /tmp (`tar tvf` shows them). It is written to
 * <ckpt>.partial and renamed when complete; its sha256 goes on the row. A
 * fork's restore checks the sha256 and pushes each member to its agent
 * (PUT /archive?path=/workspace ...) before the sandbox is ready.
 *
 * Bounded: every file of the store together stays within
 * ORCHARD_K8S_CHECKPOINT_MAX_BYTES; a copy that would pass it fails.
 */
#include "k8s.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent_client.h"
#include "err.h"
#include "io.h"
#include "log.h"
#include "sha256.h"
#include "strutil.h"
#include "url.h"
#include "xalloc.h"

#define BLOCK 512
#define NAME_MAX_LEN 90                /* member names: path + ".tar" in ustar's 100 */
#define DEFAULT_PATHS "/workspace,/tmp"
#define DEFAULT_MAX_BYTES (10LL << 30)
#define DEFAULT_TIMEOUT_S 600
#define ERR_BODY_MAX 300               /* of an agent's error answer, in messages */

struct k8s_store {
	char *dir;
	char **paths;
	size_t npaths;
	int64_t max_bytes;
	long timeout_ms;
};

/* ---- configuration -------------------------------------------------------- */

static int bad(const char *name, const char *value, const char *want)
{
	orc_log(ORC_LOG_ERROR, "bad kubernetes checkpoint setting", "name", name, "value", value,
		"want", want, NULL);
	return ORC_EINVALID;
}

/* A checkpoint path: absolute, not "/", no empty, "." or ".." part, no ",". */
static int path_ok(const char *p)
{
	size_t n = strlen(p), seg;

	if (p[0] != '/' || n < 2 || n >= NAME_MAX_LEN || strchr(p, ','))
		return 0;
	while (*p == '/') {
		p++;
		seg = strcspn(p, "/");
		if (seg == 0 || (seg == 1 && p[0] == '.') || (seg == 2 && p[0] == '.' && p[1] == '.'))
			return 0;
		p += seg;
	}
	return 1;
}

static int load_paths(struct k8s_store *s, const char *list)
{
	const char *p = list, *end;
	char *one;

	while (*p) {
		end = strchr(p, ',');
		if (!end)
			end = p + strlen(p);
		one = xstrndup(p, (size_t)(end - p));
		if (!path_ok(one)) {
			free(one);
			return bad("ORCHARD_K8S_CHECKPOINT_PATHS", list,
				   "absolute paths (not /), comma-separated, each under 90 bytes");
		}
		s->paths = xrealloc(s->paths, orc_mul_size(s->npaths + 1, sizeof(*s->paths)));
		s->paths[s->npaths++] = one;
		p = *end ? end + 1 : end;
	}
	return s->npaths ? 0 : bad("ORCHARD_K8S_CHECKPOINT_PATHS", list, "at least one path");
}

static int env_i64(int64_t *out, const char *name, int64_t def, int64_t min, int64_t max)
{
	const char *v = getenv(name);

	*out = def;
	if (v && *v && orc_parse_i64(out, v, min, max) < 0)
		return bad(name, v, "an integer in range");
	return 0;
}

int k8s_store_open(struct k8s_store **out, const char *state_dir)
{
	struct k8s_store *s = xcalloc(1, sizeof(*s));
	const char *v = getenv("ORCHARD_K8S_CHECKPOINT_DIR");
	char *parent;
	int64_t t;
	int err;

	*out = s;
	s->dir = v && *v ? xstrdup(v) : xasprintf("%s/k8s-checkpoints", state_dir);
	if (s->dir[0] != '/')
		return bad("ORCHARD_K8S_CHECKPOINT_DIR", s->dir, "an absolute path");
	v = getenv("ORCHARD_K8S_CHECKPOINT_PATHS");
	if ((err = load_paths(s, v && *v ? v : DEFAULT_PATHS)) < 0 ||
	    (err = env_i64(&s->max_bytes, "ORCHARD_K8S_CHECKPOINT_MAX_BYTES", DEFAULT_MAX_BYTES, 1,
			   INT64_MAX)) < 0 ||
	    (err = env_i64(&t, "ORCHARD_K8S_CHECKPOINT_TIMEOUT_S", DEFAULT_TIMEOUT_S, 1, 86400)) < 0)
		return err;
	s->timeout_ms = (long)t * 1000;
	/* Its parent too (the state dir, which this driver does not use else). */
	parent = xstrndup(s->dir, (size_t)(strrchr(s->dir, '/') - s->dir));
	if (parent[0])
		mkdir(parent, 0700);
	free(parent);
	if (mkdir(s->dir, 0700) < 0 && errno != EEXIST) {
		orc_log(ORC_LOG_ERROR, "cannot create the checkpoint store", "dir", s->dir,
			"error", strerror(errno), NULL);
		return ORC_ERROR;
	}
	return 0;
}

void k8s_store_free(struct k8s_store *s)
{
	size_t i;

	if (!s)
		return;
	for (i = 0; i < s->npaths; i++)
		free(s->paths[i]);
	free(s->paths);
	free(s->dir);
	free(s);
}

/* ---- the store file's ustar headers ---------------------------------------- */

static void octal(char *field, size_t len, uint64_t v)
{
	snprintf(field, len, "%0*llo", (int)len - 1, (unsigned long long)v);
}

/* A member header: name, size (octal, or base-256 past 8 GiB), mode 0600. */
static void header(unsigned char h[BLOCK], const char *name, uint64_t size)
{
	unsigned sum = 0;
	int i;

	memset(h, 0, BLOCK);
	memcpy(h, name, strlen(name));
	octal((char *)h + 100, 8, 0600);
	octal((char *)h + 108, 8, 0);
	octal((char *)h + 116, 8, 0);
	if (size < 077777777777ULL) {
		octal((char *)h + 124, 12, size);
	} else {
		h[124] = 0x80;
		for (i = 11; i > 0; i--, size >>= 8)
			h[124 + i] = (unsigned char)(size & 0xff);
	}
	octal((char *)h + 136, 12, (uint64_t)time(NULL));
	h[156] = '0';
	memcpy(h + 257, "ustar", 6);
	memcpy(h + 263, "00", 2);
	memset(h + 148, ' ', 8);
	for (i = 0; i < BLOCK; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
}

/* A member's size from its header, or -1. */
static int64_t header_size(const unsigned char h[BLOCK])
{
	uint64_t v = 0;
	int i;

	if (h[124] & 0x80) {
		for (i = 1; i < 12; i++)
			v = (v << 8) | h[124 + i];
		return v > INT64_MAX ? -1 : (int64_t)v;
	}
	for (i = 0; i < 12 && h[124 + i] >= '0' && h[124 + i] <= '7'; i++)
		v = (v << 3) | (uint64_t)(h[124 + i] - '0');
	return i ? (int64_t)v : -1;
}

static const char *unreachable(int err)
{
	return err == ORC_ETIMEOUT ? "timed out (ORCHARD_K8S_CHECKPOINT_TIMEOUT_S)" :
	       "the agent could not be reached";
}

/* ---- the store ------------------------------------------------------------- */

static char *store_file(const struct k8s_store *s, const char *ckpt, const char *ext)
{
	return xasprintf("%s/%s%s", s->dir, ckpt, ext);
}

/* Bytes held by the store's files, but for skip (a name). */
static int64_t store_used(const struct k8s_store *s, const char *skip)
{
	DIR *d = opendir(s->dir);
	struct dirent *e;
	struct stat st;
	int64_t used = 0;

	if (!d)
		return 0;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.' || (skip && !strcmp(e->d_name, skip)))
			continue;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
			used += (int64_t)st.st_size;
	}
	closedir(d);
	return used;
}

/* What the checkpoint being written may still take. */
struct take {
	int fd;
	int64_t off;      /* where the next byte goes */
	int64_t room;     /* the file may grow to this */
	int full;
};

static int sink(void *arg, const char *data, size_t n)
{
	struct take *t = arg;

	if ((int64_t)n > t->room - t->off) {
		t->full = 1;
		return -1;
	}
	if (pwrite(t->fd, data, n, t->off) != (ssize_t)n)
		return -1;
	t->off += (int64_t)n;
	return 0;
}

static int write_at(struct take *t, const void *p, size_t n)
{
	if ((int64_t)n > t->room - t->off) {
		t->full = 1;
		return ORC_ETOOBIG;
	}
	if (pwrite(t->fd, p, n, t->off) != (ssize_t)n)
		return ORC_ERROR;
	t->off += (int64_t)n;
	return 0;
}

/* The first bytes of an agent's error answer written at from. */
static char *answer_text(struct take *t, int64_t from)
{
	char buf[ERR_BODY_MAX + 1];
	ssize_t n = pread(t->fd, buf, ERR_BODY_MAX, from);

	buf[n > 0 ? n : 0] = '\0';
	return xstrdup(buf);
}

static char *full_message(const struct k8s_store *s)
{
	return xasprintf("the checkpoint store is full: ORCHARD_K8S_CHECKPOINT_MAX_BYTES is %lld "
			 "and it holds %lld bytes", (long long)s->max_bytes,
			 (long long)store_used(s, NULL));
}

/* Append path's tar as one member; 1 when the path does not exist (skipped). */
static int add_path(struct take *t, char **why, const struct k8s_store *s,
		    const struct ctl_agent_ref *agent, const char *path)
{
	unsigned char h[BLOCK], zero[BLOCK];
	struct orc_agent_req req;
	char *esc = orc_url_escape(path, ""), *name = xasprintf("%s.tar", path + 1), *text, *url;
	int64_t start = t->off, size;
	long status = 0;
	int err;

	memset(zero, 0, sizeof(zero));
	memset(&req, 0, sizeof(req));
	if ((err = write_at(t, zero, BLOCK)) < 0)
		goto out;
	req.address = agent->address;
	req.token = agent->token;
	req.method = "GET";
	req.path = url = xasprintf("/archive?path=%s", esc);
	req.timeout_ms = s->timeout_ms;
	err = orc_agent_stream(&status, &req, sink, t);
	free(url);
	if (t->full) {
		err = ORC_ETOOBIG;
		goto out;
	}
	if (err == 0 && status == 404) {
		t->off = start;             /* not in this sandbox: skipped */
		err = 1;
		goto out;
	}
	if (err < 0 || status != 200) {
		text = status ? answer_text(t, start + BLOCK) : xstrdup(unreachable(err));
		*why = xasprintf("archiving %s through the agent failed (HTTP %ld): %s", path, status, text);
		free(text);
		err = ORC_ERROR;
		goto out;
	}
	size = t->off - start - BLOCK;
	if (size % BLOCK && (err = write_at(t, zero, (size_t)(BLOCK - size % BLOCK))) < 0)
		goto out;
	header(h, name, (uint64_t)size);
	if (pwrite(t->fd, h, BLOCK, start) != BLOCK)
		err = ORC_ERROR;
out:
	if (err == ORC_ETOOBIG && !*why)
		*why = full_message(s);
	free(esc);
	free(name);
	return err;
}

static void hash_mem(char hex[65], const void *m, size_t size)
{
	struct orc_sha256 h;

	orc_sha256_init(&h);
	orc_sha256_update(&h, m, size);
	orc_sha256_hex(&h, hex);
}

static int hash_fd(char hex[65], int fd, int64_t size)
{
	void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);

	if (m == MAP_FAILED)
		return ORC_ERROR;
	hash_mem(hex, m, (size_t)size);
	munmap(m, (size_t)size);
	return 0;
}

int k8s_checkpoint_take(struct ctl_driver *d, int64_t *bytes_out, char sha256_out[65], char **why,
			const struct ctl_agent_ref *agent, const char *ckpt)
{
	struct k8s_store *s = k8s_driver_store(d);
	char *partial = store_file(s, ckpt, ".partial"), *final = store_file(s, ckpt, ".tar");
	char *skip = xasprintf("%s.partial", ckpt);
	unsigned char end[2 * BLOCK];
	struct take t = { -1, 0, 0, 0 };
	size_t i;
	int err = 0;

	*why = NULL;
	if (!orc_is_dns_label(ckpt) || !agent->address) {
		*why = xstrdup(agent->address ? "bad checkpoint id" : "the sandbox has no agent address");
		err = ORC_EINVALID;
		goto out;
	}
	t.room = s->max_bytes - store_used(s, skip);
	if ((t.fd = open(partial, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600)) < 0) {
		*why = xasprintf("cannot create %s: %s", partial, strerror(errno));
		err = ORC_ERROR;
		goto out;
	}
	for (i = 0; i < s->npaths && err >= 0; i++)
		err = add_path(&t, why, s, agent, s->paths[i]);
	if (err < 0)
		goto out;
	memset(end, 0, sizeof(end));
	if ((err = write_at(&t, end, sizeof(end))) < 0) {
		if (!*why)
			*why = err == ORC_ETOOBIG ? full_message(s) : xstrdup("writing the store failed");
		goto out;
	}
	if (ftruncate(t.fd, t.off) < 0 || fsync(t.fd) < 0 || hash_fd(sha256_out, t.fd, t.off) < 0 ||
	    rename(partial, final) < 0) {
		*why = xasprintf("writing %s failed: %s", final, strerror(errno));
		err = ORC_ERROR;
		goto out;
	}
	*bytes_out = t.off;
out:
	if (t.fd >= 0)
		close(t.fd);
	if (err < 0)
		unlink(partial);
	free(partial);
	free(final);
	free(skip);
	return err < 0 ? err : 0;
}

/* ---- restore ---------------------------------------------------------------- */

static int push(char **why, const struct k8s_store *s, const struct ctl_agent_ref *agent,
		const char *name, const unsigned char *data, size_t size)
{
	struct orc_buf body = ORC_BUF_INIT;
	struct orc_agent_req req;
	size_t n = strlen(name);
	char *path, *esc, *url;
	long status = 0;
	int err;

	if (n < 5 || strcmp(name + n - 4, ".tar")) {
		*why = xasprintf("the store file has a member \"%.100s\" that is no path's tar", name);
		return ORC_EINVALID;
	}
	path = xasprintf("/%.*s", (int)(n - 4), name);
	if (!path_ok(path)) {
		*why = xasprintf("the store file has a member for a bad path \"%.100s\"", path);
		free(path);
		return ORC_EINVALID;
	}
	esc = orc_url_escape(path, "");
	memset(&req, 0, sizeof(req));
	req.address = agent->address;
	req.token = agent->token;
	req.method = "PUT";
	req.path = url = xasprintf("/archive?path=%s", esc);
	req.body = (const char *)data;
	req.body_len = size;
	req.timeout_ms = s->timeout_ms;
	orc_buf_init(&body, 4096);
	err = orc_agent_call(&body, &status, &req);
	if (err == 0 && status != 200)
		err = ORC_ERROR;
	if (err < 0)
		*why = xasprintf("restoring %s through the agent failed (HTTP %ld): %.300s", path, status,
				 status ? orc_buf_cstr(&body) : unreachable(err));
	orc_buf_release(&body);
	free(url);
	free(esc);
	free(path);
	return err;
}

/* Push every member of the store file m (size bytes) to the agent. */
static int push_all(char **why, const struct k8s_store *s, const struct ctl_agent_ref *agent,
		    const unsigned char *m, size_t size)
{
	static const unsigned char zero[BLOCK];
	char name[101];
	size_t off = 0;
	int64_t n;
	int err;

	while (off + BLOCK <= size && memcmp(m + off, zero, BLOCK)) {
		memcpy(name, m + off, 100);
		name[100] = '\0';
		n = header_size(m + off);
		if (n < 0 || (uint64_t)n > size - off - BLOCK) {
			*why = xasprintf("the store file is malformed at byte %zu", off);
			return ORC_EINVALID;
		}
		if ((err = push(why, s, agent, name, m + off + BLOCK, (size_t)n)) < 0)
			return err;
		off += BLOCK + ((size_t)n + BLOCK - 1) / BLOCK * BLOCK;
	}
	if (off + BLOCK > size) {
		*why = xstrdup("the store file ends without its end marker");
		return ORC_EINVALID;
	}
	return 0;
}

int k8s_checkpoint_restore(struct ctl_driver *d, char **why, const struct ctl_agent_ref *agent,
			   const char *ckpt, const char *sha256)
{
	struct k8s_store *s = k8s_driver_store(d);
	char *file = store_file(s, ckpt, ".tar"), hex[65];
	struct stat st;
	void *m = MAP_FAILED;
	int fd = -1, err = 0;

	*why = NULL;
	if (!orc_is_dns_label(ckpt) || !sha256) {
		*why = xasprintf("checkpoint %s has no recorded sha256", ckpt);
		err = ORC_EINVALID;
		goto out;
	}
	if ((fd = open(file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0 || fstat(fd, &st) < 0) {
		*why = xasprintf("checkpoint %s is not in the checkpoint store (%s): %s", ckpt, file,
				 strerror(errno));
		err = ORC_ENOTFOUND;
		goto out;
	}
	if (!S_ISREG(st.st_mode) || st.st_size < 2 * BLOCK ||
	    (m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED) {
		*why = xasprintf("checkpoint %s: %s is not a store file", ckpt, file);
		err = ORC_EINVALID;
		goto out;
	}
	hash_mem(hex, m, (size_t)st.st_size);
	if (strcmp(hex, sha256)) {
		*why = xasprintf("checkpoint %s is corrupt: the sha256 of %s is %s, not the recorded %s",
				 ckpt, file, hex, sha256);
		err = ORC_EINVALID;
		goto out;
	}
	err = push_all(why, s, agent, m, (size_t)st.st_size);
out:
	if (m != MAP_FAILED)
		munmap(m, (size_t)st.st_size);
	if (fd >= 0)
		close(fd);
	free(file);
	return err;
}

/* ---- remove, list ---------------------------------------------------------------- */

int k8s_checkpoint_remove(struct ctl_driver *d, const char *ckpt)
{
	struct k8s_store *s = k8s_driver_store(d);
	static const char *const ext[] = { ".tar", ".partial" };
	char *f;
	int err = 0;
	size_t i;

	if (!orc_is_dns_label(ckpt))
		return ORC_EINVALID;
	for (i = 0; i < sizeof(ext) / sizeof(ext[0]); i++) {
		f = store_file(s, ckpt, ext[i]);
		if (unlink(f) < 0 && errno != ENOENT) {
			orc_log(ORC_LOG_WARN, "removing a checkpoint file failed", "file", f,
				"error", strerror(errno), NULL);
			err = ORC_ERROR;
		}
		free(f);
	}
	return err;
}

int k8s_checkpoint_list(struct ctl_driver *d, char ***out, size_t *nout)
{
	struct k8s_store *s = k8s_driver_store(d);
	DIR *dir = opendir(s->dir);
	struct dirent *e;
	char **ids = NULL, *dot;
	size_t n = 0;

	*out = NULL;
	*nout = 0;
	if (!dir)
		return ORC_ERROR;
	while ((e = readdir(dir)) != NULL) {
		if (e->d_name[0] == '.' || !(dot = strrchr(e->d_name, '.')) ||
		    (strcmp(dot, ".tar") && strcmp(dot, ".partial")))
			continue;
		ids = xrealloc(ids, orc_mul_size(n + 1, sizeof(*ids)));
		ids[n++] = xstrndup(e->d_name, (size_t)(dot - e->d_name));
	}
	closedir(dir);
	*out = ids;
	*nout = n;
	return 0;
}
