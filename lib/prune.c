/*
 * Retention (prune.h): events, then jobs, then rows of sandboxes deleted
 * more than N days ago, a batch per transaction.
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

/* One phase of the prune: a batch DELETE and the counter it adds to. */
struct prune_step {
	const char *what;
	const char *sql;                       /* $1 cutoff, $2 batch; returns rows deleted */
	size_t counter;                        /* offset of its count in the result */
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
	  offsetof(struct orc_prune_result, events) },
	{ "jobs",
	  BATCH_DELETE("jobs", "SELECT j.id FROM sandboxes s JOIN jobs j ON j.sandbox_id = s.id"
		       " WHERE " OLD_SANDBOX, "FOR UPDATE OF j SKIP LOCKED"),
	  offsetof(struct orc_prune_result, jobs) },
	/* Only rows with nothing left that points at them. */
	{ "sandboxes",
	  BATCH_DELETE("sandboxes", "SELECT s.id FROM sandboxes s WHERE " OLD_SANDBOX
		       " AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.sandbox_id = s.id)"
		       " AND NOT EXISTS (SELECT 1 FROM events e WHERE e.sandbox_id = s.id)",
		       "FOR UPDATE OF s SKIP LOCKED"),
	  offsetof(struct orc_prune_result, sandboxes) },
};

static const char count_sql[] =
	"SELECT (SELECT count(*) FROM sandboxes s WHERE " OLD_SANDBOX "),"
	" (SELECT count(*) FROM sandboxes s JOIN jobs j ON j.sandbox_id = s.id WHERE " OLD_SANDBOX "),"
	" (SELECT count(*) FROM sandboxes s JOIN events e ON e.sandbox_id = s.id WHERE " OLD_SANDBOX ")";

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
	int days = ORC_PRUNE_DEFAULT_DAYS, batch = ORC_PRUNE_DEFAULT_BATCH, err;

	if ((err = env_int(&days, "ORCHARD_RETENTION_DAYS", 1, ORC_PRUNE_MAX_DAYS)) < 0 ||
	    (err = env_int(&batch, "ORCHARD_RETENTION_BATCH", 1, ORC_PRUNE_MAX_BATCH)) < 0)
		return err;
	out->days = days;
	out->batch = batch;
	return 0;
}

/* now() - days, fixed once so that one run works on one set of rows. */
static int cutoff_get(char *out, size_t outlen, PGconn *db, int days)
{
	char d[16];
	const char *params[1] = { d };
	PGresult *res = NULL;
	int err;

	snprintf(d, sizeof(d), "%d", days);
	if ((err = orc_pg_query(&res, db, "SELECT now() - make_interval(days => $1::int)", 1, params)) < 0)
		return err;
	snprintf(out, outlen, "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	return 0;
}

static int count_old(struct orc_prune_result *r, PGconn *db, const char *cutoff)
{
	const char *params[1] = { cutoff };
	PGresult *res = NULL;
	int err;

	if ((err = orc_pg_query(&res, db, count_sql, 1, params)) < 0)
		return err;
	r->sandboxes = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	r->jobs = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
	r->events = strtoll(PQgetvalue(res, 0, 2), NULL, 10);
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
	char cutoff[64], batch[16];
	int64_t n, *counter;
	size_t i;
	int err;

	if (o->days < 1 || o->days > ORC_PRUNE_MAX_DAYS || o->batch < 1 || o->batch > ORC_PRUNE_MAX_BATCH ||
	    o->max_batches < 0)
		return ORC_EINVALID;
	if ((err = cutoff_get(cutoff, sizeof(cutoff), db, o->days)) < 0)
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
			if ((err = batch_run(&n, db, &steps[i], cutoff, batch)) < 0)
				goto done;
			if (n > 0) {
				*counter += n;
				r.batches++;
				orc_log(ORC_LOG_DEBUG, "retention batch", "table", steps[i].what,
					ORC_LOG_INT("rows", n), NULL);
			}
		} while (n == o->batch);
	}
done:
	if (err < 0) {
		orc_log(ORC_LOG_ERROR, "retention pruning failed", "error", orc_err_name(err),
			ORC_LOG_INT("sandboxes_pruned", r.sandboxes), ORC_LOG_INT("jobs_pruned", r.jobs),
			ORC_LOG_INT("events_pruned", r.events), NULL);
		return err;
	}
	*out = r;
	return 0;
}
