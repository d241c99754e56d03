/*
 * A tiny HTTP/1.x responder for GET /metrics on a loopback address
 * (ORCHARD_CONTROLLER_METRICS). One thread, one connection at a time:
 * Prometheus scrapes every few seconds, so there is nothing to multiplex.
 * Every connection is bounded (request head size, read and write
 * deadlines) and closed after one answer.
 */
#include "ctl_metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "err.h"
#include "log.h"
#include "metrics.h"
#include "strutil.h"

#define HEAD_MAX 8192                  /* request line and headers */
#define IO_TIMEOUT_MS 5000             /* per connection, each way */
#define BODY_MAX (8u << 20)

static int listen_fd = -1;

/* ---- the address --------------------------------------------------------- */

/* "127.x.y.z:PORT" or "[::1]:PORT" into sa; anything else is refused. */
static int parse_addr(struct sockaddr_storage *out, socklen_t *len_out, const char *addr)
{
	const char *colon = strrchr(addr, ':');
	char host[64];
	int64_t port;
	size_t n;

	if (!colon || orc_parse_i64(&port, colon + 1, 1, 65535) < 0)
		return ORC_EINVALID;
	n = (size_t)(colon - addr);
	if (n >= sizeof(host))
		return ORC_EINVALID;
	memcpy(host, addr, n);
	host[n] = '\0';
	memset(out, 0, sizeof(*out));
	if (n > 2 && host[0] == '[' && host[n - 1] == ']') {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)out;
		host[n - 1] = '\0';
		if (inet_pton(AF_INET6, host + 1, &s6->sin6_addr) != 1 ||
		    !IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr))
			return ORC_EINVALID;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		*len_out = sizeof(*s6);
		return 0;
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)out;
		if (inet_pton(AF_INET, host, &s4->sin_addr) != 1 ||
		    (ntohl(s4->sin_addr.s_addr) >> 24) != 127)
			return ORC_EINVALID;
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
		*len_out = sizeof(*s4);
		return 0;
	}
}

/* ---- one connection ------------------------------------------------------ */

/* Wait until fd is ready for events or deadline (orc_mono_ms) passes. */
static int wait_fd(int fd, short events, int64_t deadline)
{
	struct pollfd p = { fd, events, 0 };
	int64_t left;
	int rc;

	for (;;) {
		left = deadline - orc_mono_ms();
		if (left <= 0)
			return ORC_ETIMEOUT;
		rc = poll(&p, 1, (int)left);
		if (rc > 0)
			return 0;
		if (rc == 0)
			return ORC_ETIMEOUT;
		if (errno != EINTR)
			return ORC_ERROR;
	}
}

/* Read up to the end of the request head; the head is NUL-terminated. */
static int read_head(char *buf, size_t max, int fd)
{
	int64_t deadline = orc_mono_ms() + IO_TIMEOUT_MS;
	size_t len = 0;
	ssize_t n;
	int err;

	while (len < max - 1) {
		if ((err = wait_fd(fd, POLLIN, deadline)) < 0)
			return err;
		n = recv(fd, buf + len, max - 1 - len, 0);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			return ORC_ERROR;
		len += (size_t)n;
		buf[len] = '\0';
		if (strstr(buf, "\r\n\r\n") || strstr(buf, "\n\n"))
			return 0;
	}
	return ORC_ETOOBIG;
}

static void write_all(int fd, const char *p, size_t len, int64_t deadline)
{
	ssize_t n;

	while (len) {
		if (wait_fd(fd, POLLOUT, deadline) < 0)
			return;
		n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			return;
		p += n;
		len -= (size_t)n;
	}
}

static void reply(int fd, int status, const char *reason, const char *extra, const char *type,
		  const char *body, size_t len)
{
	int64_t deadline = orc_mono_ms() + IO_TIMEOUT_MS;
	char head[512];
	int n;

	n = snprintf(head, sizeof(head),
		     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
		     "Cache-Control: no-store\r\nConnection: close\r\n%s\r\n",
		     status, reason, type, len, extra);
	if (n < 0 || (size_t)n >= sizeof(head))
		return;
	write_all(fd, head, (size_t)n, deadline);
	write_all(fd, body, len, deadline);
}

/*
 * Answer a request that may not have been read to its end: closing with
 * unread bytes would reset the connection and could lose the answer, so
 * read (and drop) what the client still sends, for a bounded time.
 */
static void reply_text(int fd, int status, const char *reason, const char *extra)
{
	int64_t deadline = orc_mono_ms() + 1000;
	char body[64], sink[4096];
	size_t drained = 0;
	ssize_t n;
	int len = snprintf(body, sizeof(body), "%s\n", reason);

	reply(fd, status, reason, extra, "text/plain; charset=utf-8", body, (size_t)len);
	shutdown(fd, SHUT_WR);
	while (drained < (1u << 20) && wait_fd(fd, POLLIN, deadline) == 0) {
		n = recv(fd, sink, sizeof(sink), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		drained += (size_t)n;
	}
}

static void serve_one(int fd)
{
	struct orc_buf body;
	char head[HEAD_MAX], *sp1, *sp2, *eol;
	size_t path_len;
	int err;

	if ((err = read_head(head, sizeof(head), fd)) < 0) {
		if (err == ORC_ETOOBIG)
			reply_text(fd, 431, "Request Header Fields Too Large", "");
		return;   /* a timeout or a vanished client gets no answer */
	}
	/* Request line: METHOD SP TARGET SP HTTP/1.x */
	eol = strpbrk(head, "\r\n");
	*eol = '\0';
	sp1 = strchr(head, ' ');
	sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
	if (!sp1 || !sp2 || strncmp(sp2 + 1, "HTTP/1.", 7) || strchr(sp2 + 1, ' ')) {
		reply_text(fd, 400, "Bad Request", "");
		return;
	}
	*sp1 = '\0';
	path_len = strcspn(sp1 + 1, "? ");
	if (path_len != 8 || strncmp(sp1 + 1, "/metrics", 8)) {
		reply_text(fd, 404, "Not Found", "");
		return;
	}
	if (strcmp(head, "GET")) {
		reply_text(fd, 405, "Method Not Allowed", "Allow: GET\r\n");
		return;
	}
	orc_buf_init(&body, BODY_MAX);
	if (ctl_metrics_render(&body) < 0) {
		orc_log(ORC_LOG_ERROR, "metrics: the text passed its maximum size", NULL);
		reply_text(fd, 500, "Internal Server Error", "");
	} else {
		reply(fd, 200, "OK", "", ORC_METRICS_CONTENT_TYPE, orc_buf_cstr(&body), body.len);
	}
	orc_buf_release(&body);
}

static void *serve(void *arg)
{
	int fd;

	(void)arg;
	for (;;) {
		fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EINTR && errno != ECONNABORTED)
				usleep(100000);   /* EMFILE and friends: do not spin */
			continue;
		}
		serve_one(fd);
		close(fd);
	}
	return NULL;
}

int ctl_metrics_serve(const char *addr)
{
	struct sockaddr_storage sa;
	socklen_t salen = 0;
	pthread_t t;
	int one = 1, rc;

	if (!addr || !*addr)
		return 0;
	if (parse_addr(&sa, &salen, addr) < 0) {
		orc_log(ORC_LOG_ERROR, "ORCHARD_CONTROLLER_METRICS must be 127.0.0.1:PORT or [::1]:PORT "
			"(loopback only)", "value", addr, NULL);
		return ORC_EINVALID;
	}
	listen_fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (listen_fd < 0 ||
	    setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(listen_fd, (struct sockaddr *)&sa, salen) < 0 || listen(listen_fd, 16) < 0) {
		orc_log(ORC_LOG_ERROR, "metrics: cannot listen", "address", addr, "error",
			strerror(errno), NULL);
		if (listen_fd >= 0)
			close(listen_fd);
		listen_fd = -1;
		return ORC_ERROR;
	}
	if ((rc = pthread_create(&t, NULL, serve, NULL)) != 0) {
		orc_log(ORC_LOG_ERROR, "metrics: pthread_create() failed", "error", strerror(rc), NULL);
		close(listen_fd);
		listen_fd = -1;
		return ORC_ERROR;
	}
	pthread_detach(t);
	orc_log(ORC_LOG_INFO, "serving metrics", "address", addr, "path", "/metrics", NULL);
	return 0;
}
