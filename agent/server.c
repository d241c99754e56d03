#include "server.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <microhttpd.h>

#include "cancel.h"
#include "err.h"
#include "files.h"
#include "git_ops.h"
#include "json.h"
#include "log.h"
#include "pty.h"
#include "revoke.h"
#include "strutil.h"
#include "xalloc.h"

#define MAX_CONNECTIONS 256
#define IDLE_TIMEOUT_S 600
#define CONNECTION_MEMORY (32u << 10)
#define SMALL_BODY (64 * 1024)
#define EXEC_BODY (8u * 1024 * 1024)

struct route {
	const char *method;
	const char *path;
	agent_handler_fn handler;
	size_t max_body;
	enum orc_log_level log_level;   /* health is polled: debug */
	const struct agent_upload_ops *upload; /* body streamed, not collected */
};

static const struct route routes[] = {
	{ "GET", "/health", agent_handle_health, 0, ORC_LOG_DEBUG },
	{ "POST", "/exec", agent_handle_exec, EXEC_BODY, ORC_LOG_INFO },
	{ "POST", "/exec/cancel", agent_handle_exec_cancel, 0, ORC_LOG_INFO },
	{ "GET", "/pty", agent_handle_pty, 0, ORC_LOG_INFO },
	{ "POST", "/keys/revoke", agent_handle_keys_revoke, 0, ORC_LOG_INFO },
	{ "PUT", "/files", agent_handle_files_put, SIZE_MAX, ORC_LOG_INFO, &agent_files_upload },
	{ "GET", "/files", agent_handle_files_get, 0, ORC_LOG_INFO },
	{ "DELETE", "/files", agent_handle_files_delete, 0, ORC_LOG_INFO },
	{ "GET", "/files/base64", agent_handle_files_b64_get, 0, ORC_LOG_INFO },
	{ "POST", "/files/base64", agent_handle_files_b64_post, AGENT_B64_BODY, ORC_LOG_INFO },
	{ "GET", "/files/list", agent_handle_files_list, 0, ORC_LOG_INFO },
	{ "GET", "/files/stat", agent_handle_files_stat, 0, ORC_LOG_INFO },
	{ "POST", "/files/mkdir", agent_handle_files_mkdir, 0, ORC_LOG_INFO },
	{ "GET", "/archive", agent_handle_archive_get, 0, ORC_LOG_INFO },
	{ "PUT", "/archive", agent_handle_archive_put, SIZE_MAX, ORC_LOG_INFO, &agent_archive_upload },
	{ "POST", "/git/apply", agent_handle_git_apply, AGENT_PATCH_BODY, ORC_LOG_INFO },
	{ "GET", "/git/diff", agent_handle_git_diff, 0, ORC_LOG_INFO },
	{ "POST", "/git/reset", agent_handle_git_reset, 0, ORC_LOG_INFO },
};

struct agent_server {
	struct MHD_Daemon *daemon;
	char *token;
	size_t token_len;
	int listen_fd;
	char *unix_path;
};

/* Per request, kept in MHD's con_cls across the calls of one request. */
struct request_state {
	const struct route *route;
	struct orc_buf body;
	int too_big;
	void *upload;              /* route->upload's state */
	unsigned error_status;     /* decided from the headers; sent after the body */
	const char *error_msg;
	const char *allow;
	int64_t start_ms;
	char request_id[129];      /* X-Request-ID, when valid */
	struct orc_trace trace;    /* a child span of traceparent's, or a new trace */
};

void agent_reply_json(struct agent_reply *reply, unsigned status, json_object *o)
{
	size_t len;
	const char *s = orc_json_str(o, &len);

	reply->status = status;
	orc_buf_reset(&reply->body);
	orc_buf_add(&reply->body, s, len);
}

void agent_reply_error(struct agent_reply *reply, unsigned status, const char *msg)
{
	reply->status = status;
	orc_buf_reset(&reply->body);
	orc_buf_adds(&reply->body, "{\"error\":");
	orc_json_quote(&reply->body, msg);
	orc_buf_addc(&reply->body, '}');
}

static enum MHD_Result send_reply(struct MHD_Connection *conn, const char *method, const char *url,
				  struct request_state *st, struct agent_reply *reply,
				  const char *allow)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;
	enum orc_log_level level = st->route ? st->route->log_level : ORC_LOG_INFO;
	size_t len = 0;
	char *body = orc_buf_detach(&reply->body, &len);

	if (reply->response) {
		resp = reply->response;
		free(body);
	} else if (!(resp = MHD_create_response_from_buffer_with_free_callback(len, body, free))) {
		free(body);
		return MHD_NO;
	} else {
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	}
	if (allow)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
	ret = MHD_queue_response(conn, reply->status, resp);
	MHD_destroy_response(resp);

	if (reply->status >= 400 && level < ORC_LOG_INFO)
		level = ORC_LOG_INFO;
	orc_log(level, "request", "method", method, "path", url, ORC_LOG_INT("status", reply->status),
		ORC_LOG_INT("duration_ms", orc_mono_ms() - st->start_ms),
		"parent_span_id", st->trace.parent_id[0] ? st->trace.parent_id : NULL, NULL);
	return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *conn, const char *method, const char *url,
				  struct request_state *st, unsigned status, const char *msg,
				  const char *allow)
{
	struct agent_reply reply = { 0, ORC_BUF_INIT };

	agent_reply_error(&reply, status, msg);
	return send_reply(conn, method, url, st, &reply, allow);
}

static int authorized(const struct agent_server *s, struct MHD_Connection *conn, const char *url)
{
	const char *v = NULL;
	size_t len = 0;

	/* WebSocket clients cannot always set headers: GET /pty also takes
	 * ?token= (docs/agent-protocol.md). */
	if (!strcmp(url, "/pty") &&
	    MHD_lookup_connection_value_n(conn, MHD_GET_ARGUMENT_KIND, "token", 5, &v, &len) == MHD_YES &&
	    v && len == s->token_len && orc_ct_equal(v, s->token, len))
		return 1;
	if (MHD_lookup_connection_value_n(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION,
					  strlen(MHD_HTTP_HEADER_AUTHORIZATION), &v, &len) != MHD_YES)
		return 0;
	if (len < 7 || strncasecmp(v, "Bearer ", 7))
		return 0;
	v += 7;
	len -= 7;
	return len == s->token_len && orc_ct_equal(v, s->token, len);
}

/* 0 and the route; or 404 (no such path) / 405 with *allow set. */
static unsigned find_route(const struct route **out, const char **allow, const char *method,
			   const char *url)
{
	size_t i;
	int path_known = 0;

	for (i = 0; i < sizeof(routes) / sizeof(*routes); i++) {
		if (strcmp(routes[i].path, url))
			continue;
		if (!strcmp(routes[i].method, method)) {
			*out = &routes[i];
			return 0;
		}
		path_known = 1;
		*allow = routes[i].method; /* one method per path so far */
	}
	return path_known ? MHD_HTTP_METHOD_NOT_ALLOWED : MHD_HTTP_NOT_FOUND;
}

/*
 * The first call of a request: headers only. Auth and routing are decided
 * here, but an error is normally sent only after the (small) body has been
 * read: answering early makes MHD close the connection while the client may
 * still be sending, and the client then sees a reset instead of the 401.
 * Bodies that are too large (by Content-Length), and chunked bodies of
 * requests that already failed, are answered at once.
 */
static enum MHD_Result begin_request(struct agent_server *s, struct MHD_Connection *conn,
				     const char *method, const char *url,
				     struct request_state *st)
{
	const char *cl, *te;
	size_t limit = SMALL_BODY;
	int64_t length = 0;
	unsigned status;

	if (!authorized(s, conn, url)) {
		st->error_status = MHD_HTTP_UNAUTHORIZED;
		st->error_msg = "missing or wrong bearer token";
	} else if ((status = find_route(&st->route, &st->allow, method, url)) != 0) {
		st->error_status = status;
		st->error_msg = status == MHD_HTTP_NOT_FOUND ? "no such route" : "method not allowed";
	} else if (agent_key_revoked(MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Orchard-Key"))) {
		/* nginx let the key in just before its revocation reached us */
		st->error_status = MHD_HTTP_FORBIDDEN;
		st->error_msg = "the API key was revoked";
	} else if (st->route->max_body) {
		limit = st->route->max_body;
	}
	cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	te = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
	if (!st->error_status && st->route->upload) {
		struct agent_request req = { method, url, "", 0, conn, NULL };

		if (st->route->upload->begin(&st->upload, &req) == ORC_ETOOBIG)
			return send_error(conn, method, url, st, MHD_HTTP_CONTENT_TOO_LARGE,
					  "request body is too large", NULL);
	}
	if (cl && orc_parse_i64(&length, cl, 0, INT64_MAX) == 0 && (uint64_t)length > limit) {
		if (!st->error_status)
			return send_error(conn, method, url, st, MHD_HTTP_CONTENT_TOO_LARGE,
					  "request body is too large", NULL);
		return send_error(conn, method, url, st, st->error_status, st->error_msg, st->allow);
	}
	if (te && st->error_status)
		return send_error(conn, method, url, st, st->error_status, st->error_msg, st->allow);
	orc_buf_init(&st->body, limit);
	return MHD_YES;
}

/* The caller's request id and trace (nginx or orchard-api sends them). */
static struct request_state *request_state_new(struct MHD_Connection *conn)
{
	struct request_state *st = xcalloc(1, sizeof(*st));
	const char *v;

	st->start_ms = orc_mono_ms();
	v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Request-ID");
	if (v && orc_request_id_valid(v))
		snprintf(st->request_id, sizeof(st->request_id), "%s", v);
	orc_trace_begin(&st->trace, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "traceparent"));
	return st;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **con_cls)
{
	struct agent_server *s = cls;
	struct request_state *st = *con_cls;
	struct agent_reply reply = { 0, ORC_BUF_INIT };
	struct agent_request req;

	(void)version;
	if (!st) {
		st = request_state_new(conn);
		*con_cls = st;
		orc_log_context_set(st->request_id, &st->trace);
		return begin_request(s, conn, method, url, st);
	}
	/* One thread per connection: its lines are this request's. */
	orc_log_context_set(st->request_id, &st->trace);
	if (*upload_data_size) {
		if (st->upload)
			st->route->upload->data(st->upload, upload_data, *upload_data_size);
		else if (!st->too_big && orc_buf_add(&st->body, upload_data, *upload_data_size) < 0)
			st->too_big = 1;
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (st->error_status)
		return send_error(conn, method, url, st, st->error_status, st->error_msg, st->allow);
	if (st->too_big)
		return send_error(conn, method, url, st, MHD_HTTP_CONTENT_TOO_LARGE,
				  "request body is too large", NULL);
	req.method = method;
	req.path = url;
	req.body = orc_buf_cstr(&st->body);
	req.body_len = st->body.len;
	req.conn = conn;
	req.upload = st->upload;
	reply.status = MHD_HTTP_INTERNAL_SERVER_ERROR;
	st->route->handler(&reply, &req);
	return send_reply(conn, method, url, st, &reply, NULL);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct request_state *st = *con_cls;

	(void)cls;
	(void)conn;
	(void)toe;
	if (!st)
		return;
	if (st->upload)
		st->route->upload->free(st->upload);
	orc_buf_release(&st->body);
	free(st);
	*con_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	char msg[512];
	size_t n;

	(void)cls;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	n = strlen(msg);
	while (n && msg[n - 1] == '\n')
		msg[--n] = '\0';
	orc_log(ORC_LOG_WARN, "libmicrohttpd", "detail", msg, NULL);
}

int agent_server_start(struct agent_server **out, const char *listen, const char *token)
{
	struct agent_server *s = xcalloc(1, sizeof(*s));
	int err;

	s->listen_fd = -1;
	s->token = xstrdup(token);
	s->token_len = strlen(token);
	if ((err = agent_listen_open(&s->listen_fd, &s->unix_path, listen)) < 0)
		goto fail;
	s->daemon = MHD_start_daemon(
		MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
		MHD_USE_POLL | MHD_USE_ERROR_LOG | MHD_ALLOW_UPGRADE,
		0, NULL, NULL, on_request, s,
		MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
		MHD_OPTION_LISTEN_SOCKET, (MHD_socket)s->listen_fd,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned int)MAX_CONNECTIONS,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)IDLE_TIMEOUT_S,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
		/* MHD's default, 32 KiB, the largest it takes from malloc: a
		 * larger pool is a fresh mmap per connection, and MHD zeroes the
		 * unused half of its read buffer at every request, so each call
		 * (the api's execs and the controller's health checks come on
		 * connections of their own) faulted in and cleared 256 KiB of a
		 * 512 KiB pool: ~1 ms of a 9 ms exec through the stack, 6-8 % of
		 * all CPU in the 1,000-sandbox scale run. Uploads measured as
		 * fast with 32 KiB as with 512 KiB (bench/README.md, 2026-12-03
		 * third session). */
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONNECTION_MEMORY,
		MHD_OPTION_END);
	if (!s->daemon) {
		orc_log(ORC_LOG_ERROR, "starting the HTTP server failed", "listen", listen, NULL);
		err = ORC_ERROR;
		goto fail;
	}
	*out = s;
	return 0;
fail:
	agent_server_free(s);
	return err;
}

void agent_server_free(struct agent_server *s)
{
	if (!s)
		return;
	if (s->daemon)
		MHD_stop_daemon(s->daemon); /* closes the listening socket */
	else if (s->listen_fd >= 0)
		close(s->listen_fd);
	if (s->unix_path)
		unlink(s->unix_path);
	free(s->unix_path);
	free(s->token);
	free(s);
}
