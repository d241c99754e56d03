/*
 * orchard-api: configuration, the FastCGI socket, request threads, signals.
 *
 * Environment (docs/architecture.md):
 *   ORCHARD_DATABASE_URL   libpq conninfo (required)
 *   ORCHARD_API_SOCKET     FastCGI socket: a unix socket path (required);
 *                          "host:port" listens on TCP instead (libfcgi)
 *   ORCHARD_API_AUTH_SOCKET  FastCGI socket for nginx's auth subrequests
 *                          (/_auth, /_auth_agent) alone (default
 *                          "<ORCHARD_API_SOCKET>.auth"; required with TCP)
 *   ORCHARD_API_THREADS    request threads (default 256)
 *   ORCHARD_API_AUTH_THREADS  threads of the auth socket (default 8)
 *   ORCHARD_DB_POOL        database connections (default 8)
 *   ORCHARD_API_WORKERS    exec worker threads for wait:false jobs (default 4)
 *   ORCHARD_API_RAW_MAX    largest raw upload (files/raw, archive) in bytes
 *                          (default 1 GiB, the agent's own default limit)
 *   ORCHARD_API_REPLAYS, ORCHARD_API_REPLAYS_PER_TENANT
 *                          trajectory replays at once (replay.c)
 *
 * SIGTERM/SIGINT stop accepting, give in-flight requests up to 10 s, remove
 * the socket and exit 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <curl/curl.h>

#include "api.h"
#include "err.h"
#include "log.h"
#include "strutil.h"
#include "xalloc.h"

struct api_server api_server;

/*
 * Two sockets, each with its own threads. A request thread is held for the
 * whole of a /wait or an exec with wait:true, so the key check that nginx
 * runs before every request (auth_request) gets a socket and threads of its
 * own: it never queues behind long requests, whatever they hold.
 */
struct listener {
	const char *path;
	int fd;
	int auth_only;                /* answers /_auth and /_auth_agent only */
};

static struct listener public_listener = { .fd = -1 };
static struct listener auth_listener = { .fd = -1, .auth_only = 1 };

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

static volatile int stopping;
static pthread_mutex_t active_lock = PTHREAD_MUTEX_INITIALIZER;
static int active;

static int env_int(const char *name, int dflt, int min, int max)
{
	const char *v = getenv(name);
	int64_t n;

	if (!v || !*v)
		return dflt;
	if (orc_parse_i64(&n, v, min, max) < 0) {
		orc_logf(ORC_LOG_ERROR, "%s=\"%s\" is not an integer in %d..%d", name, v, min, max);
		exit(2);
	}
	return (int)n;
}

static int64_t env_i64(const char *name, int64_t dflt, int64_t min, int64_t max)
{
	const char *v = getenv(name);
	int64_t n;

	if (!v || !*v)
		return dflt;
	if (orc_parse_i64(&n, v, min, max) < 0) {
		orc_logf(ORC_LOG_ERROR, "%s=\"%s\" is not an integer in %lld..%lld", name, v,
			 (long long)min, (long long)max);
		exit(2);
	}
	return n;
}

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

static int open_socket(struct listener *l)
{
	const char *path = l->path;
	int is_unix = !strchr(path, ':'), err;

	if (is_unix && (err = prepare_unix_path(path)) < 0)
		return err;
	l->fd = FCGX_OpenSocket(path, 1024);
	if (l->fd < 0) {
		orc_logf(ORC_LOG_ERROR, "FCGX_OpenSocket() \"%s\" failed: %s", path, strerror(errno));
		return ORC_ERROR;
	}
	fcntl(l->fd, F_SETFD, FD_CLOEXEC);
	/* nginx workers run as another user: let them connect. */
	if (is_unix && chmod(path, 0666) < 0) {
		orc_logf(ORC_LOG_ERROR, "chmod() \"%s\" failed: %s", path, strerror(errno));
		return ORC_ERROR;
	}
	return 0;
}

/* 1 when the request's stdin has been read to its end. */
static int handle_one(FCGX_Request *fcgi, const struct listener *l)
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
	if (orc_log_enabled(ORC_LOG_DEBUG)) {
		char status[8], ms[24];
		snprintf(status, sizeof(status), "%d", r.status);
		snprintf(ms, sizeof(ms), "%lld", (long long)(orc_mono_ms() - t0));
		orc_log(ORC_LOG_DEBUG, "request", "method", r.method, "path", r.path, "status", status,
			"duration_ms", ms, "request_id", r.request_id, NULL);
	}
	api_req_release(&r);
	return input_done;
}

/*
 * End a request. libfcgi's close of a connection nginx did not ask to keep
 * shuts down the sending side and then reads until nginx closes its end (so
 * that unread input cannot turn the close into a reset): four system calls
 * and a sleep until nginx has handled END_REQUEST, for every auth
 * subrequest. When all input has been read, a plain close cannot reset
 * anything and nginx will not reuse the connection, so the request is
 * finished as if kept (END_REQUEST flushed, the descriptor left open) and
 * the descriptor closed at once.
 */
static void finish(FCGX_Request *fcgi, int input_done)
{
	int close_now = !fcgi->keepConnection && input_done;

	if (close_now)
		fcgi->keepConnection = 1;
	FCGX_Finish_r(fcgi);
	if (close_now) {
		fcgi->keepConnection = 0;
		if (fcgi->ipcFd >= 0)
			close(fcgi->ipcFd);
		fcgi->ipcFd = -1;
	}
}

static void *request_thread(void *arg)
{
	const struct listener *l = arg;
	FCGX_Request fcgi;

	FCGX_InitRequest(&fcgi, l->fd, 0);
	while (!stopping) {
		if (FCGX_Accept_r(&fcgi) < 0) {
			if (stopping)
				break;
			usleep(10000); /* EMFILE and friends: do not spin */
			continue;
		}
		pthread_mutex_lock(&active_lock);
		active++;
		pthread_mutex_unlock(&active_lock);
		finish(&fcgi, handle_one(&fcgi, l));
		pthread_mutex_lock(&active_lock);
		active--;
		pthread_mutex_unlock(&active_lock);
	}
	FCGX_Free(&fcgi, 0);
	return NULL;
}

static int start_threads(int n, struct listener *l)
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

/* ORCHARD_API_AUTH_SOCKET, or the public socket's path plus ".auth". */
static const char *auth_socket_path(const char *sock)
{
	const char *v = getenv("ORCHARD_API_AUTH_SOCKET");
	size_t n;
	char *p;

	if (v && *v)
		return v;
	if (strchr(sock, ':')) {
		orc_log(ORC_LOG_ERROR, "ORCHARD_API_AUTH_SOCKET must be set when ORCHARD_API_SOCKET "
			"is a TCP address", "socket", sock, NULL);
		return NULL;
	}
	n = strlen(sock);
	p = xmalloc(n + sizeof(".auth"));
	memcpy(p, sock, n);
	memcpy(p + n, ".auth", sizeof(".auth"));
	return p;
}

static void close_listener(struct listener *l)
{
	if (l->fd >= 0)
		shutdown(l->fd, SHUT_RDWR); /* wakes threads blocked in accept() */
}

static void remove_listener(const struct listener *l)
{
	if (l->path && !strchr(l->path, ':'))
		unlink(l->path);
}

int main(int argc, char **argv)
{
	const char *dburl, *sock, *auth_sock;
	int auth_threads;
	char host[64];
	sigset_t sigs;
	int sig, i;

	orc_log_init("api");
	/*
	 * A fixed mmap threshold (glibc then stops raising it after each free)
	 * hands large blocks back to the system when they are freed: argon2id's
	 * 19 MiB per key verification would otherwise stay in the malloc arena
	 * of each request thread that verified a key, ~300 MiB in all
	 * (docs/reliability.md, "Soak").
	 */
	mallopt(M_MMAP_THRESHOLD, 1024 * 1024);
	if (argc > 1 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V"))) {
		printf("orchard-api %s\n", API_VERSION);
		return 0;
	}
	if (argc > 1) {
		fprintf(stderr, "usage: orchard-api   (configured by the environment; see "
			"docs/architecture.md)\n");
		return 2;
	}
	dburl = getenv("ORCHARD_DATABASE_URL");
	sock = getenv("ORCHARD_API_SOCKET");
	if (!dburl || !*dburl || !sock || !*sock) {
		orc_log(ORC_LOG_ERROR, "ORCHARD_DATABASE_URL and ORCHARD_API_SOCKET must be set", NULL);
		return 2;
	}
	if (!(auth_sock = auth_socket_path(sock)))
		return 2;
	if (!strcmp(auth_sock, sock)) {
		orc_log(ORC_LOG_ERROR, "ORCHARD_API_AUTH_SOCKET must differ from ORCHARD_API_SOCKET",
			"socket", sock, NULL);
		return 2;
	}
	public_listener.path = sock;
	auth_listener.path = auth_sock;
	api_server.threads = env_int("ORCHARD_API_THREADS", 256, 1, 4096);
	auth_threads = env_int("ORCHARD_API_AUTH_THREADS", 8, 1, 256);
	api_server.workers = env_int("ORCHARD_API_WORKERS", 4, 1, 256);
	api_server.raw_max = env_i64("ORCHARD_API_RAW_MAX", (int64_t)1 << 30, 1, (int64_t)1 << 42);
	api_server.driver = getenv("ORCHARD_DRIVER");
	if (!api_server.driver || !*api_server.driver)
		api_server.driver = "local";
	if (strcmp(api_server.driver, "local") && strcmp(api_server.driver, "kubernetes")) {
		orc_log(ORC_LOG_ERROR, "ORCHARD_DRIVER must be local or kubernetes", "driver",
			api_server.driver, NULL);
		return 2;
	}
	api_server.conninfo = xstrdup(dburl);
	if (gethostname(host, sizeof(host)) < 0)
		snprintf(host, sizeof(host), "unknown");
	host[sizeof(host) - 1] = '\0';
	/* The start time tells a restarted process from an old one that had
	 * the same pid: their jobs must not share a lease. */
	snprintf(api_server.runner, sizeof(api_server.runner), "%s:%d:%lld", host, (int)getpid(),
		 (long long)orc_now());

	/* Signals are handled by sigwait in this thread only. */
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);

	curl_global_init(CURL_GLOBAL_DEFAULT);
	orc_pg_pool_init(&api_server.db, dburl, env_int("ORCHARD_DB_POOL", 8, 1, 1024));
	api_auth_init();
	if (api_metrics_init() < 0)
		return 1;
	/* The auth socket first, so that whoever waits for the request
	 * socket to appear (stack.sh, a liveness probe) finds both. */
	if (FCGX_Init() != 0 || open_socket(&auth_listener) < 0 || open_socket(&public_listener) < 0)
		goto fail;
	if (api_notify_start(dburl) < 0 || api_lanes_start(api_server.workers) < 0 ||
	    api_lease_start() < 0 || start_threads(auth_threads, &auth_listener) < 0 ||
	    start_threads(api_server.threads, &public_listener) < 0)
		goto fail;
	orc_log(ORC_LOG_INFO, "orchard-api listening", "socket", sock, "auth_socket", auth_sock,
		"runner", api_server.runner, NULL);

	do {
		if (sigwait(&sigs, &sig) != 0)
			sig = 0;
	} while (sig != SIGTERM && sig != SIGINT);

	orc_log(ORC_LOG_INFO, "shutting down", NULL);
	stopping = 1;
	FCGX_ShutdownPending();
	close_listener(&public_listener);
	close_listener(&auth_listener);
	for (i = 0; i < 100; i++) {
		int n;
		pthread_mutex_lock(&active_lock);
		n = active;
		pthread_mutex_unlock(&active_lock);
		if (!n)
			break;
		usleep(100000);
	}
	remove_listener(&public_listener);
	remove_listener(&auth_listener);
	/* Other threads may still be inside libpq or libcurl: do not run
	 * library destructors under them. Logs are unbuffered; state is in
	 * the database. */
	_exit(0);

fail:
	/* A socket we made must not be left for the next start to find. */
	if (public_listener.fd >= 0)
		remove_listener(&public_listener);
	if (auth_listener.fd >= 0)
		remove_listener(&auth_listener);
	return 1;
}
