/*
 * Serving one FastCGI listening socket: its request threads, and the
 * connections nginx keeps open between requests.
 *
 * nginx keeps its FastCGI connections to the request socket
 * (fastcgi_keep_conn, an upstream keepalive pool; nginx/orchard.conf.in),
 * so a request costs no connect, accept and close. libfcgi would tie a kept
 * connection to the thread that accepted it until nginx closes it, and a
 * few idle connections could then hold every thread. Here no thread holds
 * an idle connection: it waits in the listener's epoll set, armed once
 * (EPOLLONESHOT), and whichever request thread wakes for it serves its next
 * request, then parks it again. The listening socket is in the same set,
 * also one-shot, so one thread wakes per new connection.
 *
 * A connection is handed to libfcgi by setting the request's ipcFd before
 * FCGX_Accept_r, which then reads from it instead of accepting. The
 * request's own listening socket is -1: should libfcgi give up on a
 * connection (EOF or a malformed record) and try to accept another, that
 * fails at once instead of blocking.
 *
 * nginx's auth subrequests (auth_request) cannot keep their connections:
 * nginx finalizes a header-only subrequest before it reads END_REQUEST.
 * The auth socket is served the same way; its connections just close.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "api.h"
#include "err.h"
#include "log.h"
#include "strutil.h"

/*
 * Request threads mostly sleep in a wait; their stacks need not be glibc's
 * 8 MiB. The deepest seen through the integration tests and the scale
 * benchmark touched 28 KiB (libcurl, libpq, json-c on a bounded body;
 * argon2id's memory is on the heap), so 512 KiB leaves a wide margin.
 * Sanitizer builds keep the default: their frames are several times larger.
 */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define REQUEST_STACK 0
#else
#define REQUEST_STACK (512u * 1024)
#endif

#define ARMED (EPOLLIN | EPOLLRDHUP | EPOLLONESHOT)

static volatile int stopping;
static pthread_mutex_t active_lock = PTHREAD_MUTEX_INITIALIZER;
static int active;

/* Refuse to steal the socket of a running api; remove a stale one. */
static int prepare_unix_path(const char *path)
{
	struct sockaddr_un sa;
	int fd, rc;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		orc_logf(ORC_LOG_ERROR, "socket path \"%s\" is longer than %zu bytes", path,
			 sizeof(sa.sun_path) - 1);
		return ORC_EINVALID;
	}
	if (access(path, F_OK) < 0)
		return 0;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return ORC_ERROR;
	rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	close(fd);
	if (rc == 0) {
		orc_logf(ORC_LOG_ERROR, "another process is listening on \"%s\"", path);
		return ORC_ECONFLICT;
	}
	if (unlink(path) < 0) {
		orc_logf(ORC_LOG_ERROR, "unlink() \"%s\" failed: %s", path, strerror(errno));
		return ORC_ERROR;
	}
	return 0;
}

/* (Re-)arm fd in l's epoll set; 0, or -1 with errno. */
static int arm(const struct api_listener *l, int fd)
{
	struct epoll_event ev;

	memset(&ev, 0, sizeof(ev));
	ev.events = ARMED;
	ev.data.fd = fd;
	if (epoll_ctl(l->ep, EPOLL_CTL_MOD, fd, &ev) == 0)
		return 0;
	if (errno != ENOENT)
		return -1;
	return epoll_ctl(l->ep, EPOLL_CTL_ADD, fd, &ev);
}

int api_listener_open(struct api_listener *l)
{
	const char *path = l->path;
	int is_unix = !strchr(path, ':'), err;

	l->ep = -1;
	if (is_unix && (err = prepare_unix_path(path)) < 0)
		return err;
	l->fd = FCGX_OpenSocket(path, 1024);
	if (l->fd < 0) {
		orc_logf(ORC_LOG_ERROR, "FCGX_OpenSocket() \"%s\" failed: %s", path, strerror(errno));
		return ORC_ERROR;
	}
	/* Non-blocking: a thread woken for a connection another took must
	 * not sleep in accept(). */
	fcntl(l->fd, F_SETFD, FD_CLOEXEC);
	fcntl(l->fd, F_SETFL, fcntl(l->fd, F_GETFL) | O_NONBLOCK);
	/* nginx's workers alone may connect (peer.c). */
	if (is_unix && (err = api_peer_secure_socket(path)) < 0)
		return err;
	if ((l->ep = epoll_create1(EPOLL_CLOEXEC)) < 0 || arm(l, l->fd) < 0) {
		orc_logf(ORC_LOG_ERROR, "epoll for \"%s\" failed: %s", path, strerror(errno));
		return ORC_ERROR;
	}
	return 0;
}

/*
 * The access line: one per client request at info, with the request id,
 * trace and span (the log context) and the route's pattern. nginx's key
 * checks are at debug unless refused: a refused request never reaches a
 * route, so its only line here is the check's.
 */
static void access_line(struct api_req *r, int auth_only, int64_t ms)
{
	enum orc_log_level level = auth_only && r->status < 400 ? ORC_LOG_DEBUG : ORC_LOG_INFO;
	int64_t key_id = 0;

	if (r->key_id && orc_parse_i64(&key_id, r->key_id, 1, INT64_MAX) < 0)
		key_id = 0;

	orc_log(level, auth_only ? "auth request" : "request", "method", r->method,
		"route", r->route ? r->route : auth_only ? NULL : "unmatched", "path", r->path,
		ORC_LOG_INT("status", r->status), ORC_LOG_INT("duration_ms", ms),
		"parent_span_id", r->trace.parent_id[0] ? r->trace.parent_id : NULL,
		"remote_addr", api_req_param(r, "REMOTE_ADDR"),
		/* Last: without a tenant (and so a key) the list ends here. */
		r->tenant_id ? orc_log_int_tag : NULL, "tenant_id", (long long)r->tenant_id,
		ORC_LOG_INT("key_id", key_id), NULL);
}

/* 1 when the request's stdin has been read to its end. */
static int handle_one(FCGX_Request *fcgi, const struct api_listener *l)
{
	struct api_req r;
	int64_t t0 = orc_mono_ms();
	int input_done;

	if (api_req_init(&r, fcgi) == 0) {
		if (l->auth_only)
			api_dispatch_auth(&r);
		else
			api_dispatch(&r);
	}
	if (!r.replied)
		api_reply_error(&r, ORC_ERROR, "no response");
	input_done = api_req_end_input(&r);
	api_metrics_request(&r, orc_mono_ms() - t0);
	access_line(&r, l->auth_only, orc_mono_ms() - t0);
	api_req_release(&r);
	orc_log_context_clear();
	return input_done;
}

/*
 * End a request; returns the descriptor to park (a kept connection), or -1.
 *
 * libfcgi's close of a connection nginx did not ask to keep shuts down the
 * sending side and then reads until nginx closes its end (so that unread
 * input cannot turn the close into a reset): four system calls and a sleep
 * until nginx has handled END_REQUEST, for every auth subrequest. When all
 * input has been read, a plain close cannot reset anything, so the request
 * is finished as if kept (END_REQUEST flushed, the descriptor left open)
 * and the descriptor closed at once. Input left unread clears
 * keepConnection (api_req_end_input): nginx does not reuse a connection
 * whose request body it has not finished sending, so libfcgi's close is
 * right there.
 */
static int finish(FCGX_Request *fcgi, int input_done)
{
	int kept = fcgi->keepConnection, fd;

	if (!kept && input_done)
		fcgi->keepConnection = 1;
	FCGX_Finish_r(fcgi);
	fd = fcgi->ipcFd;
	fcgi->ipcFd = -1;
	if (fd >= 0 && !kept) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* Serve the next request on connection fd, then park or close it. */
static void serve(struct api_listener *l, FCGX_Request *fcgi, int fd)
{
	/* keepConnection set: FCGX_Accept_r first ends "the previous
	 * request", and must not close fd doing so. */
	fcgi->ipcFd = fd;
	fcgi->keepConnection = 1;
	if (FCGX_Accept_r(fcgi) < 0) {
		/* EOF or garbage: libfcgi closed fd. */
		fcgi->ipcFd = -1;
		return;
	}
	pthread_mutex_lock(&active_lock);
	active++;
	pthread_mutex_unlock(&active_lock);
	fd = finish(fcgi, handle_one(fcgi, l));
	pthread_mutex_lock(&active_lock);
	active--;
	pthread_mutex_unlock(&active_lock);
	if (fd >= 0 && arm(l, fd) < 0)
		close(fd);
}

/*
 * A new connection: served by this thread when its request is already
 * there (nginx writes it right after connecting), else parked, so that
 * a connection that sends nothing holds no thread.
 */
static int accept_one(struct api_listener *l, int *fd)
{
	struct pollfd p;

	*fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
	if (*fd < 0) {
		if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
			usleep(10000); /* do not spin */
		if (!stopping)
			arm(l, l->fd);
		return -1;
	}
	if (!stopping)
		arm(l, l->fd);   /* the next connection wakes another thread */
	if (!api_peer_allowed(*fd)) {
		close(*fd);
		return -1;
	}
	api_metrics_connection(l->auth_only);
	p.fd = *fd;
	p.events = POLLIN;
	p.revents = 0;
	if (poll(&p, 1, 0) == 1)
		return 0;
	if (arm(l, *fd) < 0)
		close(*fd);
	return -1;
}

static void *request_thread(void *arg)
{
	struct api_listener *l = arg;
	struct epoll_event ev;
	FCGX_Request fcgi;
	int fd, n;

	FCGX_InitRequest(&fcgi, -1, 0);
	for (;;) {
		n = epoll_wait(l->ep, &ev, 1, -1);
		if (n < 0 && errno != EINTR)
			usleep(10000);
		if (n != 1)
			continue;
		fd = ev.data.fd;
		if (fd == l->fd) {
			if (accept_one(l, &fd) < 0)
				continue;
		} else if (ev.events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)) {
			close(fd);   /* nginx closed an idle kept connection */
			continue;
		}
		serve(l, &fcgi, fd);
	}
	return NULL;
}

int api_listener_start(struct api_listener *l, int n)
{
	pthread_attr_t attr;
	int i, rc, err = 0;

	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (REQUEST_STACK && (rc = pthread_attr_setstacksize(&attr, REQUEST_STACK)) != 0)
		orc_logf(ORC_LOG_WARN, "pthread_attr_setstacksize() failed: %s", strerror(rc));
	for (i = 0; i < n; i++) {
		pthread_t t;
		if ((rc = pthread_create(&t, &attr, request_thread, l)) != 0) {
			orc_logf(ORC_LOG_ERROR, "pthread_create() failed: %s", strerror(rc));
			err = ORC_ERROR;
			break;
		}
	}
	pthread_attr_destroy(&attr);
	return err;
}

/*
 * Stop taking connections. Requests in flight, and those nginx sends on
 * connections it keeps, are still served until the process exits.
 */
void api_listener_stop(struct api_listener *l)
{
	stopping = 1;
	if (l->fd >= 0 && l->ep >= 0)
		epoll_ctl(l->ep, EPOLL_CTL_DEL, l->fd, NULL);
	if (l->fd >= 0)
		shutdown(l->fd, SHUT_RDWR);
}

int api_listener_active(void)
{
	int n;

	pthread_mutex_lock(&active_lock);
	n = active;
	pthread_mutex_unlock(&active_lock);
	return n;
}

void api_listener_remove(const struct api_listener *l)
{
	if (l->path && !strchr(l->path, ':'))
		unlink(l->path);
}
