/*
 * The files scenario's transfers (files.h): curl callbacks that stream an
 * upload from memory (raw, or wrapped as Orchard's base64 JSON piece by
 * piece) and check a download as it arrives (byte for byte, as a tar
 * count, or kept), and the handle that runs one request.
 */
#include "files.h"

#include "base64.h"
#include "json.h"
#include "xalloc.h"

static uint64_t tar_octal(const unsigned char *p, size_t n)
{
	uint64_t v = 0;
	size_t i;

	if (p[0] & 0x80) {        /* base-256 */
		for (i = 1; i < n; i++)
			v = v << 8 | p[i];
		return v;
	}
	for (i = 0; i < n && (p[i] == ' ' || p[i] == '\0'); i++)
		;
	for (; i < n && p[i] >= '0' && p[i] <= '7'; i++)
		v = v * 8 + (uint64_t)(p[i] - '0');
	return v;
}

static void tar_feed(struct tar_count *t, const unsigned char *p, size_t n)
{
	while (n && !t->bad) {
		size_t k;
		uint64_t size;

		if (t->skip) {
			k = n < t->skip ? n : (size_t)t->skip;
			p += k;
			n -= k;
			t->skip -= k;
			continue;
		}
		k = 512 - t->hlen < n ? 512 - t->hlen : n;
		memcpy(t->hdr + t->hlen, p, k);
		t->hlen += k;
		p += k;
		n -= k;
		if (t->hlen < 512)
			break;
		t->hlen = 0;
		for (k = 0; k < 512 && !t->hdr[k]; k++)
			;
		if (k == 512) {
			t->zeros++;
			continue;
		}
		if (t->zeros) {       /* data after the end marker */
			t->bad = 1;
			break;
		}
		size = tar_octal(t->hdr + 124, 12);
		switch (t->hdr[156]) {
		case '0': case '\0': t->files++; t->data += size; break;
		case '5': t->dirs++; break;
		case 'x': case 'g': case 'L': case 'K': t->meta++; break;
		default: t->other++; break;
		}
		t->skip = (size + 511) / 512 * 512;
	}
}

static void keep_head(struct stream *st, const char *p, size_t n)
{
	size_t k = HEAD_KEEP - st->head_len;

	if (k > n)
		k = n;
	memcpy(st->head + st->head_len, p, k);
	st->head_len += k;
	st->head[st->head_len] = '\0';
}

static size_t on_data(char *p, size_t size, size_t nmemb, void *userdata)
{
	struct stream *st = userdata;
	size_t n = size * nmemb;

	keep_head(st, p, n);
	switch (st->sink) {
	case SINK_COMPARE:
		if (st->got + n > st->expect_n || memcmp(st->expect + st->got, p, n))
			st->mismatch = 1;
		break;
	case SINK_TAR:
		tar_feed(&st->tar, (const unsigned char *)p, n);
		break;
	case SINK_BODY:
		if (orc_buf_add(st->body, p, n) < 0)
			return 0;
		break;
	}
	st->got += n;
	return n;
}

/* The next piece of {"path":...,"content":"<base64>"} into st->piece. */
static void b64_refill(struct stream *st)
{
	orc_buf_reset(&st->piece);
	st->piece_off = 0;
	switch (st->stage) {
	case 0:
		orc_buf_adds(&st->piece, "{\"path\":");
		orc_json_quote(&st->piece, st->b64_path);
		orc_buf_adds(&st->piece, ",\"content\":\"");
		st->stage = st->n ? 1 : 2;
		break;
	case 1: {
		size_t k = st->n - st->src_off < B64_CHUNK ? st->n - st->src_off : B64_CHUNK;

		orc_base64_encode(&st->piece, st->src + st->src_off, k);
		st->src_off += k;
		if (st->src_off == st->n)
			st->stage = 2;
		break;
	}
	case 2:
		orc_buf_adds(&st->piece, "\"}");
		st->stage = 3;
		break;
	default:
		break;
	}
}

size_t files_b64_envelope_len(const char *path, size_t n)
{
	struct orc_buf b = ORC_BUF_INIT;
	size_t len;

	orc_buf_adds(&b, "{\"path\":");
	orc_json_quote(&b, path);
	orc_buf_adds(&b, ",\"content\":\"\"}");
	len = b.len + (n + 2) / 3 * 4;
	orc_buf_release(&b);
	return len;
}

static size_t on_read(char *p, size_t size, size_t nmemb, void *userdata)
{
	struct stream *st = userdata;
	size_t room = size * nmemb, n;

	if (!st->b64) {
		n = st->n - st->sent < room ? st->n - st->sent : room;
		memcpy(p, st->src + st->sent, n);
		st->sent += n;
		return n;
	}
	if (st->piece_off == st->piece.len) {
		if (st->stage == 3)
			return 0;
		b64_refill(st);
	}
	n = st->piece.len - st->piece_off < room ? st->piece.len - st->piece_off : room;
	memcpy(p, st->piece.ptr + st->piece_off, n);
	st->piece_off += n;
	st->sent += n;
	return n;
}

/* ---- transfers -------------------------------------------------------------------- */


static struct curl_slist *headers(const char *auth, const char *type)
{
	struct curl_slist *l = curl_slist_append(NULL, auth);

	l = curl_slist_append(l, type);
	return curl_slist_append(l, "Expect:");
}

int files_xfer_init(struct xfer *x, struct bench_http *from, const char *auth)
{
	memset(x, 0, sizeof(*x));
	x->h = curl_easy_duphandle(from->h);
	if (!x->h)
		return -1;
	x->base = from->base;
	x->hdr_get = curl_slist_append(curl_slist_append(NULL, auth), "Expect:");
	x->hdr_raw = headers(auth, "Content-Type: application/octet-stream");
	x->hdr_tar = headers(auth, "Content-Type: application/x-tar");
	x->hdr_json = headers(auth, "Content-Type: application/json");
	curl_easy_setopt(x->h, CURLOPT_ERRORBUFFER, x->err);
	curl_easy_setopt(x->h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(x->h, CURLOPT_READFUNCTION, on_read);
	return 0;
}

void files_xfer_release(struct xfer *x)
{
	if (x->h)
		curl_easy_cleanup(x->h);
	curl_slist_free_all(x->hdr_get);
	curl_slist_free_all(x->hdr_raw);
	curl_slist_free_all(x->hdr_tar);
	curl_slist_free_all(x->hdr_json);
	memset(x, 0, sizeof(*x));
}

int files_xfer_do(struct xfer *x, const char *method, const char *path,
		   struct curl_slist *hdrs, struct stream *st, size_t upload_len)
{
	char *url = xasprintf("%s%s", x->base, path);
	CURLcode cc;

	x->err[0] = '\0';
	x->status = 0;
	curl_easy_setopt(x->h, CURLOPT_URL, url);
	curl_easy_setopt(x->h, CURLOPT_HTTPHEADER, hdrs ? hdrs : x->hdr_get);
	curl_easy_setopt(x->h, CURLOPT_TIMEOUT_MS, XFER_TIMEOUT_MS);
	curl_easy_setopt(x->h, CURLOPT_WRITEDATA, st);
	curl_easy_setopt(x->h, CURLOPT_READDATA, st);
	curl_easy_setopt(x->h, CURLOPT_CUSTOMREQUEST, NULL);
	if (!strcmp(method, "PUT")) {
		curl_easy_setopt(x->h, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(x->h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)upload_len);
	} else if (!strcmp(method, "POST")) {
		curl_easy_setopt(x->h, CURLOPT_UPLOAD, 0L);
		curl_easy_setopt(x->h, CURLOPT_POST, 1L);
		curl_easy_setopt(x->h, CURLOPT_POSTFIELDS, NULL);
		curl_easy_setopt(x->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)upload_len);
	} else {
		curl_easy_setopt(x->h, CURLOPT_HTTPGET, 1L);
	}
	cc = curl_easy_perform(x->h);
	free(url);
	curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &x->status);
	if (cc != CURLE_OK) {
		if (!x->err[0])
			snprintf(x->err, sizeof(x->err), "%s", curl_easy_strerror(cc));
		return -1;
	}
	return 0;
}
