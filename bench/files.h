#ifndef BENCH_FILES_H
#define BENCH_FILES_H
/*
 * The files scenario's transfers (files_stream.c), shared with the
 * scenario itself (files.c): what one upload streams from and one
 * download streams into, and a curl handle that moves them.
 */
#include "bench.h"
#include "buf.h"

#define B64_LIMIT (16u << 20)      /* the api's JSON body limit (docs/openapi.yaml) */
/* The largest file under it: 4 base64 characters per 3 bytes, 1 KiB for the JSON around. */
#define B64_MAX_FILE ((B64_LIMIT - 1024u) / 4u * 3u)
#define B64_CHUNK (3u << 14)       /* source bytes encoded per piece (a multiple of 3) */
#define HEAD_KEEP 512              /* of an answer, for messages */
#define XFER_TIMEOUT_MS 600000L

/* ---- one transfer's source and sink --------------------------------------------- */

enum sink { SINK_COMPARE, SINK_TAR, SINK_BODY };

/* A streaming reader of the tar the archive route answers. */
struct tar_count {
	unsigned char hdr[512];
	size_t hlen;
	uint64_t skip;            /* data (and padding) left of this entry */
	long files, dirs, meta, other, zeros;
	uint64_t data;
	int bad;
};

struct stream {
	/* upload: src[0..n) (or the base64 envelope, when b64) */
	const unsigned char *src;
	size_t n, sent;
	int b64;
	struct orc_buf piece;     /* base64: encoded, not yet handed to curl */
	size_t piece_off, src_off;
	int stage;                /* base64: 0 prefix, 1 content, 2 suffix, 3 done */
	const char *b64_path;
	/* download */
	enum sink sink;
	const unsigned char *expect;
	size_t expect_n, got;
	int mismatch;
	struct tar_count tar;
	struct orc_buf *body;
	char head[HEAD_KEEP + 1];
	size_t head_len;
};

/* ---- transfers -------------------------------------------------------------------- */

/* One easy handle for streams, beside the JSON one (its own connection). */
struct xfer {
	CURL *h;
	const char *base;
	struct curl_slist *hdr_get, *hdr_raw, *hdr_tar, *hdr_json;
	char err[CURL_ERROR_SIZE];
	long status;
};

/* From an initialised bench_http (API or agent): same TLS, socket, base. */
int files_xfer_init(struct xfer *x, struct bench_http *from, const char *auth);
void files_xfer_release(struct xfer *x);
/* method PUT/POST sends st's source; GET feeds st's sink. 0 when an
 * answer arrived (x->status), -1 on a transport failure (x->err). */
int files_xfer_do(struct xfer *x, const char *method, const char *path,
		  struct curl_slist *hdrs, struct stream *st, size_t upload_len);
/* The length of {"path":PATH,"content":"<base64 of n bytes>"}. */
size_t files_b64_envelope_len(const char *path, size_t n);
#endif
