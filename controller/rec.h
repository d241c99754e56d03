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

#define MAX_NOTIFIED 512          /* more than this: do a full sweep instead */

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
};

/* One row of the pass query. */
struct row {
	char *id, *state, *image, *token, *handle;
	char *expired;           /* why its lifetime is over (TTL, idle), or NULL */
	int block_network;
	double deadline;         /* pending timeout, epoch seconds */
	int timeout_s;
	int64_t ttl_left_s;      /* seconds until the TTL (database clock) */
	int64_t cpu_millis, memory_bytes;
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
};

/* rec_db.c */
int rec_db_open(struct rec *r);
void rec_db_drop(struct rec *r);
/* Run a statement; the affected row count or a negative error. */
int rec_db_exec(struct rec *r, const char *sql, int n, const char *const *params);
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

/* rec_wait.c */
struct waiter *rec_waiter_find(struct rec *r, const char *id);
void rec_waiter_add(struct rec *r, const struct row *row, const char *handle, const char *address,
		    int watched);
void rec_waiter_remove(struct rec *r, struct waiter *w);
void rec_health_round(struct rec *r);
void rec_poke(const char *id, void *arg);
int64_t rec_next_wakeup(const struct rec *r);
#endif
