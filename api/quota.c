/*
 * Tenant quotas, checked when sandboxes are created (sandbox_create.c,
 * batch_create.c), for all the request's sandboxes together:
 *
 *   tenants.max_sandboxes           live sandboxes (pending or ready) at once
 *   tenants.max_cpu_millis          cpu of one sandbox
 *   tenants.max_memory_bytes        memory of one sandbox
 *   tenants.max_total_cpu_millis    cpu of the live sandboxes together
 *   tenants.max_total_memory_bytes  memory of the live sandboxes together
 *   tenants.max_queued              sandboxes not yet admitted (a new one
 *                                   counts until the controller admits it)
 *   tenants.max_creates_per_minute  sandboxes created in the last 60 s
 *
 * NULL means unlimited. The check runs inside the creating transaction and
 * first locks the tenant's row, so two concurrent creates cannot both take
 * the last slot: the second one counts after the first has committed (READ
 * COMMITTED takes a new snapshot per statement). FOR NO KEY UPDATE does not
 * block the foreign-key checks of inserts that reference the tenant.
 *
 * A refusal is 429 quota_exceeded whose detail names the quota and the
 * numbers, with Retry-After: when the oldest creates of the window age out
 * for max_creates_per_minute, QUOTA_RETRY_S for the others.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "api.h"
#include "err.h"

#define QUOTA_RETRY_S 5
#define RATE_WINDOW_S 60

enum {
	Q_NAME, Q_MAX_SB, Q_MAX_CPU, Q_MAX_MEM, Q_MAX_TOTAL_CPU, Q_MAX_TOTAL_MEM, Q_MAX_QUEUED,
	Q_MAX_RATE, Q_LIVE, Q_CPU, Q_MEM, Q_QUEUED, Q_RECENT,
};

/* Lock the tenant's row first, in a statement of its own: the usage is
 * then read with a snapshot taken after the lock (one statement would
 * count with the snapshot from before its wait for the lock). */
static const char lock_sql[] = "SELECT 1 FROM tenants WHERE id = $1 FOR NO KEY UPDATE";

/* The tenant's quotas and, when any tenant-wide one is set, its usage. */
static const char quota_sql[] =
	"WITH t AS (SELECT id, name, max_sandboxes, max_cpu_millis, max_memory_bytes,"
	" max_total_cpu_millis, max_total_memory_bytes, max_queued, max_creates_per_minute"
	" FROM tenants WHERE id = $1),"
	" u AS (SELECT count(*) FILTER (WHERE s.state IN ('pending', 'ready')) AS live,"
	" coalesce(sum(s.cpu_millis) FILTER (WHERE s.state IN ('pending', 'ready')), 0) AS cpu,"
	" coalesce(sum(s.memory_bytes) FILTER (WHERE s.state IN ('pending', 'ready')), 0) AS mem,"
	" count(*) FILTER (WHERE s.state = 'pending' AND s.admitted_at IS NULL) AS queued"
	" FROM sandboxes s, t WHERE s.tenant_id = t.id AND s.state NOT IN ('deleted', 'failed')"
	" AND num_nonnulls(t.max_sandboxes, t.max_total_cpu_millis, t.max_total_memory_bytes,"
	" t.max_queued) > 0),"
	" w AS (SELECT count(*) AS recent FROM sandboxes s, t WHERE s.tenant_id = t.id"
	" AND t.max_creates_per_minute IS NOT NULL AND s.created_at > now() - interval '60 seconds')"
	" SELECT t.name, t.max_sandboxes, t.max_cpu_millis, t.max_memory_bytes, t.max_total_cpu_millis,"
	" t.max_total_memory_bytes, t.max_queued, t.max_creates_per_minute, u.live, u.cpu, u.mem,"
	" u.queued, w.recent FROM t, u, w";

static long long col(PGresult *res, int c)
{
	return strtoll(PQgetvalue(res, 0, c), NULL, 10);
}

/* Seconds until `excess` creates of the window have aged out of it. */
static int rate_retry(long *out, PGconn *db, const char *tenant, long long excess)
{
	char off[24];
	const char *params[2] = { tenant, off };
	PGresult *res = NULL;
	int err;

	snprintf(off, sizeof(off), "%lld", excess - 1);
	if ((err = orc_pg_query(&res, db, "SELECT extract(epoch FROM created_at + interval '60 seconds'"
				" - now()) FROM sandboxes WHERE tenant_id = $1::bigint"
				" AND created_at > now() - interval '60 seconds'"
				" ORDER BY created_at OFFSET $2::bigint LIMIT 1", 2, params)) < 0)
		return err;
	*out = RATE_WINDOW_S;
	if (PQntuples(res) == 1)
		*out = (long)ceil(strtod(PQgetvalue(res, 0, 0), NULL));
	if (*out < 1)
		*out = 1;
	PQclear(res);
	return 0;
}

/* A tenant-wide quota: max of column qcol against used + asked. */
static int check_total(struct api_req *r, PGresult *res, int qcol, const char *quota,
		       long long used, long long asked, const char *what)
{
	long long max;

	if (PQgetisnull(res, 0, qcol))
		return 0;
	max = col(res, qcol);
	if (used + asked <= max)
		return 0;
	return api_fail(r, ORC_EQUOTA, "quota exceeded: %s of tenant \"%s\" is %lld and it has "
			"%lld %s; this request asks for %lld more", quota,
			PQgetvalue(res, 0, Q_NAME), max, used, what, asked);
}

/* A per-sandbox quota. */
static int check_each(struct api_req *r, PGresult *res, int qcol, const char *quota,
		      long long asked)
{
	if (PQgetisnull(res, 0, qcol) || asked <= col(res, qcol))
		return 0;
	return api_fail(r, ORC_EQUOTA, "quota exceeded: %s of tenant \"%s\" is %lld per sandbox; "
			"this sandbox asks for %lld", quota, PQgetvalue(res, 0, Q_NAME),
			col(res, qcol), asked);
}

int api_quota_check(long *retry_out, PGconn *db, struct api_req *r, int n, int64_t cpu_millis,
		    int64_t memory_bytes)
{
	char tenant[24];
	const char *params[1] = { tenant };
	PGresult *res = NULL;
	int err;

	*retry_out = QUOTA_RETRY_S;
	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	if ((err = orc_pg_query(NULL, db, lock_sql, 1, params)) < 0 ||
	    (err = orc_pg_query_one(&res, db, quota_sql, 1, params)) < 0)
		return err;
	if ((err = check_each(r, res, Q_MAX_CPU, "max_cpu_millis", cpu_millis)) < 0 ||
	    (err = check_each(r, res, Q_MAX_MEM, "max_memory_bytes", memory_bytes)) < 0 ||
	    (err = check_total(r, res, Q_MAX_SB, "max_sandboxes", col(res, Q_LIVE), n,
			       "live sandboxes (pending or ready)")) < 0 ||
	    (err = check_total(r, res, Q_MAX_TOTAL_CPU, "max_total_cpu_millis", col(res, Q_CPU),
			       (long long)n * cpu_millis, "millicores in live sandboxes")) < 0 ||
	    (err = check_total(r, res, Q_MAX_TOTAL_MEM, "max_total_memory_bytes",
			       col(res, Q_MEM), (long long)n * memory_bytes,
			       "bytes of memory in live sandboxes")) < 0 ||
	    (err = check_total(r, res, Q_MAX_QUEUED, "max_queued", col(res, Q_QUEUED), n,
			       "sandboxes queued for capacity")) < 0)
		goto done;
	if ((err = check_total(r, res, Q_MAX_RATE, "max_creates_per_minute", col(res, Q_RECENT),
			       n, "sandboxes created in the last 60 seconds")) < 0) {
		long long excess = col(res, Q_RECENT) + n - col(res, Q_MAX_RATE);
		if (n > col(res, Q_MAX_RATE))
			*retry_out = RATE_WINDOW_S;   /* never fits: say so, and no sooner */
		else if (rate_retry(retry_out, db, tenant, excess) < 0)
			*retry_out = RATE_WINDOW_S;
	}
done:
	PQclear(res);
	return err;
}

int api_reply_quota(struct api_req *r, long retry_s)
{
	char hdr[48];

	snprintf(hdr, sizeof(hdr), "Retry-After: %ld\r\n", retry_s);
	return api_reply_error_h(r, ORC_EQUOTA, hdr, "%s", r->error);
}
