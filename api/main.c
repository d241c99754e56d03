/*
 * orchard-api: configuration, the FastCGI socket, request threads, signals.
 *
 * Environment (docs/architecture.md):
 *   ORCHARD_DATABASE_URL   libpq conninfo (required)
 *   ORCHARD_API_SOCKET     FastCGI socket: a unix socket path (required);
 *                          "host:port" listens on TCP instead (libfcgi)
 *   ORCHARD_API_THREADS    request threads (default 32)
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

static int listen_fd = -1;
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

static int open_socket(const char *path)
{
	int is_unix = !strchr(path, ':'), err;

	if (is_unix && (err = prepare_unix_path(path)) < 0)
		return err;
	listen_fd = FCGX_OpenSocket(path, 1024);
	if (listen_fd < 0) {
		orc_logf(ORC_LOG_ERROR, "FCGX_OpenSocket() \"%s\" failed: %s", path, strerror(errno));
		return ORC_ERROR;
	}
	fcntl(listen_fd, F_SETFD, FD_CLOEXEC);
	/* nginx workers run as another user: let them connect. */
	if (is_unix && chmod(path, 0666) < 0) {
		orc_logf(ORC_LOG_ERROR, "chmod() \"%s\" failed: %s", path, strerror(errno));
		return ORC_ERROR;
	}
	return 0;
}

static void handle_one(FCGX_Request *fcgi)
{
	struct api_req r;
	int64_t t0 = orc_mono_ms();

	if (api_req_init(&r, fcgi) == 0)
		api_dispatch(&r);
	if (!r.replied)
		api_reply_error(&r, ORC_ERROR, "no response");
	api_metrics_request(&r, orc_mono_ms() - t0);
	if (orc_log_enabled(ORC_LOG_DEBUG)) {
		char status[8], ms[24];
		snprintf(status, sizeof(status), "%d", r.status);
		snprintf(ms, sizeof(ms), "%lld", (long long)(orc_mono_ms() - t0));
		orc_log(ORC_LOG_DEBUG, "request", "method", r.method, "path", r.path, "status", status,
			"duration_ms", ms, "request_id", r.request_id, NULL);
	}
	api_req_release(&r);
}

static void *request_thread(void *arg)
{
	FCGX_Request fcgi;

	(void)arg;
	FCGX_InitRequest(&fcgi, listen_fd, 0);
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
		handle_one(&fcgi);
		FCGX_Finish_r(&fcgi);
		pthread_mutex_lock(&active_lock);
		active--;
		pthread_mutex_unlock(&active_lock);
	}
	FCGX_Free(&fcgi, 0);
	return NULL;
}

static int start_threads(int n, void *(*fn)(void *))
{
	int i, rc;

	for (i = 0; i < n; i++) {
		pthread_t t;
		if ((rc = pthread_create(&t, NULL, fn, NULL)) != 0) {
			orc_logf(ORC_LOG_ERROR, "pthread_create() failed: %s", strerror(rc));
			return ORC_ERROR;
		}
		pthread_detach(t);
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *dburl, *sock;
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
	api_server.threads = env_int("ORCHARD_API_THREADS", 32, 1, 4096);
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
	if (FCGX_Init() != 0 || open_socket(sock) < 0)
		return 1;
	if (api_notify_start(dburl) < 0 || api_lanes_start(api_server.workers) < 0 ||
	    api_lease_start() < 0 ||
	    start_threads(api_server.threads, request_thread) < 0)
		return 1;
	orc_log(ORC_LOG_INFO, "orchard-api listening", "socket", sock, "runner", api_server.runner, NULL);

	do {
		if (sigwait(&sigs, &sig) != 0)
			sig = 0;
	} while (sig != SIGTERM && sig != SIGINT);

	orc_log(ORC_LOG_INFO, "shutting down", NULL);
	stopping = 1;
	FCGX_ShutdownPending();
	shutdown(listen_fd, SHUT_RDWR); /* wakes threads blocked in accept() */
	for (i = 0; i < 100; i++) {
		int n;
		pthread_mutex_lock(&active_lock);
		n = active;
		pthread_mutex_unlock(&active_lock);
		if (!n)
			break;
		usleep(100000);
	}
	if (!strchr(sock, ':'))
		unlink(sock);
	/* Other threads may still be inside libpq or libcurl: do not run
	 * library destructors under them. Logs are unbuffered; state is in
	 * the database. */
	_exit(0);
}
