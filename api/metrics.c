/*
 * GET /metrics: the api's Prometheus metrics (docs/observability.md).
 *
 * Counted as they happen: requests by route pattern, method and status,
 * with their latency by route and method (serve.c calls
 * api_metrics_request once per request; nginx's /_auth subrequests are
 * counted in families of their own), and exec run times by final state
 * (job_run.c). Read at scrape time: the process (lib/metrics_process.h),
 * the database pool's use, and sandboxes and open jobs by state from two
 * small GROUP BYs over partial indexes (sandboxes_live_idx, jobs_open_idx),
 * so a scrape costs the database next to nothing.
 *
 * The route is ROUTE_ADMIN: the text names routes and load, which is not a
 * tenant's business; Prometheus scrapes through nginx with an admin key.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "err.h"
#include "log.h"
#include "metrics.h"
#include "metrics_process.h"
#include "pgstmt.h"
#include "strutil.h"

#define METRICS_MAX (8u << 20)

static struct orc_metrics reg = ORC_METRICS_INIT;
static struct orc_metric *requests, *request_seconds, *auth_requests, *auth_seconds, *exec_seconds;
static struct orc_metric *pool_size, *pool_open, *pool_in_use, *pool_waits, *pool_timeouts;
static struct orc_metric *stmt_prepares, *stmt_execs, *connections, *key_verifications;
static struct orc_metric *sandboxes, *jobs;
/* One scrape at a time: the scrape-time gauges are cleared and refilled. */
static pthread_mutex_t scrape_lock = PTHREAD_MUTEX_INITIALIZER;

static const double request_bounds[] = {
	0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600,
};
static const double exec_bounds[] = {
	0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600,
};
/* Every state a sandbox row can be in but 'deleted' (001_init.sql). */
static const char *const live_states[] = { "pending", "ready", "failed", "deleting" };
static const char *const open_states[] = { "queued", "running" };

#define NB(a) (sizeof(a) / sizeof(*(a)))

static const struct orc_metric_def families[] = {
	{ &requests, ORC_METRIC_COUNTER, "orchard_api_requests_total",
	  "Requests answered by orchard-api, by route pattern, method and status.",
	  ORC_LABELS("route", "method", "status"), NULL, 0, 512 },
	{ &request_seconds, ORC_METRIC_HISTOGRAM, "orchard_api_request_duration_seconds",
	  "Time from accepting a request to its last byte written, by route pattern and method.",
	  ORC_LABELS("route", "method"), request_bounds, NB(request_bounds), 128 },
	{ &auth_requests, ORC_METRIC_COUNTER, "orchard_api_auth_requests_total",
	  "nginx's key-check subrequests (/_auth, /_auth_agent) answered, by endpoint and status.",
	  ORC_LABELS("endpoint", "status"), NULL, 0, 32 },
	{ &auth_seconds, ORC_METRIC_HISTOGRAM, "orchard_api_auth_duration_seconds",
	  "Time to answer nginx's key-check subrequests, by endpoint.",
	  ORC_LABELS("endpoint"), request_bounds, NB(request_bounds), 2 },
	{ &exec_seconds, ORC_METRIC_HISTOGRAM, "orchard_api_exec_duration_seconds",
	  "Run time of exec jobs run by this process (the agent call), by final state.",
	  ORC_LABELS("state"), exec_bounds, NB(exec_bounds), 4 },
	{ &pool_size, ORC_METRIC_GAUGE, "orchard_api_db_pool_size",
	  "Database connections the pool may open (ORCHARD_DB_POOL).", NULL, NULL, 0, 1 },
	{ &pool_open, ORC_METRIC_GAUGE, "orchard_api_db_pool_open",
	  "Database connections open (idle and in use).", NULL, NULL, 0, 1 },
	{ &pool_in_use, ORC_METRIC_GAUGE, "orchard_api_db_pool_in_use",
	  "Database connections lent out right now.", NULL, NULL, 0, 1 },
	{ &pool_waits, ORC_METRIC_COUNTER, "orchard_api_db_pool_waits_total",
	  "Pool acquisitions that found no free connection and had to wait.", NULL, NULL, 0, 1 },
	{ &pool_timeouts, ORC_METRIC_COUNTER, "orchard_api_db_pool_timeouts_total",
	  "Pool acquisitions that waited 10 s in vain (answered 503).", NULL, NULL, 0, 1 },
	{ &stmt_prepares, ORC_METRIC_COUNTER, "orchard_api_db_statements_prepared_total",
	  "Statements prepared on this process's connections (once per text and connection; "
	  "0 with ORCHARD_PG_PREPARE=0).", NULL, NULL, 0, 1 },
	{ &stmt_execs, ORC_METRIC_COUNTER, "orchard_api_db_prepared_executions_total",
	  "Executions of prepared statements (the rest ran unnamed, parsed and planned each time).",
	  NULL, NULL, 0, 1 },
	{ &connections, ORC_METRIC_COUNTER, "orchard_api_connections_accepted_total",
	  "FastCGI connections accepted, by socket (request, auth). nginx keeps the request "
	  "socket's connections for many requests; every auth subrequest opens one.",
	  ORC_LABELS("socket"), NULL, 0, 2 },
	{ &key_verifications, ORC_METRIC_COUNTER, "orchard_api_key_verifications_total",
	  "argon2id checks of API key secrets (cache misses), an unknown key id's included: "
	  "it is checked against a dummy hash so that timing does not tell it apart.",
	  NULL, NULL, 0, 1 },
	{ &sandboxes, ORC_METRIC_GAUGE, "orchard_sandboxes",
	  "Sandboxes of all tenants by state (every state but deleted), read from the database.",
	  ORC_LABELS("state"), NULL, 0, 8 },
	{ &jobs, ORC_METRIC_GAUGE, "orchard_jobs",
	  "Open jobs of all tenants by state (queued, running), read from the database.",
	  ORC_LABELS("state"), NULL, 0, 8 },
};

int api_metrics_init(void)
{
	int err;

	if ((err = orc_metrics_register(&reg, families, NB(families))) < 0)
		return err;
	return orc_metrics_process_register(&reg, "api");
}

/* Methods from a fixed set, so a client cannot add series. */
static const char *method_label(const char *m)
{
	static const char *const known[] = { "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS" };
	size_t i;

	for (i = 0; m && i < NB(known); i++)
		if (!strcmp(m, known[i]))
			return known[i];
	return "other";
}

/* nginx's key checks, which are not requests of a client of their own. */
static const char *auth_endpoint(const struct api_req *r)
{
	if (!r->route && r->path && (!strcmp(r->path, "/_auth") || !strcmp(r->path, "/_auth_agent")))
		return r->path;
	return NULL;
}

void api_metrics_request(const struct api_req *r, int64_t ms)
{
	const char *endpoint = auth_endpoint(r);
	char status[8];
	const char *v[3];

	snprintf(status, sizeof(status), "%d", r->status >= 100 && r->status <= 599 ? r->status : 0);
	if (endpoint) {
		orc_metric_inc(auth_requests, ORC_LABELS(endpoint, status));
		orc_metric_observe(auth_seconds, ORC_LABELS(endpoint), (double)ms / 1000);
		return;
	}
	v[0] = r->route ? r->route : "unmatched";
	v[1] = method_label(r->method);
	v[2] = status;
	orc_metric_inc(requests, v);
	v[2] = NULL;
	orc_metric_observe(request_seconds, v, (double)ms / 1000);
}

void api_metrics_connection(int auth_only)
{
	const char *v[1] = { auth_only ? "auth" : "request" };

	orc_metric_inc(connections, v);
}

void api_metrics_key_verification(void)
{
	orc_metric_inc(key_verifications, NULL);
}

void api_metrics_exec(const char *status, int64_t ms)
{
	orc_metric_observe(exec_seconds, ORC_LABELS(strcmp(status, "succeeded") ? "failed" : "succeeded"),
			   (double)ms / 1000);
}

static void refresh_pool(void)
{
	struct orc_pg_pool_stats st;
	unsigned long long prepared, executed;

	orc_pg_pool_stats(&st, &api_server.db);
	orc_metric_set(pool_size, NULL, st.size);
	orc_metric_set(pool_open, NULL, st.open);
	orc_metric_set(pool_in_use, NULL, st.open - st.idle);
	orc_metric_set(pool_waits, NULL, (double)st.waits);
	orc_metric_set(pool_timeouts, NULL, (double)st.timeouts);
	orc_pg_stmt_stats(&prepared, &executed);
	orc_metric_set(stmt_prepares, NULL, (double)prepared);
	orc_metric_set(stmt_execs, NULL, (double)executed);
}

/* Sandboxes and open jobs from the database; absent when it cannot say. */
static void refresh_db(void)
{
	PGresult *res = NULL;
	PGconn *db = NULL;
	double n;
	size_t i;
	int row, err;

	orc_metric_clear(sandboxes);
	orc_metric_clear(jobs);
	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		goto done;
	err = orc_pg_query(&res, db,
		"SELECT 's', state, count(*) FROM sandboxes WHERE state <> 'deleted' GROUP BY state"
		" UNION ALL"
		" SELECT 'j', status, count(*) FROM jobs WHERE status IN ('queued', 'running')"
		" GROUP BY status", 0, NULL);
	orc_pg_pool_release(&api_server.db, db);
	if (err < 0)
		goto done;
	for (i = 0; i < NB(live_states); i++)
		orc_metric_set(sandboxes, ORC_LABELS(live_states[i]), 0);
	for (i = 0; i < NB(open_states); i++)
		orc_metric_set(jobs, ORC_LABELS(open_states[i]), 0);
	for (row = 0; row < PQntuples(res); row++) {
		if (orc_parse_double(&n, PQgetvalue(res, row, 2), 0, 1e15) < 0)
			continue;
		orc_metric_set(PQgetvalue(res, row, 0)[0] == 's' ? sandboxes : jobs,
			       ORC_LABELS(PQgetvalue(res, row, 1)), n);
	}
done:
	if (err < 0)
		orc_log(ORC_LOG_WARN, "metrics: cannot count sandboxes and jobs", "error",
			orc_err_name(err), NULL);
	PQclear(res);
}

int api_metrics_get(struct api_req *r)
{
	struct orc_buf body, head = ORC_BUF_INIT;
	int err;

	orc_buf_init(&body, METRICS_MAX);
	pthread_mutex_lock(&scrape_lock);
	orc_metrics_process_refresh();
	refresh_pool();
	refresh_db();
	err = orc_metrics_render(&body, &reg);
	pthread_mutex_unlock(&scrape_lock);
	if (err < 0) {
		api_reply_error(r, ORC_ERROR, "the metrics text is larger than %u bytes", METRICS_MAX);
		goto done;
	}
	orc_buf_addf(&head, "Status: 200 OK\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
		     "Cache-Control: no-store\r\n\r\n", ORC_METRICS_CONTENT_TYPE, body.len);
	r->replied = 1;
	r->status = 200;
	FCGX_PutStr(head.ptr, (int)head.len, r->fcgi->out);
	if (strcmp(r->method, "HEAD") && body.len)
		FCGX_PutStr(body.ptr, (int)body.len, r->fcgi->out);
done:
	orc_buf_release(&head);
	orc_buf_release(&body);
	return err;
}
