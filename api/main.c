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
 *   ORCHARD_API_SOCKET_GROUP, ORCHARD_API_SOCKET_MODE, ORCHARD_API_PEER_UIDS
 *                          who may connect to the sockets (peer.c)
 *   ORCHARD_API_AUTH_FAILURES  failed key checks per key id and per client
 *                          address in a burst, refilled over a minute
 *                          (default 20; 0: no limit; auth_limit.c)
 *   ORCHARD_API_THREADS    request threads (default 256)
 *   ORCHARD_API_TENANT_THREADS  requests one tenant may have in flight
 *                          (default 3/4 of ORCHARD_API_THREADS; tenant_share.c)
 *   ORCHARD_API_AUTH_THREADS  threads of the auth socket (default 8)
 *   ORCHARD_DB_POOL        database connections (default 8)
 *   ORCHARD_API_RATE_LIMIT, ORCHARD_API_RATE_BURST  requests per minute and
 *                          burst per tenant (default 0: off; rate_limit.c)
 *   ORCHARD_API_WORKERS    exec worker threads kept for wait:false jobs (default 4;
 *                          more start while jobs run, up to 256)
 *   ORCHARD_API_RAW_MAX    largest raw upload (files/raw, archive) in bytes
 *                          (default 1 GiB, the agent's own default limit)
 *   ORCHARD_API_REPLAYS, ORCHARD_API_REPLAYS_PER_TENANT
 *                          trajectory replays at once (replay.c)
 *   ORCHARD_EXEC_MAX_PER_SANDBOX, ORCHARD_EXEC_MAX_PER_TENANT,
 *   ORCHARD_EXEC_QUEUE_PER_SANDBOX, ORCHARD_EXEC_QUEUE_PER_TENANT
 *                          default exec limits of tenants (exec_limit.c; unset: none)
 *
 * SIGTERM/SIGINT stop accepting, give in-flight requests up to 10 s, remove
 * the sockets and exit 0. Serving the sockets: serve.c.
 */
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <curl/curl.h>

#include "api.h"
#include "err.h"
#include "log.h"
#include "strutil.h"
#include "xalloc.h"

struct api_server api_server;

/*
 * Two sockets, each with its own threads (serve.c). A request thread is
 * held for the whole of a /wait or an exec with wait:true, so the key check
 * that nginx runs before every request (auth_request) gets a socket and
 * threads of its own: it never queues behind long requests, whatever they
 * hold.
 */
static struct api_listener public_listener = { .fd = -1, .ep = -1 };
static struct api_listener auth_listener = { .fd = -1, .ep = -1, .auth_only = 1 };

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
	api_tenant_share_init(api_server.threads,
			      env_int("ORCHARD_API_TENANT_THREADS",
				      api_server.threads - api_server.threads / 4, 1, 4096));
	api_server.workers = env_int("ORCHARD_API_WORKERS", 4, 1, 256);
	api_rate_limit_init(env_i64("ORCHARD_API_RATE_LIMIT", 0, 0, 100000000),
			    env_i64("ORCHARD_API_RATE_BURST", 0, 0, 100000000));
	api_server.raw_max = env_i64("ORCHARD_API_RAW_MAX", (int64_t)1 << 30, 1, (int64_t)1 << 42);
	api_server.driver = getenv("ORCHARD_DRIVER");
	if (!api_server.driver || !*api_server.driver)
		api_server.driver = "local";
	if (strcmp(api_server.driver, "local") && strcmp(api_server.driver, "kubernetes")) {
		orc_log(ORC_LOG_ERROR, "ORCHARD_DRIVER must be local or kubernetes", "driver",
			api_server.driver, NULL);
		return 2;
	}
	if (api_peer_init() < 0)
		return 2;
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
	orc_pg_pool_open(&api_server.db, dburl, env_int("ORCHARD_DB_POOL", 8, 1, 1024));
	api_auth_init();
	api_auth_limit_init(env_int("ORCHARD_API_AUTH_FAILURES", 20, 0, 1000000));
	if (api_metrics_init() < 0 || api_exec_limit_init() < 0)
		return 1;
	/* The auth socket first, so that whoever waits for the request
	 * socket to appear (stack.sh, a liveness probe) finds both. */
	if (FCGX_Init() != 0 || api_listener_open(&auth_listener) < 0 ||
	    api_listener_open(&public_listener) < 0)
		goto fail;
	if (api_key_revoke_start() < 0 || api_notify_start(dburl) < 0 || api_lanes_start(api_server.workers) < 0 ||
	    api_lease_start() < 0 || api_listener_start(&auth_listener, auth_threads) < 0 ||
	    api_listener_start(&public_listener, api_server.threads) < 0)
		goto fail;
	orc_log(ORC_LOG_INFO, "orchard-api listening", "socket", sock, "auth_socket", auth_sock,
		"runner", api_server.runner, NULL);

	do {
		if (sigwait(&sigs, &sig) != 0)
			sig = 0;
	} while (sig != SIGTERM && sig != SIGINT);

	orc_log(ORC_LOG_INFO, "shutting down", NULL);
	FCGX_ShutdownPending();
	api_listener_stop(&public_listener);
	api_listener_stop(&auth_listener);
	for (i = 0; i < 100 && api_listener_active(); i++)
		usleep(100000);
	api_listener_remove(&public_listener);
	api_listener_remove(&auth_listener);
	/* Other threads may still be inside libpq or libcurl: do not run
	 * library destructors under them. Logs are unbuffered; state is in
	 * the database. */
	_exit(0);

fail:
	/* A socket we made must not be left for the next start to find. */
	if (public_listener.fd >= 0)
		api_listener_remove(&public_listener);
	if (auth_listener.fd >= 0)
		api_listener_remove(&auth_listener);
	return 1;
}
