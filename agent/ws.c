#include "ws.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <microhttpd.h>
#include <wslay/wslay.h>

#include "err.h"
#include "xalloc.h"

struct agent_ws {
	int sock;
	struct MHD_UpgradeResponseHandle *urh;
	wslay_event_context_ptr ctx;
	char *extra;               /* read before the socket */
	size_t extra_len, extra_off;
	int gone;                  /* EOF or an I/O error */
	int close_pending;         /* close once the queued messages are out */
	uint16_t close_code;
	char close_reason[64];
	agent_ws_message_fn on_message;
	void *arg;
};

static ssize_t on_recv(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags,
		       void *user)
{
	struct agent_ws *w = user;
	ssize_t n;

	(void)flags;
	if (w->extra_off < w->extra_len) {
		n = (ssize_t)(w->extra_len - w->extra_off < len ? w->extra_len - w->extra_off : len);
		memcpy(buf, w->extra + w->extra_off, (size_t)n);
		w->extra_off += (size_t)n;
		return n;
	}
	do
		n = recv(w->sock, buf, len, MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
		wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
		return -1;
	}
	if (n <= 0) {
		w->gone = 1;
		wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
		return -1;
	}
	return n;
}

static ssize_t on_send(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags,
		       void *user)
{
	struct agent_ws *w = user;
	ssize_t n;

	(void)flags;
	do
		n = send(w->sock, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
		wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
		return -1;
	}
	if (n < 0) {
		w->gone = 1;
		wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
		return -1;
	}
	return n;
}

static void on_msg(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *a,
		   void *user)
{
	struct agent_ws *w = user;

	(void)ctx;
	if (a->opcode == WSLAY_TEXT_FRAME || a->opcode == WSLAY_BINARY_FRAME)
		w->on_message(w->arg, a->opcode == WSLAY_TEXT_FRAME, (const char *)a->msg,
			      a->msg_length);
}

int agent_ws_new(struct agent_ws **out, int sock, struct MHD_UpgradeResponseHandle *urh,
		 const char *extra, size_t extra_len, size_t max_msg,
		 agent_ws_message_fn on_message, void *arg)
{
	static const struct wslay_event_callbacks cb = {
		on_recv, on_send, NULL, NULL, NULL, NULL, on_msg,
	};
	struct agent_ws *w = xcalloc(1, sizeof(*w));

	w->sock = sock;
	w->urh = urh;
	w->on_message = on_message;
	w->arg = arg;
	if (extra_len) {
		w->extra = xmalloc(extra_len);
		memcpy(w->extra, extra, extra_len);
		w->extra_len = extra_len;
	}
	if (wslay_event_context_server_init(&w->ctx, &cb, w) != 0) {
		w->ctx = NULL;
		agent_ws_free(w);
		return ORC_ERROR;
	}
	wslay_event_config_set_max_recv_msg_length(w->ctx, max_msg);
	*out = w;
	return 0;
}

void agent_ws_free(struct agent_ws *w)
{
	if (!w)
		return;
	if (w->ctx)
		wslay_event_context_free(w->ctx);
	if (w->urh)
		MHD_upgrade_action(w->urh, MHD_UPGRADE_ACTION_CLOSE);
	free(w->extra);
	free(w);
}

int agent_ws_fd(const struct agent_ws *w)
{
	return w->sock;
}

short agent_ws_events(const struct agent_ws *w)
{
	short ev = 0;

	if (w->gone)
		return 0;
	if (wslay_event_want_read(w->ctx))
		ev |= POLLIN;
	if (wslay_event_want_write(w->ctx) || w->close_pending)
		ev |= POLLOUT;
	return ev;
}

int agent_ws_handle(struct agent_ws *w, short revents)
{
	/* Bytes read along with the headers are there before the socket says so. */
	if ((revents & (POLLIN | POLLHUP | POLLERR)) || w->extra_off < w->extra_len) {
		if (wslay_event_want_read(w->ctx) && wslay_event_recv(w->ctx) != 0)
			return ORC_ERROR;
	}
	if (wslay_event_want_write(w->ctx) && wslay_event_send(w->ctx) != 0)
		return ORC_ERROR;
	/* wslay sends control frames ahead of queued messages: the close
	 * waits until the messages before it are out. */
	if (w->close_pending && wslay_event_get_queued_msg_count(w->ctx) == 0) {
		w->close_pending = 0;
		wslay_event_queue_close(w->ctx, w->close_code, (const uint8_t *)w->close_reason,
					strlen(w->close_reason));
		if (wslay_event_send(w->ctx) != 0)
			return ORC_ERROR;
	}
	if (w->gone || (!wslay_event_want_read(w->ctx) && !wslay_event_want_write(w->ctx)))
		return ORC_ERROR;
	return 0;
}

int agent_ws_send_text(struct agent_ws *w, const char *s, size_t n)
{
	struct wslay_event_msg m = { WSLAY_TEXT_FRAME, (const uint8_t *)s, n };

	if (w->close_pending)
		return ORC_ERROR;
	return w->gone || wslay_event_queue_msg(w->ctx, &m) != 0 ? ORC_ERROR : 0;
}

int agent_ws_ping(struct agent_ws *w)
{
	struct wslay_event_msg m = { WSLAY_PING, (const uint8_t *)"", 0 };

	return w->gone || wslay_event_queue_msg(w->ctx, &m) != 0 ? ORC_ERROR : 0;
}

void agent_ws_close(struct agent_ws *w, uint16_t code, const char *reason)
{
	if (w->gone || w->close_pending || wslay_event_get_close_sent(w->ctx))
		return;
	w->close_pending = 1;
	w->close_code = code;
	snprintf(w->close_reason, sizeof(w->close_reason), "%s", reason);
}

int agent_ws_close_sent(const struct agent_ws *w)
{
	return w->gone || (!w->close_pending && wslay_event_get_close_sent(w->ctx));
}

int agent_ws_close_received(const struct agent_ws *w)
{
	return wslay_event_get_close_received(w->ctx);
}

size_t agent_ws_backlog(const struct agent_ws *w)
{
	return wslay_event_get_queued_msg_length(w->ctx);
}
