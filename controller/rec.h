#ifndef CTL_REC_H
#define CTL_REC_H
/*
 * The reconcile loop's internals, shared by its files (not a public
 * interface; ../reconcile.h is):
 *   reconcile.c  the loop and its passes over sandbox rows
 *   rec_db.c     its database connection, state transitions, notifications
 *   rec_wait.c   launched sandboxes waiting for their agent's /health
 */
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "ctl.h"
#include "driver.h"
#include "local.h"   /* struct ctl_strv */
#include "pgarray.h"

#define MAX_NOTIFIED 512          /* more than this: do a full sweep instead */
#define CKPT_POLL_MS 50           /* how often a checkpoint copy off the loop is polled */

/* A launched sandbox whose agent has not answered /health yet. */
struct waiter {
	char *id;
	char *token;
	char *address;          /* NULL until the driver's status() knows it */
	char *handle;
	char *note;             /* the pending note last written to the row, or NULL */
	double deadline;        /* epoch seconds: created_at + timeout_seconds */
	int timeout_s;
	int64_t launched_ms;
	int64_t next_check_ms;
	int64_t poked_ms;       /* when the driver last hinted it may be up (0: never) */
	int watched;            /* the driver hints readiness: poll rarely */
	int ready;              /* answered 200: becomes 'ready' with this round's batch */
	char *restore;          /* a fork's checkpoint still to push through its agent
				 * (drivers with restore_agent), else NULL */
};

/* One row of the pass query. */
struct row {
	char *id, *state, *image, *token, *handle;
	char *expired;           /* why its lifetime is over (TTL, idle), or NULL */
	int block_network;
	int tools;               /* the sandbox-tools bundle (sandboxes.tools) */
	double deadline;         /* pending timeout, epoch seconds */
	int timeout_s;
	int64_t ttl_left_s;      /* seconds until the TTL (database clock) */
	int64_t cpu_millis, memory_bytes;
	int64_t disk_bytes;     /* 0: no limit */
	char *forked_from;       /* the checkpoint a fork starts from, or NULL */
	int pause_desired, paused;
	int admitted;            /* admitted_at is set: may be launched */
};

struct rec {
	const struct ctl_config *cfg;
	struct ctl_driver *drv;
	PGconn *leader;
	PGconn *db;
	struct waiter *w;
	size_t nw, aw;
	struct ctl_strv notified;
	int overflow;            /* too many notifications: full sweep */
	int64_t next_sweep_ms;
	int64_t next_prune_ms;   /* retention (lib/prune.h), leader only */
	int ckpt_notified;       /* a copy runs, or too many ids below: run the
				  * checkpoint pass (within CKPT_POLL_MS) */
	struct ctl_strv ckpt_ids; /* orchard_checkpoint payloads: a pass over just
				  * these rows at once (a step's checkpoint) */
	struct ctl_capacity cap; /* the driver's, refreshed every sweep (have_cap) */
	int have_cap;
	int cap_unknown;         /* the driver cannot tell yet (ORC_EUNAVAIL): admit all */
	int freed;               /* a sandbox failed or was deleted: admit again */
	struct rec_starting **starting;  /* launches off the loop (rec_launch.c) */
	size_t nstarting, astarting;
	int jobs_woke;           /* the driver's jobs_fd was readable */
};

/* rec_admit.c: queued rows admitted into the driver's capacity. */
/* Ask the driver for its capacity and record it in driver_capacity;
 * ORC_EINVALID when it is misconfigured (fatal). */
int rec_capacity_refresh(struct rec *r);
/* Admit what fits, in fair-share order; admitted ids join r->notified. */
void rec_admit(struct rec *r);

/* rec_db.c */
int rec_db_open(struct rec *r);
void rec_db_drop(struct rec *r);
/* Run a statement; the affected row count or a negative error. */
int rec_db_exec(struct rec *r, const char *sql, int n, const char *const *params);
/* Run a statement; its result in *out (PQclear it). A lost connection is
 * dropped here and reopened by the loop. */
int rec_db_query(struct rec *r, PGresult **out, const char *sql, int n, const char *const *params);
/*
 * A batch of (id, handle, address) rows, one statement's $1, $2 and $3 as
 * arrays (for unnest): the launches of a pass, the readies of a round.
 */
struct rec_handles {
	struct orc_pg_array id, handle, address;
};

#define REC_HANDLES_INIT { ORC_PG_ARRAY_INIT, ORC_PG_ARRAY_INIT, ORC_PG_ARRAY_INIT }

void rec_handles_add(struct rec_handles *h, const char *id, const char *handle, const char *address);
/* Run sql over h's arrays, as rec_db_query. */
int rec_handles_query(struct rec *r, PGresult **out, const char *sql, struct rec_handles *h);
void rec_handles_release(struct rec_handles *h);
/* pending -> ready etc., guarded by `from`, with its event (kind NULL:
 * sandbox.<to>); 1 when the row changed, 0 when it was not in `from`. */
int rec_transition_kind(struct rec *r, const char *id, const char *from, const char *to,
			const char *message, const char *handle, const char *address,
			const char *kind);
int rec_transition(struct rec *r, const char *id, const char *from, const char *to,
		   const char *message, const char *handle, const char *address);
void rec_collect_notifies(struct rec *r);
void rec_fail_sandbox(struct rec *r, const char *id, const char *from, const char *msg,
		      const char *handle);

/* rec_ckpt_agent.c: checkpoints through the agent (ops->checkpoint_agent,
 * ops->restore_agent). rec_restore: 0 restored, ORC_EUNAVAIL try again
 * later, else the sandbox was failed (remove its waiter). */
int rec_checkpoint_agent(struct rec *r, int64_t *bytes_out, char **why, const char *sandbox,
			 const char *ckpt);
int rec_restore(struct rec *r, struct waiter *w);

/* rec_launch.c: pending rows launched in batches (one commit each). */
#define REC_LAUNCH_BATCH 32

struct rec_launched {
	const struct row *row;   /* the pass's row (outlives the batch) */
	char *handle, *address;
	int64_t create_ms;
	int recorded;
	int off_loop;            /* launched by a helper: its agent may be up already */
};

struct rec_launch_batch {
	struct rec_launched *v;
	size_t n, alloc;
};

#define REC_LAUNCH_BATCH_INIT { NULL, 0, 0 }

/* Launch row (or adopt it, or fail it); 1 when a driver create started a
 * sandbox, which then waits in b. */
int rec_launch(struct rec *r, struct rec_launch_batch *b, const struct row *row);
/* Record b's handles on their rows in one statement, add the recorded
 * sandboxes to the waiters, and empty b. */
void rec_launch_batch_commit(struct rec *r, struct rec_launch_batch *b);
/* Ask the driver again about the launches it runs off the loop
 * (CTL_CREATE_RUNNING): record the ended ones as a batch, fail the
 * failed ones and those past their pending timeout. */
void rec_launch_poll(struct rec *r);
/* Forget id's launch off the loop (its row is being deleted: the
 * driver's destroy stops it). */
void rec_launch_forget(struct rec *r, const char *id);
/* Forget every launch off the loop (the loop ends). */
void rec_launch_release(struct rec *r);
/* reconcile.c: free row's fields. */
void rec_row_release(struct row *row);

/* rec_checkpoint.c: checkpoints taken and removed, pause applied. */
void rec_checkpoint_pass(struct rec *r, int full);
/* A ready row whose pause_desired differs from paused. */
void rec_pause_apply(struct rec *r, const struct row *row);

/* rec_wait.c */
struct waiter *rec_waiter_find(struct rec *r, const char *id);
void rec_waiter_add(struct rec *r, const struct row *row, const char *handle, const char *address,
		    int watched);
void rec_waiter_remove(struct rec *r, struct waiter *w);
void rec_health_round(struct rec *r);
void rec_poke(const char *id, void *arg);
int64_t rec_next_wakeup(const struct rec *r);
#endif
