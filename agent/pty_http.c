#include "pty.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>
#include <microhttpd.h>

#include "buf.h"
#include "err.h"
#include "log.h"
#include "server.h"
#include "base64.h"
#include "strutil.h"
#include "revoke.h"
#include "ws.h"
#include "ws_accept.h"

/* GET /pty: the WebSocket handshake (RFC 6455 section 4.2), then the
 * socket goes to a session (pty_session.c). */

#define PROTOCOL_MAX 256

static const char *header(const struct agent_request *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

/* value is a comma-separated list holding token (case-insensitive). */
static int has_token(const char *value, const char *token)
{
	size_t n = strlen(token), len;
	const char *p = value, *end;

	while (p && *p) {
		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		end = strchrnul(p, ',');
		len = (size_t)(end - p);
		while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		if (len == n && !strncasecmp(p, token, n))
			return 1;
		p = *end ? end + 1 : NULL;
	}
	return 0;
}

static int valid_key(const char *key)
{
	struct orc_buf b = ORC_BUF_INIT;
	int ok = orc_base64_decode(&b, key, strlen(key)) == 0 && b.len == 16;

	orc_buf_release(&b);
	return ok;
}

static int valid_session_id(const char *id)
{
	size_t n;

	for (n = 0; id[n]; n++)
		if (!isxdigit((unsigned char)id[n]) || isupper((unsigned char)id[n]))
			return 0;
	return n == AGENT_PTY_ID_LEN;
}

/* The first subprotocol the client offers, echoed back: a client that
 * offers one (Orchard's `api_key.KEY`) fails the handshake without it. */
static int first_protocol(char *out, size_t outlen, const char *offered)
{
	size_t n = 0, i;

	while (*offered == ' ' || *offered == '\t')
		offered++;
	while (offered[n] && offered[n] != ',' && offered[n] != ' ' && offered[n] != '\t')
		n++;
	if (n == 0 || n >= outlen)
		return ORC_EINVALID;
	for (i = 0; i < n; i++)
		if ((unsigned char)offered[i] <= 0x20 || (unsigned char)offered[i] >= 0x7f)
			return ORC_EINVALID;
	memcpy(out, offered, n);
	out[n] = '\0';
	return 0;
}

static int parse_offset(uint64_t *out, const char *s)
{
	int64_t v;

	if (!s) {
		*out = 0;
		return 0;
	}
	if (orc_parse_i64(&v, s, 0, INT64_MAX) < 0)
		return ORC_EINVALID;
	*out = (uint64_t)v;
	return 0;
}

static void on_upgrade(void *cls, struct MHD_Connection *connection, void *con_cls,
		       const char *extra_in, size_t extra_in_size, MHD_socket sock,
		       struct MHD_UpgradeResponseHandle *urh)
{
	struct agent_pty_conn conn = { sock, urh, extra_in, extra_in_size,
		MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "X-Orchard-Key") };
	const char *session = MHD_lookup_connection_value(connection, MHD_GET_ARGUMENT_KIND, "session");
	const char *offset = MHD_lookup_connection_value(connection, MHD_GET_ARGUMENT_KIND, "offset");
	uint64_t off = 0;

	(void)cls;
	(void)con_cls;
	if (!session) {
		agent_pty_session_new(&conn);
		return;
	}
	parse_offset(&off, offset); /* checked before the upgrade */
	if (agent_pty_session_attach(session, off, &conn) == ORC_ENOTFOUND)
		orc_log(ORC_LOG_INFO, "pty session ended before the client could attach",
			"session_id", session, NULL);
}

void agent_handle_pty(struct agent_reply *reply, const struct agent_request *req)
{
	const char *upgrade = header(req, MHD_HTTP_HEADER_UPGRADE);
	const char *connection = header(req, MHD_HTTP_HEADER_CONNECTION);
	const char *version = header(req, "Sec-WebSocket-Version");
	const char *key = header(req, "Sec-WebSocket-Key");
	const char *protocols = header(req, "Sec-WebSocket-Protocol");
	const char *session = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, "session");
	const char *offset = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, "offset");
	const char *api_key = header(req, "X-Orchard-Key");
	struct MHD_Response *resp;
	char accept[ORC_WS_ACCEPT_LEN + 1], protocol[PROTOCOL_MAX];
	uint64_t off;

	if (!upgrade || !has_token(upgrade, "websocket") || !connection || !has_token(connection, "upgrade")) {
		agent_reply_error(reply, 426, "GET /pty needs a WebSocket upgrade");
		return;
	}
	if (!version || strcmp(version, "13")) {
		agent_reply_error(reply, 426, "Sec-WebSocket-Version must be 13");
		return;
	}
	if (!key || !valid_key(key)) {
		agent_reply_error(reply, 400, "Sec-WebSocket-Key must be 16 bytes in base64");
		return;
	}
	if (api_key && !agent_key_valid(api_key)) {
		agent_reply_error(reply, 400, "header X-Orchard-Key must be a key id (1 to 23 digits)");
		return;
	}
	if (session && !valid_session_id(session)) {
		agent_reply_error(reply, 400, "query 'session' must be 32 lowercase hex digits");
		return;
	}
	if (parse_offset(&off, offset) < 0) {
		agent_reply_error(reply, 400, "query 'offset' must be a non-negative integer");
		return;
	}
	if (session && !agent_pty_session_exists(session)) {
		agent_reply_error(reply, 404, "no such session");
		return;
	}
	if (!session && !agent_pty_session_room()) {
		agent_reply_error(reply, 503, "too many PTY sessions");
		return;
	}
	if (!(resp = MHD_create_response_for_upgrade(on_upgrade, NULL))) {
		agent_reply_error(reply, 500, "cannot upgrade the connection");
		return;
	}
	orc_ws_accept(accept, key);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_UPGRADE, "websocket");
	MHD_add_response_header(resp, "Sec-WebSocket-Accept", accept);
	if (protocols && first_protocol(protocol, sizeof(protocol), protocols) == 0)
		MHD_add_response_header(resp, "Sec-WebSocket-Protocol", protocol);
	reply->status = MHD_HTTP_SWITCHING_PROTOCOLS;
	reply->response = resp;
}
