/*
 * Runner leases: no accepted job is lost or stuck when an api process dies.
 *
 * Every job row names the api process that owns it (jobs.runner, our
 * "hostname:pid:starttime") and holds a lease (jobs.lease_until) that the
 * owner keeps in the future while the job is queued or running. One thread
 * per process renews the leases of all its open jobs in one statement every
 * LEASE_RENEW_S seconds, and (at startup and every LEASE_REAP_S seconds)
 * fails the open jobs of any runner whose lease has expired: that runner
 * died, and the command may or may not have run, so the job is never run
 * again (DESIGN.md §6.3) but marked failed with RUNNER_DIED_ERROR. Like
 * every end of a job, that notifies orchard_lane (007_job_order.sql), so
 * the next job of the sandbox, waiting on a live replica, starts at once.
 *
 * A job accepted under exec limits that is still queued (jobs.queue_order,
 * sql/migrations/033_exec_backpressure.sql) is adopted instead: it never
 * started, and its client was told it is queued, so the reaping process
 * takes it over (runner and lease, in one statement: one replica wins) and
 * queues it in its own lanes, where it runs once in its turn.
 *
 * A job that is reaped while its runner was in fact only slow (the database
 * unreachable for longer than the lease) stays failed: the runner's result
 * is stored only over a 'running' row (job_run.c).
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "api.h"
#include "err.h"
#include "log.h"
#include "strutil.h"

#define RUNNER_DIED_ERROR "runner died: job was not completed"

static void renew(PGconn *db)
{
	char lease[24];
	const char *params[2] = { api_server.runner, lease };

	snprintf(lease, sizeof(lease), "%d", LEASE_S);
	if (orc_pg_query(NULL, db, "UPDATE jobs SET lease_until = now() + $2::int * interval '1 second'"
			 " WHERE runner = $1 AND status IN ('queued', 'running')", 2, params) < 0)
		orc_log(ORC_LOG_WARN, "cannot renew job leases", "runner", api_server.runner, NULL);
}

/* Take over the queued jobs under exec limits of dead runners. */
static int adopt(PGconn *db)
{
	char lease[24];
	const char *params[2] = { api_server.runner, lease };
	struct api_lane_entry *e;
	PGresult *res = NULL;
	int64_t seq;
	int err, i;

	snprintf(lease, sizeof(lease), "%d", LEASE_S);
	if ((err = orc_pg_query(&res, db, "UPDATE jobs SET runner = $1,"
				" lease_until = now() + $2::int * interval '1 second'"
				" WHERE status = 'queued' AND queue_order IS NOT NULL"
				" AND coalesce(lease_until, created_at + $2::int * interval '1 second') < now()"
				" RETURNING id, sandbox_id, seq, serial", 2, params)) < 0)
		return err;
	for (i = 0; i < PQntuples(res); i++) {
		orc_log(ORC_LOG_WARN, "queued job adopted: its runner died", "job_id",
			PQgetvalue(res, i, 0), NULL);
		if (orc_parse_i64(&seq, PQgetvalue(res, i, 2), 0, INT64_MAX) < 0)
			seq = 0;
		/* a full queue here: the lease runs out and the next reap retries */
		if (api_lane_enqueue(&e, PQgetvalue(res, i, 1), PQgetvalue(res, i, 0), seq, NULL, 0,
				     PQgetvalue(res, i, 3)[0] == 't') < 0)
			orc_log(ORC_LOG_WARN, "cannot queue the adopted job", "job_id", PQgetvalue(res, i, 0), NULL);
	}
	PQclear(res);
	return 0;
}

int api_lease_reap(PGconn *db, int *count_out)
{
	char lease[24];
	const char *params[2] = { RUNNER_DIED_ERROR, lease };
	PGresult *res = NULL;
	int err, i, n;

	if ((err = adopt(db)) < 0)
		return err;
	snprintf(lease, sizeof(lease), "%d", LEASE_S);
	/* A row without a lease (written before leases existed) counts as
	 * leased for LEASE_S from its creation. */
	err = orc_pg_query(&res, db,
		"WITH f AS (UPDATE jobs SET status = 'failed', error = $1,"
		" failure = coalesce(failure, 'infra_error'),"
		" completed_at = clock_timestamp()"
		" WHERE status IN ('queued', 'running')"
		" AND coalesce(lease_until, created_at + $2::int * interval '1 second') < now()"
		" RETURNING id, sandbox_id, tenant_id, runner),"
		" e AS (INSERT INTO events (sandbox_id, tenant_id, job_id, kind, data)"
		" SELECT f.sandbox_id, f.tenant_id, f.id, 'exec.finish',"
		" jsonb_build_object('status', 'failed', 'error', $1::text, 'runner', f.runner) FROM f)"
		" SELECT id, coalesce(runner, '') FROM f", 2, params);
	if (err < 0)
		return err;
	n = PQntuples(res);
	for (i = 0; i < n; i++)
		orc_log(ORC_LOG_WARN, "job failed: its runner died", "job_id", PQgetvalue(res, i, 0),
			"runner", PQgetvalue(res, i, 1), NULL);
	PQclear(res);
	if (count_out)
		*count_out = n;
	return 0;
}

static void *lease_main(void *arg)
{
	int64_t next_reap = 0;
	PGconn *db = NULL;

	(void)arg;
	for (;;) {
		if (orc_pg_pool_acquire(&api_server.db, &db) == 0) {
			renew(db);
			if (orc_mono_ms() >= next_reap) {
				api_lease_reap(db, NULL);
				next_reap = orc_mono_ms() + (int64_t)LEASE_REAP_S * 1000;
			}
			orc_pg_pool_release(&api_server.db, db);
			db = NULL;
		}
		sleep(LEASE_RENEW_S);
	}
	return NULL;
}

int api_lease_start(void)
{
	pthread_t t;
	int rc;

	if ((rc = pthread_create(&t, NULL, lease_main, NULL)) != 0) {
		orc_logf(ORC_LOG_ERROR, "pthread_create() for the lease thread failed: %s", strerror(rc));
		return ORC_ERROR;
	}
	pthread_detach(t);
	return 0;
}
