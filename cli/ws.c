/*
 * The WebSocket client of ws.h: the handshake over curl's raw connection,
 * then frames. The socket curl hands over is non-blocking; sends wait in
 * poll() for room, reads take what there is and the caller polls.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <wslay/wslay.h>

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

/* Raw bytes before the upgrade (the handshake's answer) into ws->in. */
static int fill_raw(struct cli_ws *ws)
{
	char buf[16384];
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

/* ---- wslay's callbacks: curl's connection below, a message queue above ---- */

static ssize_t on_recv(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *user)
{
	struct cli_ws *ws = user;
	size_t n;
	CURLcode rc;

	(void)flags;
	if (ws->in_off < ws->in.len) { /* read along with the handshake's answer */
		n = ws->in.len - ws->in_off < len ? ws->in.len - ws->in_off : len;
		memcpy(buf, ws->in.ptr + ws->in_off, n);
		ws->in_off += n;
		return (ssize_t)n;
	}
	rc = curl_easy_recv(ws->curl, buf, len, &n);
	if (rc == CURLE_AGAIN) {
		wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
		return -1;
	}
	if (rc != CURLE_OK || n == 0) {
		ws->eof = 1;
		wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
		return -1;
	}
	return (ssize_t)n;
}

static ssize_t on_send(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags,
		       void *user)
{
	struct cli_ws *ws = user;
	size_t n;
	CURLcode rc;

	(void)flags;
	rc = curl_easy_send(ws->curl, data, len, &n);
	if (rc == CURLE_AGAIN) {
		wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
		return -1;
	}
	if (rc != CURLE_OK) {
		ws->eof = 1;
		wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
		return -1;
	}
	return (ssize_t)n;
}

static int on_genmask(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, void *user)
{
	(void)ctx;
	(void)user;
	orc_random_bytes(buf, len);
	return 0;
}

/* Text, binary and close messages wait in order for cli_ws_next; wslay
 * answers pings itself and replies to a close. */
static void on_msg(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *a, void *user)
{
	struct cli_ws *ws = user;
	struct cli_ws_msg *m, **tail;
	unsigned char code[2];

	(void)ctx;
	if (a->opcode != WSLAY_TEXT_FRAME && a->opcode != WSLAY_BINARY_FRAME &&
	    a->opcode != WSLAY_CONNECTION_CLOSE)
		return;
	m = xcalloc(1, sizeof(*m));
	m->op = a->opcode;
	orc_buf_init(&m->data, 0);
	if (a->opcode == WSLAY_CONNECTION_CLOSE) {
		/* The code as it came (none: 1005), then the reason. */
		if (a->msg_length >= 2)
			orc_buf_add(&m->data, a->msg, a->msg_length);
		else if (a->status_code) {
			code[0] = (unsigned char)(a->status_code >> 8);
			code[1] = (unsigned char)a->status_code;
			orc_buf_add(&m->data, code, 2);
		}
	} else {
		orc_buf_add(&m->data, a->msg, a->msg_length);
	}
	for (tail = &ws->msgs; *tail; tail = &(*tail)->next)
		;
	*tail = m;
}

/* Write what wslay has queued, waiting for room. */
static int flush(struct cli_ws *ws)
{
	int64_t deadline = orc_mono_ms() + SEND_TIMEOUT_MS;

	while (wslay_event_want_write(ws->ctx)) {
		if (wslay_event_send(ws->ctx) != 0 || ws->eof)
			return ORC_EUNAVAIL;
		if (!wslay_event_want_write(ws->ctx))
			break;
		if (orc_mono_ms() > deadline || wait_fd(ws->fd, POLLOUT, 1000) < 0) {
			if (orc_mono_ms() > deadline)
				return ORC_ETIMEOUT;
		}
	}
	return 0;
}

int cli_ws_fill(struct cli_ws *ws)
{
	int rc;

	if (!ws->ctx || ws->eof)
		return ws->eof ? ORC_EUNAVAIL : 0;
	if (wslay_event_want_read(ws->ctx)) {
		rc = wslay_event_recv(ws->ctx);
		if (rc != 0 && !ws->eof)
			return ORC_EINVALID; /* a protocol error: wslay has queued its close */
	}
	(void)flush(ws); /* pongs and close replies */
	return ws->eof ? ORC_EUNAVAIL : 0;
}

int cli_ws_send(struct cli_ws *ws, int opcode, const void *data, size_t len)
{
	struct wslay_event_msg m = { (uint8_t)opcode, data ? data : (const void *)"", len };

	if (!ws->ctx || wslay_event_queue_msg(ws->ctx, &m) != 0)
		return ORC_EUNAVAIL;
	return flush(ws);
}

void cli_ws_send_close(struct cli_ws *ws, unsigned code)
{
	if (ws->close_sent || !ws->ctx)
		return;
	ws->close_sent = 1;
	if (!wslay_event_get_close_sent(ws->ctx) &&
	    wslay_event_queue_close(ws->ctx, (uint16_t)code, NULL, 0) == 0)
		(void)flush(ws);
}

int cli_ws_next(struct cli_ws *ws, int *op, struct orc_buf *out)
{
	struct cli_ws_msg *m = ws->msgs;

	if (!m)
		return 0;
	ws->msgs = m->next;
	orc_buf_reset(out);
	orc_buf_add(out, m->data.ptr ? m->data.ptr : "", m->data.len);
	*op = m->op == WSLAY_CONNECTION_CLOSE ? CLI_WS_CLOSE : m->op;
	orc_buf_release(&m->data);
	free(m);
	return 1;
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
		if ((err = fill_raw(ws)) < 0)
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

	if (!cl || orc_parse_i64(&want, cl, 0, REFUSAL_BODY_MAX) < 0)
		want = 0;
	while ((int64_t)(ws->in.len - head_len) < want && !ws->eof && orc_mono_ms() < deadline)
		if (wait_fd(ws->fd, POLLIN, 1000) == 0 && fill_raw(ws) < 0)
			break;
	if ((rid = head_header(ws->in.ptr, head_len, "x-request-id:")) != NULL)
		snprintf(r.request_id, sizeof(r.request_id), "%s", rid);
	r.status = status;
	orc_buf_add(&r.body, ws->in.ptr + head_len, ws->in.len - head_len);
	cli_response_parse(&r);
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

/* After the 101: wslay takes the connection (what was read past the head first). */
static int start_frames(struct cli_ws *ws, size_t head_len)
{
	static const struct wslay_event_callbacks cb = {
		.recv_callback = on_recv,
		.send_callback = on_send,
		.genmask_callback = on_genmask,
		.on_msg_recv_callback = on_msg,
	};

	ws->in_off = head_len;
	if (wslay_event_context_client_init(&ws->ctx, &cb, ws) != 0) {
		ws->ctx = NULL;
		return ORC_ERROR;
	}
	wslay_event_config_set_max_recv_msg_length(ws->ctx, CLI_WS_MESSAGE_MAX);
	return 0;
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
	cli_debug_request(ws->curl, cfg, "GET", url, CURLE_OK, status, NULL);
	if (status != 101) {
		err = report_refusal(ws, status, head_len);
		goto done;
	}
	if (!accept_ok(ws->in.ptr, head_len, orc_buf_cstr(&key))) {
		cli_error("the WebSocket upgrade with %s failed: wrong Sec-WebSocket-Accept", cfg->url);
		err = ORC_ERROR;
		goto done;
	}
	if ((err = start_frames(ws, head_len)) < 0)
		cli_error("cannot start the WebSocket session");
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
	struct cli_ws_msg *m, *next;

	for (m = ws->msgs; m; m = next) {
		next = m->next;
		orc_buf_release(&m->data);
		free(m);
	}
	ws->msgs = NULL;
	if (ws->ctx)
		wslay_event_context_free(ws->ctx);
	ws->ctx = NULL;
	if (ws->curl)
		curl_easy_cleanup(ws->curl);
	ws->curl = NULL;
	ws->fd = -1;
	orc_buf_release(&ws->in);
	ws->in_off = 0;
}
