/*
 * Backpressure on exec (sql/migrations/033_exec_backpressure.sql): limits
 * on the execs of a tenant running at once, per sandbox and in all its
 * sandboxes, and bounds on those waiting for a slot.
 *
 *   max_execs_per_sandbox         running at once in one sandbox
 *   max_execs                     running at once in all the tenant's sandboxes
 *   max_queued_execs_per_sandbox  waiting for a slot in one sandbox
 *   max_queued_execs              waiting for a slot in all of them
 *
 * A tenant's column set to NULL takes the server default
 * (ORCHARD_EXEC_MAX_PER_SANDBOX, ORCHARD_EXEC_MAX_PER_TENANT,
 * ORCHARD_EXEC_QUEUE_PER_SANDBOX, ORCHARD_EXEC_QUEUE_PER_TENANT), which is
 * no limit when unset. A tenant none applies to pays nothing: its execs are
 * accepted and claimed as before, one statement each (exec.c, job_run.c).
 *
 * Under a limit, accepting a job and claiming one both run in a
 * transaction that first takes the tenant's exec lock (an advisory lock),
 * so the counts read by the next statement are exact: two claims can never
 * both take the last slot, nor two accepts the last queue place. A job is
 * accepted to run at once only when a slot is free and nothing of the
 * tenant waits ahead of it; otherwise it is queued (status "queued", in the
 * database: it survives any api process) unless a queue bound is reached,
 * which is a 429 that writes nothing. A queued job is claimed, in
 * submission order (jobs.queue_order), once a slot is free and no job
 * accepted before it waits in its sandbox or in a sandbox of the tenant
 * that has a free slot itself: no job is passed over for ever by later
 * ones. Serial jobs (019) keep their own order on top.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "err.h"
#include "log.h"
#include "strutil.h"

#define LOCK_CLASS 2203     /* pg_advisory_xact_lock(LOCK_CLASS, tenant id) */
#define EXEC_RETRY_S 1      /* Retry-After of a full queue: a slot frees often */

static struct {
	char value[4][24];      /* "" = no default */
} D;

static const struct {
	const char *env, *column;
	int min;
} knobs[] = {
	{ "ORCHARD_EXEC_MAX_PER_SANDBOX", "max_execs_per_sandbox", 1 },
	{ "ORCHARD_EXEC_MAX_PER_TENANT", "max_execs", 1 },
	{ "ORCHARD_EXEC_QUEUE_PER_SANDBOX", "max_queued_execs_per_sandbox", 0 },
	{ "ORCHARD_EXEC_QUEUE_PER_TENANT", "max_queued_execs", 0 },
};

int api_exec_limit_init(void)
{
	const char *v;
	int64_t n;
	size_t i;

	for (i = 0; i < 4; i++) {
		D.value[i][0] = '\0';
		if (!(v = getenv(knobs[i].env)) || !*v)
			continue;
		if (orc_parse_i64(&n, v, knobs[i].min, 1000000) < 0) {
			orc_log(ORC_LOG_ERROR, "invalid exec limit", "name", knobs[i].env, "value", v, NULL);
			return ORC_EINVALID;
		}
		snprintf(D.value[i], sizeof(D.value[i]), "%lld", (long long)n);
	}
	return 0;
}

void api_exec_limit_params(const char *params[4])
{
	size_t i;

	for (i = 0; i < 4; i++)
		params[i] = D.value[i][0] ? D.value[i] : NULL;
}

int api_exec_limit_lock(PGconn *db, int64_t tenant_id)
{
	char tenant[24], cls[24];
	const char *params[2] = { cls, tenant };
	int err;

	snprintf(cls, sizeof(cls), "%d", LOCK_CLASS);
	snprintf(tenant, sizeof(tenant), "%lld", (long long)tenant_id);
	if ((err = orc_pg_begin(db)) < 0)
		return err;
	if ((err = orc_pg_query(NULL, db, "SELECT pg_advisory_xact_lock($1::int, $2::int)", 2,
				params)) < 0)
		orc_pg_rollback(db);
	return err;
}

int api_exec_limit_lock_job(PGconn *db, const char *job_id)
{
	char cls[24];
	const char *params[2] = { cls, job_id };
	int err;

	snprintf(cls, sizeof(cls), "%d", LOCK_CLASS);
	if ((err = orc_pg_begin(db)) < 0)
		return err;
	if ((err = orc_pg_query(NULL, db, "SELECT pg_advisory_xact_lock($1::int, tenant_id::int)"
				" FROM jobs WHERE id = $2", 2, params)) < 0)
		orc_pg_rollback(db);
	return err;
}

enum { A_NAME, A_SB, A_TN, A_QSB, A_QTN, A_RUN_SB, A_RUN_TN, A_Q_SB, A_Q_TN, A_AHEAD };

/* $1 tenant, $2-$5 the defaults, $6 the sandbox. */
static const char admit_sql[] =
	"WITH lim AS (" API_EXEC_LIMIT_SQL("$1::bigint", "$2", "$3", "$4", "$5") "),"
	" o AS (SELECT j.sandbox_id, j.status, j.serial FROM jobs j WHERE j.tenant_id = $1::bigint"
	" AND j.status IN ('queued', 'running'))"
	" SELECT lim.name, lim.sb, lim.tn, lim.qsb, lim.qtn,"
	" (SELECT count(*) FROM o WHERE status = 'running' AND sandbox_id = $6),"
	" (SELECT count(*) FROM o WHERE status = 'running'),"
	" (SELECT count(*) FROM o WHERE status = 'queued' AND sandbox_id = $6),"
	" (SELECT count(*) FROM o WHERE status = 'queued'),"
	" EXISTS (SELECT 1 FROM o JOIN sandboxes s ON s.id = o.sandbox_id WHERE o.status = 'queued'"
	" AND NOT o.serial AND (o.sandbox_id = $6 OR (" API_EXEC_SLOT_FREE_SQL("s") ")))"
	" FROM lim";

static long long num(PGresult *res, int c)
{
	return strtoll(PQgetvalue(res, 0, c), NULL, 10);
}

/* Limit in column c is set and used has reached it. */
static int reached(PGresult *res, int c, long long used)
{
	return !PQgetisnull(res, 0, c) && used >= num(res, c);
}

int api_exec_limit_admit(int *run_now_out, PGconn *db, struct api_req *r)
{
	const char *sandbox_id = r->id;
	char tenant[24];
	const char *params[6];
	PGresult *res = NULL;
	int err = 0, run_now;

	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	params[0] = tenant;
	api_exec_limit_params(params + 1);
	params[5] = sandbox_id;
	if ((err = orc_pg_query_one(&res, db, admit_sql, 6, params)) < 0)
		return err;
	run_now = !reached(res, A_SB, num(res, A_RUN_SB)) && !reached(res, A_TN, num(res, A_RUN_TN)) &&
		PQgetvalue(res, 0, A_AHEAD)[0] != 't';
	if (!run_now && reached(res, A_QSB, num(res, A_Q_SB))) {
		err = api_fail(r, ORC_EQUOTA, "exec queue full: max_queued_execs_per_sandbox of "
			       "tenant \"%s\" is %lld and sandbox %s has %lld execs queued "
			       "(max_execs_per_sandbox: %s running at once)",
			       PQgetvalue(res, 0, A_NAME), num(res, A_QSB), sandbox_id, num(res, A_Q_SB),
			       PQgetisnull(res, 0, A_SB) ? "no limit" : PQgetvalue(res, 0, A_SB));
	} else if (!run_now && reached(res, A_QTN, num(res, A_Q_TN))) {
		err = api_fail(r, ORC_EQUOTA, "exec queue full: max_queued_execs of tenant \"%s\" is "
			       "%lld and it has %lld execs queued (max_execs: %s running at once)",
			       PQgetvalue(res, 0, A_NAME), num(res, A_QTN), num(res, A_Q_TN),
			       PQgetisnull(res, 0, A_TN) ? "no limit" : PQgetvalue(res, 0, A_TN));
	} else {
		*run_now_out = run_now;
	}
	PQclear(res);
	return err;
}

int api_reply_exec_limit(struct api_req *r)
{
	return api_reply_quota(r, EXEC_RETRY_S);
}
