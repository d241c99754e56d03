/*
 * Scenario 4, files (issue 8): bytes in and out of a sandbox through
 * nginx and TLS.
 *
 *   raw      PUT/GET .../files/raw of one file (256 MiB), ROUNDS times
 *   tar      10,000 small files as one PUT .../archive, then GET of the
 *            directory as a tar, ROUNDS times (a fresh directory each)
 *   base64   Orchard's POST/GET .../files: first the full size (the api's
 *            JSON body limit refuses it: recorded as such), then the
 *            largest file that limit accepts, and raw at that same size
 *
 * Baselines in the same rounds (interleaved: every round runs each of
 * them once), so a reader sees how close the stack is to the machine:
 *
 *   disk     write()+fsync() of the same bytes to a file (the agent also
 *            fsyncs before its rename) and read() of it back (page cache)
 *   nginx    the same bytes through a plain nginx with the stack's TLS
 *            certificate: GET of a static file, PUT with the dav module
 *            (--baseline-url/--baseline-dir; bench/run.sh starts one)
 *   agent    the agent's own PUT/GET /files over its unix socket (no
 *            nginx, TLS or api; needs --database-url for its address)
 *
 * Nothing counts unless it is verified: an upload's answer must name the
 * size and sha256 of what was sent, a download must be byte for byte what
 * was uploaded (compared as it arrives, which is stronger than a hash and
 * cheaper on a 2-core machine the client shares), a tar's answer its
 * entry and byte counts and its download the same files and bytes with
 * the end marker. Uploads stream from one buffer in memory, downloads are
 * compared and dropped: the client holds no other copy.
 *
 * Throughput is MB/s with MB = 10^6 bytes; "p10" is the slowest tenth
 * (bytes / p90 of the times).
 */
#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <unistd.h>
#include <openssl/evp.h>

#include "base64.h"
#include "io.h"
#include "json.h"
#include "xalloc.h"


/* ---- the scenario's state ------------------------------------------------------- */

struct files_run {
	const struct bench_cfg *cfg;
	struct bench_http api;
	struct xfer sx;            /* through nginx to the stack */
	struct xfer nx;            /* the baseline nginx */
	struct xfer ax;            /* the agent's socket */
	int have_nginx, have_agent;
	char id[64];
	unsigned char *src;
	size_t n;
	char sha[65], sha_small[65];
	unsigned char *tar;
	size_t tar_len;
	long tar_files, tar_dirs;
	uint64_t tar_data;
	char disk_path[4096];
};

static double mbps(size_t bytes, double ms)
{
	return ms > 0 ? (double)bytes / 1e6 / (ms / 1e3) : NAN;
}

/* Deterministic incompressible bytes (xorshift64*). */
static void fill(unsigned char *p, size_t n, uint64_t seed)
{
	uint64_t x = seed | 1;
	size_t i;

	for (i = 0; i + 8 <= n; i += 8) {
		uint64_t v;

		x ^= x >> 12;
		x ^= x << 25;
		x ^= x >> 27;
		v = x * 0x2545F4914F6CDD1DULL;
		memcpy(p + i, &v, 8);
	}
	for (; i < n; i++)
		p[i] = (unsigned char)(i * 131u);
}

static void sha256_hex(char out[65], const void *p, size_t n)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int len = 0, i;

	EVP_Digest(p, n, md, &len, EVP_sha256(), NULL);
	for (i = 0; i < len && i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
	out[64] = '\0';
}

/* A ustar header for name (a file of size bytes or a directory). */
static void tar_header(unsigned char *h, const char *name, size_t size, int dir)
{
	unsigned sum = 0;
	size_t i;

	memset(h, 0, 512);
	snprintf((char *)h, 100, "%s", name);
	snprintf((char *)h + 100, 8, "%07o", dir ? 0755 : 0644);
	snprintf((char *)h + 108, 8, "%07o", 0);
	snprintf((char *)h + 116, 8, "%07o", 0);
	snprintf((char *)h + 124, 12, "%011zo", size);
	snprintf((char *)h + 136, 12, "%011o", 1700000000);
	h[156] = dir ? '5' : '0';
	memcpy(h + 257, "ustar", 6);
	memcpy(h + 263, "00", 2);
	memset(h + 148, ' ', 8);
	for (i = 0; i < 512; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
	h[155] = ' ';
}

/* small_files files of 1..4096 bytes, 100 to a directory, as one tar. */
static void tar_build(struct files_run *fr, long files)
{
	long dirs = (files + 99) / 100, i;
	size_t cap = (size_t)dirs * 512 + (size_t)files * (512 + 4096) + 1024, off = 0;
	char name[64];

	fr->tar = xmalloc(cap);
	fr->tar_files = files;
	fr->tar_dirs = dirs;
	fr->tar_data = 0;
	for (i = 0; i < files; i++) {
		size_t size = 1 + (size_t)((i * 2654435761u) % 4096u);

		if (i % 100 == 0) {
			snprintf(name, sizeof(name), "d%03ld/", i / 100);
			tar_header(fr->tar + off, name, 0, 1);
			off += 512;
		}
		snprintf(name, sizeof(name), "d%03ld/f%05ld", i / 100, i);
		tar_header(fr->tar + off, name, size, 0);
		off += 512;
		fill(fr->tar + off, size, (uint64_t)i + 7);
		memset(fr->tar + off + size, 0, (size + 511) / 512 * 512 - size);
		off += (size + 511) / 512 * 512;
		fr->tar_data += size;
	}
	memset(fr->tar + off, 0, 1024);
	fr->tar_len = off + 1024;
}

/* ---- the measured operations ------------------------------------------------------ */

/* The answer of an upload: {size, sha256} must be what was sent. */
static int check_upload_answer(struct bench_op *op, struct stream *st, struct xfer *x,
			       size_t n, const char *sha)
{
	json_object *o = NULL;
	char msg[128];
	int64_t size = -1;
	const char *got_sha = NULL;
	int ok;

	if (x->status != 200 && x->status != 201) {
		bench_op_fail(op, "HTTP %ld %.120s", x->status, st->head);
		return -1;
	}
	if (orc_json_parse_object(&o, st->body->ptr, st->body->len, msg, sizeof(msg)) < 0) {
		bench_op_fail(op, "answer is not JSON: %.120s", st->head);
		return -1;
	}
	orc_json_get_int(o, "size", &size, 0, INT64_MAX, NULL, 0);
	orc_json_get_str(o, "sha256", &got_sha, NULL, 0);
	ok = size == (int64_t)n && (!sha || (got_sha && !strcmp(got_sha, sha)));
	if (!ok)
		bench_op_fail(op, "answer does not match what was sent (size %lld of %zu, "
			      "sha256 %.16s...): %.100s", (long long)size, n,
			      got_sha ? got_sha : "none", st->head);
	json_object_put(o);
	return ok ? 0 : -1;
}

/* PUT the file (src[0..n)) to path on x; answer checked when sha. */
static void raw_put(struct bench_op *op, struct xfer *x, const char *path,
		    const unsigned char *src, size_t n, const char *sha)
{
	struct orc_buf body;
	struct stream st;
	double t0;

	memset(&st, 0, sizeof(st));
	orc_buf_init(&body, 1u << 20);
	st.src = src;
	st.n = n;
	st.sink = SINK_BODY;
	st.body = &body;
	t0 = bench_now_ms();
	if (files_xfer_do(x, "PUT", path, x->hdr_raw, &st, n) < 0) {
		bench_op_fail(op, "%s (HTTP %ld)", x->err, x->status);
	} else if (!sha) {        /* the baseline nginx: 201 or 204, no body */
		if (x->status == 201 || x->status == 204)
			bench_op_ok(op, bench_now_ms() - t0);
		else
			bench_op_fail(op, "HTTP %ld %.120s", x->status, st.head);
	} else {
		double ms = bench_now_ms() - t0;

		if (check_upload_answer(op, &st, x, n, sha) == 0)
			bench_op_ok(op, ms);
	}
	orc_buf_release(&body);
}

static void raw_get(struct bench_op *op, struct xfer *x, const char *path,
		    const unsigned char *expect, size_t n)
{
	struct stream st;
	double t0;

	memset(&st, 0, sizeof(st));
	st.sink = SINK_COMPARE;
	st.expect = expect;
	st.expect_n = n;
	t0 = bench_now_ms();
	if (files_xfer_do(x, "GET", path, NULL, &st, 0) < 0)
		bench_op_fail(op, "%s (HTTP %ld, %zu bytes)", x->err, x->status, st.got);
	else if (x->status != 200)
		bench_op_fail(op, "HTTP %ld %.120s", x->status, st.head);
	else if (st.mismatch || st.got != n)
		bench_op_fail(op, "downloaded bytes differ from the upload (%zu of %zu)", st.got, n);
	else
		bench_op_ok(op, bench_now_ms() - t0);
}

static void disk_write(struct bench_op *op, const char *path, const unsigned char *p, size_t n)
{
	double t0 = bench_now_ms();
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (fd < 0) {
		bench_op_fail(op, "open %s: %s", path, strerror(errno));
		return;
	}
	if (orc_write_all(fd, p, n) < 0 || fsync(fd) < 0) {
		bench_op_fail(op, "write %s: %s", path, strerror(errno));
		close(fd);
		return;
	}
	close(fd);
	bench_op_ok(op, bench_now_ms() - t0);
}

static void disk_read(struct bench_op *op, const char *path, size_t n)
{
	static unsigned char buf[1u << 20];
	double t0 = bench_now_ms();
	size_t got = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		bench_op_fail(op, "open %s: %s", path, strerror(errno));
		return;
	}
	for (;;) {
		ssize_t r = read(fd, buf, sizeof(buf));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	if (got != n)
		bench_op_fail(op, "read %zu of %zu bytes", got, n);
	else
		bench_op_ok(op, bench_now_ms() - t0);
}

static void tar_put(struct bench_op *op, struct files_run *fr, const char *dir)
{
	struct orc_buf body, path = ORC_BUF_INIT;
	struct stream st;
	json_object *o = NULL;
	int64_t entries = -1, bytes = -1;
	char msg[128];
	double t0, ms;

	memset(&st, 0, sizeof(st));
	orc_buf_init(&body, 1u << 20);
	st.src = fr->tar;
	st.n = fr->tar_len;
	st.sink = SINK_BODY;
	st.body = &body;
	orc_buf_addf(&path, "/v1/sandboxes/%s/archive?path=%s", fr->id, dir);
	t0 = bench_now_ms();
	if (files_xfer_do(&fr->sx, "PUT", path.ptr, fr->sx.hdr_tar, &st, fr->tar_len) < 0) {
		bench_op_fail(op, "%s (HTTP %ld)", fr->sx.err, fr->sx.status);
		goto done;
	}
	ms = bench_now_ms() - t0;
	if (fr->sx.status != 200) {
		bench_op_fail(op, "HTTP %ld %.120s", fr->sx.status, st.head);
		goto done;
	}
	if (orc_json_parse_object(&o, body.ptr, body.len, msg, sizeof(msg)) < 0) {
		bench_op_fail(op, "answer is not JSON: %.120s", st.head);
		goto done;
	}
	orc_json_get_int(o, "entries", &entries, 0, INT64_MAX, NULL, 0);
	orc_json_get_int(o, "bytes", &bytes, 0, INT64_MAX, NULL, 0);
	if (entries != fr->tar_files + fr->tar_dirs || bytes != (int64_t)fr->tar_data) {
		bench_op_fail(op, "extracted %lld entries and %lld bytes, sent %ld and %llu",
			      (long long)entries, (long long)bytes, fr->tar_files + fr->tar_dirs,
			      (unsigned long long)fr->tar_data);
		goto done;
	}
	bench_op_ok(op, ms);
done:
	json_object_put(o);
	orc_buf_release(&body);
	orc_buf_release(&path);
}

static void tar_get(struct bench_op *op, struct files_run *fr, const char *dir, size_t *bytes)
{
	struct orc_buf path = ORC_BUF_INIT;
	struct stream st;
	double t0;

	memset(&st, 0, sizeof(st));
	st.sink = SINK_TAR;
	orc_buf_addf(&path, "/v1/sandboxes/%s/archive?path=%s", fr->id, dir);
	t0 = bench_now_ms();
	if (files_xfer_do(&fr->sx, "GET", path.ptr, NULL, &st, 0) < 0)
		bench_op_fail(op, "%s (HTTP %ld)", fr->sx.err, fr->sx.status);
	else if (fr->sx.status != 200)
		bench_op_fail(op, "HTTP %ld %.120s", fr->sx.status, st.head);
	else if (st.tar.bad || st.tar.zeros < 2 || st.tar.files != fr->tar_files ||
		 st.tar.data != fr->tar_data)
		bench_op_fail(op, "tar has %ld files, %llu bytes, %ld end blocks%s; "
			      "uploaded %ld files, %llu bytes", st.tar.files,
			      (unsigned long long)st.tar.data, st.tar.zeros,
			      st.tar.bad ? ", data after the end" : "", fr->tar_files,
			      (unsigned long long)fr->tar_data);
	else {
		bench_op_ok(op, bench_now_ms() - t0);
		*bytes = st.got;
	}
	orc_buf_release(&path);
}

/* POST .../files with n bytes of src as base64 JSON, streamed. 0: written
 * and the answer names the size; the HTTP status goes to *status. */
static int b64_put(struct bench_op *op, struct files_run *fr, const char *file, size_t n,
		   long *status)
{
	struct orc_buf body, path = ORC_BUF_INIT;
	struct stream st;
	double t0, ms;
	int err = -1;

	memset(&st, 0, sizeof(st));
	orc_buf_init(&body, 1u << 20);
	st.src = fr->src;
	st.n = n;
	st.b64 = 1;
	st.b64_path = file;
	st.sink = SINK_BODY;
	st.body = &body;
	orc_buf_addf(&path, "/v1/sandboxes/%s/files", fr->id);
	t0 = bench_now_ms();
	*status = 0;
	if (files_xfer_do(&fr->sx, "POST", path.ptr, fr->sx.hdr_json, &st,
		    files_b64_envelope_len(file, n)) < 0) {
		*status = fr->sx.status;
		bench_op_fail(op, "%s (HTTP %ld) %.120s", fr->sx.err, fr->sx.status, st.head);
		goto done;
	}
	ms = bench_now_ms() - t0;
	*status = fr->sx.status;
	if (check_upload_answer(op, &st, &fr->sx, n, NULL) < 0)
		goto done;
	bench_op_ok(op, ms);
	err = 0;
done:
	orc_buf_release(&st.piece);
	orc_buf_release(&body);
	orc_buf_release(&path);
	return err;
}

/* GET .../files (base64 JSON): parsed and decoded inside the time (what a
 * client must do), compared with the source after it. */
static int b64_get(struct bench_op *op, struct files_run *fr, const char *file, size_t n,
		   long *status)
{
	struct orc_buf body, path = ORC_BUF_INIT, raw = ORC_BUF_INIT;
	struct stream st;
	json_object *o = NULL;
	const char *content = NULL;
	char msg[128];
	double t0, ms;
	int err = -1;

	memset(&st, 0, sizeof(st));
	orc_buf_init(&body, (size_t)n / 3 * 4 + (1u << 20));
	st.sink = SINK_BODY;
	st.body = &body;
	orc_buf_addf(&path, "/v1/sandboxes/%s/files?path=%s", fr->id, file);
	t0 = bench_now_ms();
	*status = 0;
	if (files_xfer_do(&fr->sx, "GET", path.ptr, NULL, &st, 0) < 0) {
		*status = fr->sx.status;
		bench_op_fail(op, "%s (HTTP %ld)", fr->sx.err, fr->sx.status);
		goto done;
	}
	*status = fr->sx.status;
	if (fr->sx.status != 200) {
		bench_op_fail(op, "HTTP %ld %.120s", fr->sx.status, st.head);
		goto done;
	}
	if (orc_json_parse_object(&o, body.ptr, body.len, msg, sizeof(msg)) < 0 ||
	    orc_json_get_str(o, "content", &content, NULL, 0) < 0 ||
	    orc_base64_decode(&raw, content, strlen(content)) < 0) {
		bench_op_fail(op, "no base64 content in the answer: %.120s", st.head);
		goto done;
	}
	ms = bench_now_ms() - t0;
	if (raw.len != n || memcmp(raw.ptr, fr->src, n)) {
		bench_op_fail(op, "downloaded bytes differ from the upload (%zu of %zu)", raw.len, n);
		goto done;
	}
	bench_op_ok(op, ms);
	err = 0;
done:
	json_object_put(o);
	orc_buf_release(&raw);
	orc_buf_release(&body);
	orc_buf_release(&path);
	return err;
}

static void remove_path(struct files_run *fr, const char *file)
{
	char path[256];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/files?path=%s&recursive=true", fr->id, file);
	bench_http_do(&fr->api, "DELETE", path, NULL, 60000);
}

/* ---- reporting ---------------------------------------------------------------------- */

/* MB/s of an op whose every sample moved `bytes`: printed and recorded. */
static double report_mbps(struct bench_report *r, json_object *tp, struct bench_op *op,
			  size_t bytes)
{
	struct bench_stats s;
	json_object *o = json_object_new_object();

	bench_op_stats(&s, op);
	printf("%-30s %10.1f %10.1f %10.1f %10.1f  (%zu ok of %zu)\n", op->name,
	       mbps(bytes, s.max), mbps(bytes, s.p90), mbps(bytes, s.p50), mbps(bytes, s.min),
	       op->n_ok, op->n_ok + op->n_fail);
	json_object_object_add(o, "bytes", json_object_new_int64((int64_t)bytes));
	json_object_object_add(o, "rounds_ok", json_object_new_int64((int64_t)op->n_ok));
	json_object_object_add(o, "rounds", json_object_new_int64((int64_t)(op->n_ok + op->n_fail)));
	if (op->n_ok) {
		json_object_object_add(o, "min_mb_s", json_object_new_double(round(mbps(bytes, s.max) * 10) / 10));
		json_object_object_add(o, "p10_mb_s", json_object_new_double(round(mbps(bytes, s.p90) * 10) / 10));
		json_object_object_add(o, "p50_mb_s", json_object_new_double(round(mbps(bytes, s.p50) * 10) / 10));
		json_object_object_add(o, "max_mb_s", json_object_new_double(round(mbps(bytes, s.min) * 10) / 10));
	}
	json_object_object_add(tp, op->name, o);
	(void)r;
	return op->n_ok ? mbps(bytes, s.p50) : NAN;
}

/* ---- the scenario ------------------------------------------------------------------- */

static int files_setup(struct files_run *fr, const struct bench_cfg *cfg, struct bench_report *r)
{
	char *auth = xasprintf("X-API-Key: %s", cfg->api_key);
	const char *dir = cfg->baseline_dir ? cfg->baseline_dir : cfg->stack_dir;
	int err = -1;

	fr->cfg = cfg;
	fr->n = cfg->file_bytes;
	fr->src = xmalloc(fr->n ? fr->n : 1);
	fill(fr->src, fr->n, 0x6f72636861726400ULL);
	sha256_hex(fr->sha, fr->src, fr->n);
	tar_build(fr, cfg->small_files);
	snprintf(fr->disk_path, sizeof(fr->disk_path), "%s/bench-files-disk.bin",
		 dir ? dir : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp"));
	if (bench_http_init_api(&fr->api, cfg) < 0 || files_xfer_init(&fr->sx, &fr->api, auth) < 0)
		goto done;
	if (bench_sandbox_create_ready(fr->id, sizeof(fr->id), &fr->api, cfg->image, 60) < 0) {
		fprintf(stderr, "orchard-bench: sandbox for the files scenario: %s\n", fr->api.err);
		fr->id[0] = '\0';
		goto done;
	}
	if (cfg->baseline_url) {
		struct bench_http b;
		struct bench_cfg bc = *cfg;

		bc.url = cfg->baseline_url;
		if (bench_http_init_api(&b, &bc) == 0) {
			fr->have_nginx = files_xfer_init(&fr->nx, &b, auth) == 0;
			fr->nx.base = cfg->baseline_url;
			bench_http_release(&b);
		}
	} else {
		bench_report_note(r, "no --baseline-url: the plain nginx baseline is skipped");
	}
	{
		char addr[512], token[256];
		struct bench_http a;

		if (cfg->agent && cfg->agent_token) {
			snprintf(addr, sizeof(addr), "%s", cfg->agent);
			snprintf(token, sizeof(token), "%s", cfg->agent_token);
		} else if (bench_sandbox_agent(addr, sizeof(addr), token, sizeof(token),
					       cfg->database_url, fr->id) < 0) {
			addr[0] = '\0';
		}
		if (addr[0] && bench_http_init_agent(&a, addr, token) == 0) {
			char *bearer = xasprintf("Authorization: Bearer %s", token);

			fr->have_agent = files_xfer_init(&fr->ax, &a, bearer) == 0;
			free(bearer);
			bench_http_release(&a);
		} else {
			bench_report_note(r, "no agent address (--database-url): the agent baseline "
					  "is skipped");
		}
	}
	err = 0;
done:
	free(auth);
	return err;
}

static void files_release(struct files_run *fr)
{
	if (fr->id[0])
		bench_sandbox_delete(&fr->api, fr->id);
	unlink(fr->disk_path);
	files_xfer_release(&fr->sx);
	files_xfer_release(&fr->nx);
	files_xfer_release(&fr->ax);
	bench_http_release(&fr->api);
	free(fr->src);
	free(fr->tar);
}

enum { D_W, N_PUT, S_PUT, A_PUT, D_R, N_GET, S_GET, A_GET, T_PUT, T_GET, OPS_ROUND };

static const char *const op_names[OPS_ROUND] = {
	"disk write+fsync", "nginx static PUT (dav)", "raw PUT (stack)", "agent PUT (socket)",
	"disk read (page cache)", "nginx static GET", "raw GET (stack)", "agent GET (socket)",
	"tar PUT (archive)", "tar GET (archive)",
};

static void base64_part(struct files_run *fr, struct bench_report *r)
{
	json_object *tp = json_object_new_object();
	struct bench_op ops[4];
	size_t small = fr->n < B64_MAX_FILE ? fr->n : B64_MAX_FILE;
	json_object *refusal = json_object_new_object();
	char raw_path[160];
	long st_up = 0, st_down = 0, i;
	double b64_up, b64_down, raw_up, raw_down;

	bench_op_init(&ops[0], "base64 POST (refusal)");
	bench_op_init(&ops[1], "base64 GET (refusal)");
	/* The full size: over the JSON body limit (upload) and the 64 MiB
	 * download limit; recorded as what the api answered. */
	if (fr->n > small) {
		b64_put(&ops[0], fr, "/workspace/bench-b64-full", fr->n, &st_up);
		b64_get(&ops[1], fr, "/workspace/bench-raw", fr->n, &st_down);
		json_object_object_add(refusal, "bytes", json_object_new_int64((int64_t)fr->n));
		json_object_object_add(refusal, "upload_status", json_object_new_int64(st_up));
		json_object_object_add(refusal, "upload_error", json_object_new_string(
					       ops[0].n_fail ? ops[0].first_error : ""));
		json_object_object_add(refusal, "download_status", json_object_new_int64(st_down));
		json_object_object_add(refusal, "download_error", json_object_new_string(
					       ops[1].n_fail ? ops[1].first_error : ""));
		bench_report_note(r, "base64 at %zu bytes: upload HTTP %ld%s, download HTTP %ld%s; "
				  "the comparison below uses %zu bytes (the largest file the "
				  "16 MiB JSON body limit accepts)", fr->n, st_up,
				  ops[0].n_ok ? " (accepted)" : " (refused)", st_down,
				  ops[1].n_ok ? " (accepted)" : " (refused)", small);
		if (st_up != 413 && !ops[0].n_ok)
			bench_report_note(r, "base64 upload refusal: %s", ops[0].first_error);
	}
	bench_report_extra(r, "base64_full_size", refusal);
	bench_op_release(&ops[0]);
	bench_op_release(&ops[1]);

	bench_op_init(&ops[0], "base64 POST");
	bench_op_init(&ops[1], "base64 GET");
	bench_op_init(&ops[2], "raw PUT (same size)");
	bench_op_init(&ops[3], "raw GET (same size)");
	snprintf(raw_path, sizeof(raw_path), "/v1/sandboxes/%s/files/raw?path=/workspace/bench-b64raw",
		 fr->id);
	for (i = 0; i < fr->cfg->n; i++) {
		char get_path[160];

		b64_put(&ops[0], fr, "/workspace/bench-b64", small, &st_up);
		b64_get(&ops[1], fr, "/workspace/bench-b64", small, &st_down);
		raw_put(&ops[2], &fr->sx, raw_path, fr->src, small, fr->sha_small);
		snprintf(get_path, sizeof(get_path), "%s", raw_path);
		raw_get(&ops[3], &fr->sx, get_path, fr->src, small);
	}
	for (i = 0; i < 4; i++)
		ops[i].busy_s = 0;
	bench_report_ops(r, ops, 4);
	printf("%-30s %10s %10s %10s %10s   MB/s at %zu bytes\n", "throughput", "min", "p10",
	       "p50", "max", small);
	b64_up = report_mbps(r, tp, &ops[0], small);
	b64_down = report_mbps(r, tp, &ops[1], small);
	raw_up = report_mbps(r, tp, &ops[2], small);
	raw_down = report_mbps(r, tp, &ops[3], small);
	bench_report_ratio(r, "raw / base64 upload MB/s (p50)", raw_up, b64_up,
			   "the same file through both routes");
	bench_report_ratio(r, "raw / base64 download MB/s (p50)", raw_down, b64_down,
			   "the same file through both routes");
	bench_report_extra(r, "base64_throughput_mb_s", tp);
	remove_path(fr, "/workspace/bench-b64");
	remove_path(fr, "/workspace/bench-b64raw");
	for (i = 0; i < 4; i++)
		bench_op_release(&ops[i]);
}

int bench_files(const struct bench_cfg *cfg, struct bench_report *r)
{
	struct files_run fr;
	struct bench_op ops[OPS_ROUND];
	json_object *tp = json_object_new_object(), *sizes = json_object_new_object();
	double deadline = bench_now_ms() + cfg->max_seconds * 1e3, v[OPS_ROUND];
	char put_path[256];
	size_t tar_down = 0, k;
	long i;
	int err = -1;

	memset(&fr, 0, sizeof(fr));
	for (k = 0; k < OPS_ROUND; k++)
		bench_op_init(&ops[k], op_names[k]);
	if (files_setup(&fr, cfg, r) < 0)
		goto done;
	sha256_hex(fr.sha_small, fr.src, fr.n < B64_MAX_FILE ? fr.n : B64_MAX_FILE);
	snprintf(put_path, sizeof(put_path), "/v1/sandboxes/%s/files/raw?path=/workspace/bench-raw",
		 fr.id);
	for (i = 0; i < cfg->n + cfg->warmup && bench_now_ms() < deadline; i++) {
		struct bench_op *o = ops, scratch[OPS_ROUND];
		char dir[64];

		if (i < cfg->warmup) {    /* unrecorded */
			for (k = 0; k < OPS_ROUND; k++)
				bench_op_init(&scratch[k], op_names[k]);
			o = scratch;
		}
		disk_write(&o[D_W], fr.disk_path, fr.src, fr.n);
		if (fr.have_nginx)
			raw_put(&o[N_PUT], &fr.nx, "/put/blob", fr.src, fr.n, NULL);
		raw_put(&o[S_PUT], &fr.sx, put_path, fr.src, fr.n, fr.sha);
		if (fr.have_agent)
			raw_put(&o[A_PUT], &fr.ax, "/files?path=/workspace/bench-agent", fr.src,
				fr.n, fr.sha);
		disk_read(&o[D_R], fr.disk_path, fr.n);
		if (fr.have_nginx)
			raw_get(&o[N_GET], &fr.nx, "/put/blob", fr.src, fr.n);
		raw_get(&o[S_GET], &fr.sx, put_path, fr.src, fr.n);
		if (fr.have_agent)
			raw_get(&o[A_GET], &fr.ax, "/files?path=/workspace/bench-agent", fr.src, fr.n);
		snprintf(dir, sizeof(dir), "/workspace/bench-tar-%ld", i);
		tar_put(&o[T_PUT], &fr, dir);
		tar_get(&o[T_GET], &fr, dir, &tar_down);
		remove_path(&fr, dir);
		if (o == scratch)
			for (k = 0; k < OPS_ROUND; k++)
				bench_op_release(&scratch[k]);
	}
	if (i < cfg->n + cfg->warmup)
		bench_report_note(r, "deadline of %.0f s reached after %ld rounds", cfg->max_seconds, i);
	for (k = 0; k < OPS_ROUND; k++)
		ops[k].busy_s = 0;  /* sequential rounds of one transfer: no ops/s */
	{
		struct bench_op shown[OPS_ROUND];
		size_t m = 0;

		for (k = 0; k < OPS_ROUND; k++)
			if (ops[k].n_ok + ops[k].n_fail)
				shown[m++] = ops[k];
		bench_report_ops(r, shown, m);
	}
	printf("%-30s %10s %10s %10s %10s   MB/s (10^6 bytes/s), %zu-byte file\n",
	       "throughput", "min", "p10", "p50", "max", fr.n);
	for (k = 0; k < OPS_ROUND; k++) {
		size_t bytes = k == T_PUT ? fr.tar_len : k == T_GET ? tar_down : fr.n;

		v[k] = NAN;
		if (ops[k].n_ok + ops[k].n_fail)
			v[k] = report_mbps(r, tp, &ops[k], bytes);
	}
	bench_report_ratio(r, "raw PUT / nginx static PUT", v[S_PUT], v[N_PUT],
			   "upload through the stack vs plain nginx+TLS (p50 MB/s)");
	bench_report_ratio(r, "raw GET / nginx static GET", v[S_GET], v[N_GET],
			   "download through the stack vs plain nginx+TLS (p50 MB/s)");
	bench_report_ratio(r, "raw PUT / disk write+fsync", v[S_PUT], v[D_W],
			   "upload vs writing the bytes to disk here (p50 MB/s)");
	bench_report_ratio(r, "raw PUT / agent PUT", v[S_PUT], v[A_PUT],
			   "nginx+TLS+api in front of the agent (p50 MB/s)");
	bench_report_ratio(r, "raw GET / agent GET", v[S_GET], v[A_GET],
			   "nginx+TLS in front of the agent (p50 MB/s)");
	if (ops[T_PUT].n_ok)
		bench_report_note(r, "tar: %ld files (%llu bytes of data, %zu-byte tar up, %zu down): "
				  "p50 %.0f files/s up, %.0f files/s down", fr.tar_files,
				  (unsigned long long)fr.tar_data, fr.tar_len, tar_down,
				  (double)fr.tar_files / (ops[T_PUT].ms[(ops[T_PUT].n_ok - 1) / 2] / 1e3),
				  ops[T_GET].n_ok ? (double)fr.tar_files /
				  (ops[T_GET].ms[(ops[T_GET].n_ok - 1) / 2] / 1e3) : NAN);
	bench_report_target(r, "raw PUT p50", v[S_PUT], 0, 500, "MB/s");
	bench_report_target(r, "raw GET p50", v[S_GET], 0, 500, "MB/s");
	json_object_object_add(sizes, "file_bytes", json_object_new_int64((int64_t)fr.n));
	json_object_object_add(sizes, "small_files", json_object_new_int64(fr.tar_files));
	json_object_object_add(sizes, "tar_bytes", json_object_new_int64((int64_t)fr.tar_len));
	json_object_object_add(sizes, "rounds", json_object_new_int64(cfg->n));
	bench_report_extra(r, "sizes", sizes);
	sizes = NULL;
	bench_report_extra(r, "throughput_mb_s", tp);
	tp = NULL;
	base64_part(&fr, r);
	err = 0;
done:
	json_object_put(tp);
	json_object_put(sizes);
	files_release(&fr);
	for (k = 0; k < OPS_ROUND; k++)
		bench_op_release(&ops[k]);
	return err;
}
