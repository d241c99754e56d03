#ifndef ORC_PRUNE_H
#define ORC_PRUNE_H
#include <stdint.h>
#include <libpq-fe.h>
/*
 * Retention: remove what is left of sandboxes deleted long ago — their
 * events, then their jobs, then their rows —, Idempotency-Key bodies
 * older than key_hours, and the output pieces of jobs that ended without
 * their runner (moved into the job rows), in small batches, each its
 * own short transaction (WITH batch AS MATERIALIZED (SELECT ... LIMIT n
 * FOR UPDATE SKIP LOCKED) DELETE ... WHERE id IN (SELECT id FROM batch)),
 * so pruning never holds a lock for long and never waits on a row
 * someone else holds. Only rows in state 'deleted' (the
 * controller finished tearing them down) whose deleted_at is older than
 * the retention count; live sandboxes, and their jobs and events, are
 * never touched. Interrupted or concurrent runs are safe: the next one
 * carries on.
 *
 *   struct orc_prune_opts o = ORC_PRUNE_OPTS_INIT;
 *   struct orc_prune_result r;
 *   if ((err = orc_prune_opts_from_env(&o)) < 0) ...   // ORCHARD_RETENTION_*
 *   o.max_batches = 100;                               // bound one tick's work
 *   if ((err = orc_prune(&r, conn, &o)) < 0) ...
 *
 * The connection must not be inside a transaction. orchard-admin prune
 * runs it by hand; the controller is meant to call it periodically
 * (docs/observability.md, "Retention").
 */
#define ORC_PRUNE_DEFAULT_DAYS 30
#define ORC_PRUNE_DEFAULT_BATCH 500
#define ORC_PRUNE_DEFAULT_KEY_HOURS 24
#define ORC_PRUNE_MAX_DAYS 36500
#define ORC_PRUNE_MAX_BATCH 10000
#define ORC_PRUNE_MAX_KEY_HOURS 876000
/* A job that ended this many minutes ago has its output pieces moved into
 * its row (a string: it is part of the statement). */
#define ORC_PRUNE_OUTPUT_GRACE_MIN "10"

struct orc_prune_opts {
	int days;          /* prune sandboxes deleted more than this many days ago (>= 1) */
	int batch;         /* rows per DELETE, each its own transaction */
	int64_t max_batches; /* stop after this many DELETEs that removed rows; 0: no limit */
	int dry_run;       /* only count what would go */
	int key_hours;     /* prune Idempotency-Key bodies older than this (>= 1) */
};
#define ORC_PRUNE_OPTS_INIT { ORC_PRUNE_DEFAULT_DAYS, ORC_PRUNE_DEFAULT_BATCH, 0, 0, \
			      ORC_PRUNE_DEFAULT_KEY_HOURS }

struct orc_prune_result {
	int64_t sandboxes;   /* rows deleted (or, in a dry run, that would be) */
	int64_t jobs;
	int64_t events;
	int64_t idempotency_keys;
	int64_t job_output;  /* output pieces moved into their ended jobs' rows */
	int64_t batches;     /* DELETE statements that removed rows (0 in a dry run) */
	int more;            /* stopped at max_batches with work left */
};

/*
 * Days from ORCHARD_RETENTION_DAYS (default 30, 1..36500), the batch
 * size from ORCHARD_RETENTION_BATCH (default 500, 1..10000) and the key
 * hours from ORCHARD_IDEMPOTENCY_RETENTION_HOURS (default 24, 1..876000)
 * into *out (other fields untouched). ORC_EINVALID, with a log line naming the
 * variable, when one is set but not valid.
 */
int orc_prune_opts_from_env(struct orc_prune_opts *out);

/*
 * Prune with o; *out gets the counts on success. ORC_EINVALID for opts out
 * of range; a database failure returns its orc_err (what was deleted by
 * then stays deleted — every batch commits on its own).
 */
int orc_prune(struct orc_prune_result *out, PGconn *db, const struct orc_prune_opts *o);
#endif
