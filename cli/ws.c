/*
 * The WebSocket client of ws.h: the handshake over curl's raw connection,
 * then frames. The socket curl hands over is non-blocking; sends wait in
 * poll() for room, reads take what there is and the caller polls.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "base64.h"
#include "err.h"
#include "json.h"
#include "strutil.h"
#include "ws.h"
#include "ws_accept.h"
#include "xalloc.h"

#define HANDSHAKE_MAX (16 * 1024)
#define REFUSAL_BODY_MAX (64 * 1024)
#define HANDSHAKE_TIMEOUT_MS 30000
#define SEND_TIMEOUT_MS 60000

/* Wait until fd is ready for events, at most ms; 0 or ORC_ETIMEOUT. */
static int wait_fd(int fd, short events, int ms)
{
	struct pollfd p = { fd, events, 0 };
	int n;

	do
		n = poll(&p, 1, ms);
	while (n < 0 && errno == EINTR);
	return n > 0 ? 0 : ORC_ETIMEOUT;
}

static int send_all(struct cli_ws *ws, const char *p, size_t len)
{
	size_t n;
	CURLcode rc;

	while (len) {
		rc = curl_easy_send(ws->curl, p, len, &n);
		if (rc == CURLE_AGAIN) {
			if (wait_fd(ws->fd, POLLOUT, SEND_TIMEOUT_MS) < 0)
				return ORC_ETIMEOUT;
			continue;
		}
		if (rc != CURLE_OK)
			return ORC_EUNAVAIL;
		p += n;
		len -= n;
	}
	return 0;
}

int cli_ws_fill(struct cli_ws *ws)
{
	char buf[65536];
	size_t n;
	CURLcode rc;

	for (;;) {
		rc = curl_easy_recv(ws->curl, buf, sizeof(buf), &n);
		if (rc == CURLE_AGAIN)
			return 0;
		if (rc != CURLE_OK || n == 0) {
			ws->eof = 1;
			return rc == CURLE_OK ? 0 : ORC_EUNAVAIL;
		}
		if (orc_buf_add(&ws->in, buf, n) < 0)
			return ORC_ETOOBIG;
	}
}

int cli_ws_send(struct cli_ws *ws, int opcode, const void *data, size_t len)
{
	unsigned char head[14], mask[4];
	struct orc_buf frame = ORC_BUF_INIT;
	const unsigned char *src = data;
	size_t h = 0, i;
	char *dst;
	int err;

	head[h++] = (unsigned char)(0x80 | opcode);
	if (len < 126) {
		head[h++] = (unsigned char)(0x80 | len);
	} else if (len < 65536) {
		head[h++] = 0x80 | 126;
		head[h++] = (unsigned char)(len >> 8);
		head[h++] = (unsigned char)len;
	} else {
		head[h++] = 0x80 | 127;
		for (i = 0; i < 8; i++)
			head[h++] = (unsigned char)((uint64_t)len >> (56 - 8 * i));
	}
	orc_random_bytes(mask, sizeof(mask));
	memcpy(head + h, mask, 4);
	h += 4;
	orc_buf_add(&frame, head, h);
	orc_buf_add(&frame, data ? data : "", len);
	for (dst = frame.ptr + h, i = 0; i < len; i++)
		dst[i] = (char)(src[i] ^ mask[i & 3]);
	err = send_all(ws, frame.ptr, frame.len);
	orc_buf_release(&frame);
	return err;
}

void cli_ws_send_close(struct cli_ws *ws, unsigned code)
{
	unsigned char p[2] = { (unsigned char)(code >> 8), (unsigned char)code };

	if (ws->close_sent || !ws->curl)
		return;
	ws->close_sent = 1;
	(void)cli_ws_send(ws, CLI_WS_CLOSE, p, sizeof(p));
}

/* Drop the first n bytes read. */
static void consume(struct cli_ws *ws, size_t n)
{
	memmove(ws->in.ptr, ws->in.ptr + n, ws->in.len - n);
	ws->in.len -= n;
	ws->in.ptr[ws->in.len] = '\0';
}

int cli_ws_next(struct cli_ws *ws, int *op, struct orc_buf *out)
{
	const unsigned char *p;
	uint64_t len;
	size_t h, i;
	int fin, opcode, masked;

	for (;;) {
		p = (const unsigned char *)ws->in.ptr;
		if (ws->in.len < 2)
			return 0;
		fin = p[0] & 0x80;
		opcode = p[0] & 0x0f;
		masked = p[1] & 0x80;
		len = p[1] & 0x7f;
		h = 2;
		if (p[0] & 0x70)
			return ORC_EINVALID;       /* no extensions were agreed */
		if (len == 126) {
			if (ws->in.len < 4)
				return 0;
			len = (uint64_t)p[2] << 8 | p[3];
			h = 4;
		} else if (len == 127) {
			if (ws->in.len < 10)
				return 0;
			for (len = 0, i = 0; i < 8; i++)
				len = len << 8 | p[2 + i];
			h = 10;
		}
		if (len > CLI_WS_MESSAGE_MAX)
			return ORC_ETOOBIG;
		if (masked)
			h += 4;
		if (ws->in.len < h + len)
			return 0;
		if (masked)
			for (i = 0; i < len; i++)
				ws->in.ptr[h + i] = (char)(p[h + i] ^ p[h - 4 + (i & 3)]);
		if (opcode >= CLI_WS_CLOSE) {
			if (!fin || len > 125)
				return ORC_EINVALID;
			if (opcode == CLI_WS_PING) {
				(void)cli_ws_send(ws, CLI_WS_PONG, ws->in.ptr + h, (size_t)len);
			} else if (opcode == CLI_WS_CLOSE) {
				orc_buf_reset(out);
				orc_buf_add(out, ws->in.ptr + h, (size_t)len);
				consume(ws, h + (size_t)len);
				*op = CLI_WS_CLOSE;
				return 1;
			} else if (opcode != CLI_WS_PONG) {
				return ORC_EINVALID;
			}
			consume(ws, h + (size_t)len);
			continue;
		}
		if (opcode == CLI_WS_CONT ? !ws->msg_op : (ws->msg_op || opcode > CLI_WS_BINARY))
			return ORC_EINVALID;
		if (opcode != CLI_WS_CONT) {
			orc_buf_reset(&ws->msg);
			ws->msg_op = opcode;
		}
		if (orc_buf_add(&ws->msg, ws->in.ptr + h, (size_t)len) < 0)
			return ORC_ETOOBIG;
		consume(ws, h + (size_t)len);
		if (!fin)
			continue;
		orc_buf_reset(out);
		orc_buf_add(out, orc_buf_cstr(&ws->msg), ws->msg.len);
		*op = ws->msg_op;
		ws->msg_op = 0;
		return 1;
	}
}

/* ---- the handshake ---- */

/* "GET /base/path?q HTTP/1.1" needs the URL's path and its host for Host. */
static int request_text(struct orc_buf *out, const struct cli_config *cfg, const char *url, const char *key)
{
	char *host = NULL, *port = NULL, *path = NULL, *query = NULL;
	CURLU *u = curl_url();
	int err = ORC_EINVALID;

	if (!u || curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_PATH, &path, 0) != CURLUE_OK)
		goto done;
	(void)curl_url_get(u, CURLUPART_PORT, &port, CURLU_NO_DEFAULT_PORT);
	(void)curl_url_get(u, CURLUPART_QUERY, &query, 0);
	orc_buf_addf(out, "GET %s%s%s HTTP/1.1\r\nHost: %s%s%s\r\n", path, query ? "?" : "", query ? query : "",
		     host, port ? ":" : "", port ? port : "");
	orc_buf_addf(out, "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
		     "Sec-WebSocket-Key: %s\r\nUser-Agent: orchardctl/" CLI_VERSION "\r\n", key);
	if (cfg->api_key && *cfg->api_key)
		orc_buf_addf(out, "X-API-Key: %s\r\n", cfg->api_key);
	orc_buf_adds(out, "\r\n");
	err = 0;
done:
	curl_free(host);
	curl_free(port);
	curl_free(path);
	curl_free(query);
	curl_url_cleanup(u);
	return err;
}

/* Read until the end of the answer's head; *head_len is its length with "\r\n\r\n". */
static int read_head(struct cli_ws *ws, size_t *head_len)
{
	char *end;
	int64_t deadline = orc_mono_ms() + HANDSHAKE_TIMEOUT_MS;
	int err;

	for (;;) {
		if (ws->in.len && (end = strstr(ws->in.ptr, "\r\n\r\n")) != NULL) {
			*head_len = (size_t)(end - ws->in.ptr) + 4;
			return 0;
		}
		if (ws->in.len > HANDSHAKE_MAX)
			return ORC_ETOOBIG;
		if (ws->eof)
			return ORC_EUNAVAIL;
		if (orc_mono_ms() > deadline || wait_fd(ws->fd, POLLIN, 1000) < 0) {
			if (orc_mono_ms() > deadline)
				return ORC_ETIMEOUT;
			continue;
		}
		if ((err = cli_ws_fill(ws)) < 0)
			return err;
	}
}

/* A header's value in the head (lines after the status line); NULL when absent. */
static char *head_header(const char *head, size_t head_len, const char *name)
{
	const char *line = strstr(head, "\r\n"), *end = head + head_len, *v, *eol;
	size_t vlen;

	while (line && line + 2 < end) {
		line += 2;
		eol = strstr(line, "\r\n");
		if (!eol)
			break;
		if ((v = cli_header_value(line, (size_t)(eol - line), name, &vlen)) != NULL)
			return xstrndup(v, vlen);
		line = eol;
	}
	return NULL;
}

/* Read a refusal's body (Content-Length) and report it as cli_call would. */
static int report_refusal(struct cli_ws *ws, long status, size_t head_len)
{
	struct cli_response r = CLI_RESPONSE_INIT;
	char *cl = head_header(ws->in.ptr, head_len, "content-length:"), *rid;
	int64_t want = 0, deadline = orc_mono_ms() + 10000;
	json_object *j = NULL;

	if (!cl || orc_parse_i64(&want, cl, 0, REFUSAL_BODY_MAX) < 0)
		want = 0;
	while ((int64_t)(ws->in.len - head_len) < want && !ws->eof && orc_mono_ms() < deadline)
		if (wait_fd(ws->fd, POLLIN, 1000) == 0 && cli_ws_fill(ws) < 0)
			break;
	if ((rid = head_header(ws->in.ptr, head_len, "x-request-id:")) != NULL)
		snprintf(r.request_id, sizeof(r.request_id), "%s", rid);
	r.status = status;
	orc_buf_add(&r.body, ws->in.ptr + head_len, ws->in.len - head_len);
	if (r.body.len && orc_json_parse(&j, r.body.ptr, r.body.len, NULL, 0) == 0)
		r.json = j;
	if (!r.body.len)
		cli_error("the server answered the WebSocket upgrade with HTTP %ld", status);
	else
		cli_report_response(&r);
	cli_response_release(&r);
	free(cl);
	free(rid);
	return status == 404 ? ORC_ENOTFOUND : ORC_ERROR;
}

/* Sec-WebSocket-Accept must be the proof for our key (RFC 6455 4.1). */
static int accept_ok(const char *head, size_t head_len, const char *key)
{
	char want[ORC_WS_ACCEPT_LEN + 1], *got = head_header(head, head_len, "sec-websocket-accept:");
	int ok;

	orc_ws_accept(want, key);
	ok = got && !strcmp(got, want);
	free(got);
	return ok;
}

int cli_ws_connect(struct cli_ws *ws, const struct cli_config *cfg, const char *path)
{
	struct cli_request req = { NULL, path, NULL, NULL, -1, NULL, NULL };
	struct curl_slist *hdrs = NULL;
	struct orc_buf text = ORC_BUF_INIT;
	struct orc_buf key = ORC_BUF_INIT;
	char errbuf[CURL_ERROR_SIZE], nonce[16], *url = cli_url(cfg, path);
	curl_socket_t sock;
	size_t head_len = 0;
	long status = 0;
	CURLcode rc;
	int err;

	orc_buf_init(&ws->in, CLI_WS_MESSAGE_MAX + HANDSHAKE_MAX);
	orc_buf_init(&ws->msg, CLI_WS_MESSAGE_MAX);
	if (!(ws->curl = cli_curl_open(&hdrs, cfg, &req, url, errbuf))) {
		err = ORC_ERROR;
		cli_error("curl_easy_init() failed");
		goto done;
	}
	curl_easy_setopt(ws->curl, CURLOPT_CONNECT_ONLY, 1L);
	/* The bytes after the TLS handshake are ours: HTTP/1.1, never h2. */
	curl_easy_setopt(ws->curl, CURLOPT_SSL_ENABLE_ALPN, 0L);
	curl_easy_setopt(ws->curl, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
	curl_easy_setopt(ws->curl, CURLOPT_TIMEOUT, 0L);
	if ((rc = curl_easy_perform(ws->curl)) != CURLE_OK) {
		err = cli_curl_failed(cfg, "GET", url, rc, errbuf);
		goto done;
	}
	if (curl_easy_getinfo(ws->curl, CURLINFO_ACTIVESOCKET, &sock) != CURLE_OK || sock == CURL_SOCKET_BAD) {
		cli_error("no connection to %s", cfg->url);
		err = ORC_EUNAVAIL;
		goto done;
	}
	ws->fd = (int)sock;
	orc_random_bytes(nonce, sizeof(nonce));
	orc_base64_encode(&key, nonce, sizeof(nonce));
	if ((err = request_text(&text, cfg, url, orc_buf_cstr(&key))) < 0) {
		cli_error("invalid server URL \"%s\"", cfg->url);
		goto done;
	}
	if ((err = send_all(ws, text.ptr, text.len)) < 0 || (err = read_head(ws, &head_len)) < 0) {
		cli_error("the WebSocket upgrade with %s failed: %s", cfg->url,
			  err == ORC_ETIMEOUT ? "no answer in time" : "the connection was closed");
		goto done;
	}
	if (sscanf(ws->in.ptr, "HTTP/1.%*c %ld", &status) != 1) {
		cli_error("the WebSocket upgrade with %s failed: not an HTTP answer", cfg->url);
		err = ORC_ERROR;
		goto done;
	}
	if (status != 101) {
		err = report_refusal(ws, status, head_len);
		goto done;
	}
	if (!accept_ok(ws->in.ptr, head_len, orc_buf_cstr(&key))) {
		cli_error("the WebSocket upgrade with %s failed: wrong Sec-WebSocket-Accept", cfg->url);
		err = ORC_ERROR;
		goto done;
	}
	consume(ws, head_len);
	err = 0;
done:
	if (err < 0 && ws->curl) {
		curl_easy_cleanup(ws->curl);
		ws->curl = NULL;
		ws->fd = -1;
	}
	curl_slist_free_all(hdrs);
	orc_buf_release(&text);
	orc_buf_release(&key);
	free(url);
	return err;
}

void cli_ws_release(struct cli_ws *ws)
{
	if (ws->curl)
		curl_easy_cleanup(ws->curl);
	ws->curl = NULL;
	ws->fd = -1;
	orc_buf_release(&ws->in);
	orc_buf_release(&ws->msg);
	ws->msg_op = 0;
}
