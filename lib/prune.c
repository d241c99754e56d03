/*
 * Retention (prune.h): events, then jobs, then rows of sandboxes deleted
 * more than N days ago; Idempotency-Key bodies older than H hours; the
 * output pieces of ended jobs, into their rows. A batch per transaction.
 */
#include "prune.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "err.h"
#include "log.h"
#include "pgpool.h"
#include "strutil.h"

/* Every batch gives up rather than queue behind a lock (a migration's,
 * say); the next run carries on. */
#define PRUNE_LOCK_TIMEOUT "SET LOCAL lock_timeout = '2s'"
#define PRUNE_STATEMENT_TIMEOUT "SET LOCAL statement_timeout = '60s'"

/* $1: the cutoff (timestamptz); the sandboxes whose leftovers go. */
#define OLD_SANDBOX "s.state = 'deleted' AND s.deleted_at < $1::timestamptz"

/* The cutoffs of one run (cutoff_get), each a timestamptz. */
enum { CUT_SANDBOXES, CUT_KEYS, CUT_OUTPUT, CUT_N };

/* One phase of the prune: a batch DELETE and the counter it adds to. */
struct prune_step {
	const char *what;
	const char *sql;                       /* $1 cutoff, $2 batch; returns rows deleted */
	size_t counter;                        /* offset of its count in the result */
	int cutoff;                            /* CUT_* */
};

/*
 * The batch is picked in a MATERIALIZED CTE: as a plain IN (SELECT ...
 * LIMIT n FOR UPDATE SKIP LOCKED) sub-plan, PostgreSQL may run the
 * sub-select again for each outer row, each time skipping the rows this
 * statement already deleted, and so delete far more than n rows at once.
 */
#define BATCH_DELETE(table, pick, lock) \
	"WITH batch AS MATERIALIZED (" pick " LIMIT $2::int " lock ")" \
	" DELETE FROM " table " WHERE id IN (SELECT id FROM batch)"

static const struct prune_step steps[] = {
	{ "events",
	  BATCH_DELETE("events", "SELECT e.id FROM sandboxes s JOIN events e ON e.sandbox_id = s.id"
		       " WHERE " OLD_SANDBOX, "FOR UPDATE OF e SKIP LOCKED"),
	  offsetof(struct orc_prune_result, events), CUT_SANDBOXES },
	{ "jobs",
	  BATCH_DELETE("jobs", "SELECT j.id FROM sandboxes s JOIN jobs j ON j.sandbox_id = s.id"
		       " WHERE " OLD_SANDBOX, "FOR UPDATE OF j SKIP LOCKED"),
	  offsetof(struct orc_prune_result, jobs), CUT_SANDBOXES },
	/* Only rows with nothing left that points at them. */
	{ "sandboxes",
	  BATCH_DELETE("sandboxes", "SELECT s.id FROM sandboxes s WHERE " OLD_SANDBOX
		       " AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.sandbox_id = s.id)"
		       " AND NOT EXISTS (SELECT 1 FROM events e WHERE e.sandbox_id = s.id)",
		       "FOR UPDATE OF s SKIP LOCKED"),
	  offsetof(struct orc_prune_result, sandboxes), CUT_SANDBOXES },
	/* Idempotency-Key bodies (027_api_ux.sql) older than the key
	 * retention: a later reuse of the key is no longer checked against
	 * the first body. A retry still finds its job or sandbox by the key
	 * (jobs.idempotency_key, sandboxes.idempotency_key), so nothing runs
	 * twice. */
	{ "idempotency_keys",
	  "WITH batch AS MATERIALIZED (SELECT tenant_id, scope, key FROM idempotency_keys"
	  " WHERE created_at < $1::timestamptz LIMIT $2::int FOR UPDATE SKIP LOCKED)"
	  " DELETE FROM idempotency_keys k USING batch b"
	  " WHERE k.tenant_id = b.tenant_id AND k.scope = b.scope AND k.key = b.key",
	  offsetof(struct orc_prune_result, idempotency_keys), CUT_KEYS },
	/* The output pieces (027_api_ux.sql) of jobs that ended without their
	 * runner storing the result (it died: the lease reaper failed the
	 * job): moved into the job row, in offset order, unless the row has
	 * output of its own, then deleted. Readers get the same bytes from the
	 * row (job_output.c). A batch is up to $2 jobs. */
	{ "job_output",
	  "WITH batch AS MATERIALIZED (SELECT j.id FROM jobs j"
	  " WHERE j.id IN (SELECT o.job_id FROM job_output o) AND j.status IN ('succeeded', 'failed')"
	  " AND j.completed_at < $1::timestamptz LIMIT $2::int FOR UPDATE OF j SKIP LOCKED),"
	  " a AS (SELECT o.job_id,"
	  " string_agg(o.data, ''::bytea ORDER BY o.off) FILTER (WHERE o.stream = 'stdout') AS out,"
	  " string_agg(o.data, ''::bytea ORDER BY o.off) FILTER (WHERE o.stream = 'stderr') AS err"
	  " FROM job_output o JOIN batch b ON b.id = o.job_id GROUP BY o.job_id),"
	  " u AS (UPDATE jobs j SET"
	  " stdout = CASE WHEN coalesce(octet_length(j.stdout), 0) = 0 THEN coalesce(a.out, j.stdout)"
	  " ELSE j.stdout END,"
	  " stdout_bytes = CASE WHEN coalesce(octet_length(j.stdout), 0) = 0 AND a.out IS NOT NULL"
	  " THEN GREATEST(coalesce(j.stdout_bytes, 0), octet_length(a.out)) ELSE j.stdout_bytes END,"
	  " stderr = CASE WHEN coalesce(octet_length(j.stderr), 0) = 0 THEN coalesce(a.err, j.stderr)"
	  " ELSE j.stderr END,"
	  " stderr_bytes = CASE WHEN coalesce(octet_length(j.stderr), 0) = 0 AND a.err IS NOT NULL"
	  " THEN GREATEST(coalesce(j.stderr_bytes, 0), octet_length(a.err)) ELSE j.stderr_bytes END"
	  " FROM a WHERE j.id = a.job_id)"
	  " DELETE FROM job_output o USING batch b WHERE o.job_id = b.id",
	  offsetof(struct orc_prune_result, job_output), CUT_OUTPUT },
};

static const char count_sql[] =
	"SELECT (SELECT count(*) FROM sandboxes s WHERE " OLD_SANDBOX "),"
	" (SELECT count(*) FROM sandboxes s JOIN jobs j ON j.sandbox_id = s.id WHERE " OLD_SANDBOX "),"
	" (SELECT count(*) FROM sandboxes s JOIN events e ON e.sandbox_id = s.id WHERE " OLD_SANDBOX "),"
	" (SELECT count(*) FROM idempotency_keys WHERE created_at < $2::timestamptz),"
	" (SELECT count(*) FROM job_output o JOIN jobs j ON j.id = o.job_id"
	" WHERE j.status IN ('succeeded', 'failed') AND j.completed_at < $3::timestamptz)";

static int env_int(int *out, const char *name, int64_t min, int64_t max)
{
	const char *s = getenv(name);
	int64_t v;
	char range[64];

	if (!s || !*s)
		return 0;
	if (orc_parse_i64(&v, s, min, max) < 0) {
		snprintf(range, sizeof(range), "%" PRId64 "..%" PRId64, min, max);
		orc_log(ORC_LOG_ERROR, "invalid retention setting", "variable", name, "value", s,
			"expected", range, NULL);
		return ORC_EINVALID;
	}
	*out = (int)v;
	return 0;
}

int orc_prune_opts_from_env(struct orc_prune_opts *out)
{
	int days = ORC_PRUNE_DEFAULT_DAYS, batch = ORC_PRUNE_DEFAULT_BATCH;
	int key_hours = ORC_PRUNE_DEFAULT_KEY_HOURS, err;

	if ((err = env_int(&days, "ORCHARD_RETENTION_DAYS", 1, ORC_PRUNE_MAX_DAYS)) < 0 ||
	    (err = env_int(&batch, "ORCHARD_RETENTION_BATCH", 1, ORC_PRUNE_MAX_BATCH)) < 0 ||
	    (err = env_int(&key_hours, "ORCHARD_IDEMPOTENCY_RETENTION_HOURS", 1,
			   ORC_PRUNE_MAX_KEY_HOURS)) < 0)
		return err;
	out->days = days;
	out->batch = batch;
	out->key_hours = key_hours;
	return 0;
}

/* The cutoffs, fixed once so that one run works on one set of rows. */
static int cutoff_get(char out[CUT_N][64], PGconn *db, const struct orc_prune_opts *o)
{
	char d[16], h[16];
	const char *params[2] = { d, h };
	PGresult *res = NULL;
	int err, i;

	snprintf(d, sizeof(d), "%d", o->days);
	snprintf(h, sizeof(h), "%d", o->key_hours);
	if ((err = orc_pg_query(&res, db, "SELECT now() - make_interval(days => $1::int),"
				" now() - make_interval(hours => $2::int),"
				" now() - make_interval(mins => " ORC_PRUNE_OUTPUT_GRACE_MIN ")", 2, params)) < 0)
		return err;
	for (i = 0; i < CUT_N; i++)
		snprintf(out[i], 64, "%s", PQgetvalue(res, 0, i));
	PQclear(res);
	return 0;
}

static int count_old(struct orc_prune_result *r, PGconn *db, char cutoff[CUT_N][64])
{
	const char *params[3] = { cutoff[CUT_SANDBOXES], cutoff[CUT_KEYS], cutoff[CUT_OUTPUT] };
	PGresult *res = NULL;
	int err;

	if ((err = orc_pg_query(&res, db, count_sql, 3, params)) < 0)
		return err;
	r->sandboxes = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	r->jobs = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
	r->events = strtoll(PQgetvalue(res, 0, 2), NULL, 10);
	r->idempotency_keys = strtoll(PQgetvalue(res, 0, 3), NULL, 10);
	r->job_output = strtoll(PQgetvalue(res, 0, 4), NULL, 10);
	PQclear(res);
	return 0;
}

/* One batch in its own transaction; *deleted gets the rows removed. */
static int batch_run(int64_t *deleted, PGconn *db, const struct prune_step *st, const char *cutoff,
		     const char *batch)
{
	const char *params[2] = { cutoff, batch };
	PGresult *res = NULL;
	int err;

	if ((err = orc_pg_begin(db)) < 0)
		return err;
	if ((err = orc_pg_query(NULL, db, PRUNE_LOCK_TIMEOUT, 0, NULL)) < 0 ||
	    (err = orc_pg_query(NULL, db, PRUNE_STATEMENT_TIMEOUT, 0, NULL)) < 0 ||
	    (err = orc_pg_query(&res, db, st->sql, 2, params)) < 0)
		goto fail;
	if ((err = orc_pg_commit(db)) < 0)
		goto fail;
	*deleted = strtoll(PQcmdTuples(res), NULL, 10);
	PQclear(res);
	return 0;
fail:
	PQclear(res);
	orc_pg_rollback(db);
	return err;
}

int orc_prune(struct orc_prune_result *out, PGconn *db, const struct orc_prune_opts *o)
{
	struct orc_prune_result r = { 0 };
	char cutoff[CUT_N][64], batch[16];
	int64_t n, *counter;
	size_t i;
	int err;

	if (o->days < 1 || o->days > ORC_PRUNE_MAX_DAYS || o->batch < 1 || o->batch > ORC_PRUNE_MAX_BATCH ||
	    o->max_batches < 0)
		return ORC_EINVALID;
	if (o->key_hours < 1 || o->key_hours > ORC_PRUNE_MAX_KEY_HOURS)
		return ORC_EINVALID;
	if ((err = cutoff_get(cutoff, db, o)) < 0)
		goto done;
	if (o->dry_run) {
		err = count_old(&r, db, cutoff);
		goto done;
	}
	snprintf(batch, sizeof(batch), "%d", o->batch);
	for (i = 0; i < sizeof(steps) / sizeof(*steps); i++) {
		counter = (int64_t *)((char *)&r + steps[i].counter);
		do {
			if (o->max_batches && r.batches >= o->max_batches) {
				r.more = 1;
				goto done;
			}
			if ((err = batch_run(&n, db, &steps[i], cutoff[steps[i].cutoff], batch)) < 0)
				goto done;
			if (n > 0) {
				*counter += n;
				r.batches++;
				orc_log(ORC_LOG_DEBUG, "retention batch", "table", steps[i].what,
					ORC_LOG_INT("rows", n), NULL);
			}
		} while (n >= o->batch);   /* job_output: a batch of jobs, n pieces */
	}
done:
	if (err < 0) {
		orc_log(ORC_LOG_ERROR, "retention pruning failed", "error", orc_err_name(err),
			ORC_LOG_INT("sandboxes_pruned", r.sandboxes), ORC_LOG_INT("jobs_pruned", r.jobs),
			ORC_LOG_INT("events_pruned", r.events),
			ORC_LOG_INT("idempotency_keys_pruned", r.idempotency_keys),
			ORC_LOG_INT("job_output_moved", r.job_output), NULL);
		return err;
	}
	*out = r;
	return 0;
}
