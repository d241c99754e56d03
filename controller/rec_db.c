/*
 * The reconcile loop's database side: its own connection (LISTEN
 * orchard_sandbox), guarded state transitions with their events, and the
 * notifications collected between passes.
 */
#include "rec.h"

#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "log.h"
#include "pgpool.h"
#include "strutil.h"

/*
 * A state change and its event in one statement (so one short implicit
 * transaction); guarded by the expected current state so a concurrent
 * delete always wins. Becoming ready clears the pending note in the same
 * statement, so no reader sees a ready row with a stale "why pending".
 * Returns 1 when the row changed, 0 when it was no longer in state `from`.
 */
static const char transition_sql[] =
	"WITH u AS ("
	" UPDATE sandboxes SET state = $3::text,"
	"  state_message = CASE WHEN $3::text = 'ready' THEN $4::text"
	"   ELSE COALESCE($4::text, state_message) END,"
	"  ready_at = CASE WHEN $3::text = 'ready' THEN now() ELSE ready_at END,"
	"  deleted_at = CASE WHEN $3::text IN ('deleting', 'deleted') THEN COALESCE(deleted_at, now())"
	"   ELSE deleted_at END,"
	"  driver_handle = COALESCE($5::text, driver_handle),"
	"  agent_address = COALESCE($6::text, agent_address)"
	" WHERE id = $1::text AND state = $2::text"
	" RETURNING id, tenant_id)"
	" INSERT INTO events (sandbox_id, tenant_id, kind, data)"
	" SELECT id, tenant_id, COALESCE($7::text, 'sandbox.' || $3::text),"
	"  jsonb_strip_nulls(jsonb_build_object('from', $2::text, 'message', $4::text))"
	" FROM u";

void rec_db_drop(struct rec *r)
{
	if (r->db) {
		PQfinish(r->db);
		r->db = NULL;
	}
}

int rec_db_open(struct rec *r)
{
	int err;

	if ((err = orc_pg_connect(&r->db, r->cfg->database_url)) < 0)
		return err;
	if ((err = orc_pg_query(NULL, r->db, "LISTEN orchard_sandbox", 0, NULL)) < 0 ||
	    (err = orc_pg_query(NULL, r->db, "LISTEN orchard_checkpoint", 0, NULL)) < 0) {
		rec_db_drop(r);
		return err;
	}
	/* Whatever happened while we were not listening: look at everything. */
	r->next_sweep_ms = 0;
	return 0;
}

int rec_db_query(struct rec *r, PGresult **out, const char *sql, int n, const char *const *params)
{
	int err;

	if (!r->db)
		return ORC_EUNAVAIL;
	if ((err = orc_pg_query(out, r->db, sql, n, params)) < 0) {
		if (err == ORC_EUNAVAIL || PQstatus(r->db) != CONNECTION_OK)
			rec_db_drop(r);
		return err;
	}
	return 0;
}

void rec_handles_add(struct rec_handles *h, const char *id, const char *handle, const char *address)
{
	orc_pg_array_add(&h->id, id);
	orc_pg_array_add(&h->handle, handle);
	orc_pg_array_add(&h->address, address);
}

int rec_handles_query(struct rec *r, PGresult **out, const char *sql, struct rec_handles *h)
{
	const char *p[3] = { orc_pg_array_cstr(&h->id), orc_pg_array_cstr(&h->handle),
			     orc_pg_array_cstr(&h->address) };

	return rec_db_query(r, out, sql, 3, p);
}

void rec_handles_release(struct rec_handles *h)
{
	orc_pg_array_release(&h->id);
	orc_pg_array_release(&h->handle);
	orc_pg_array_release(&h->address);
}

/* Run a statement; returns the affected row count or a negative error.
 * A lost connection is dropped here and reopened by the loop. */
int rec_db_exec(struct rec *r, const char *sql, int n, const char *const *params)
{
	PGresult *res = NULL;
	int err;

	if ((err = rec_db_query(r, &res, sql, n, params)) < 0)
		return err;
	err = (int)strtol(PQcmdTuples(res), NULL, 10);
	PQclear(res);
	return err;
}

int rec_transition_kind(struct rec *r, const char *id, const char *from, const char *to,
			   const char *message, const char *handle, const char *address,
			   const char *kind)
{
	const char *p[7] = { id, from, to, message, handle, address, kind };
	int n = rec_db_exec(r, transition_sql, 7, p);

	if (n > 0 && (!strcmp(to, "failed") || !strcmp(to, "deleted")))
		r->freed = 1;
	if (n > 0)
		orc_log(to[0] == 'f' ? ORC_LOG_WARN : ORC_LOG_INFO, "sandbox state changed",
			"sandbox_id", id, "from", from, "to", to, "message", message, NULL);
	return n;
}

int rec_transition(struct rec *r, const char *id, const char *from, const char *to,
		      const char *message, const char *handle, const char *address)
{
	return rec_transition_kind(r, id, from, to, message, handle, address, NULL);
}

void rec_collect_notifies(struct rec *r)
{
	PGnotify *n;

	if (!r->db)
		return;
	if (!PQconsumeInput(r->db)) {
		orc_log(ORC_LOG_WARN, "database connection lost", "error", PQerrorMessage(r->db), NULL);
		rec_db_drop(r);
		return;
	}
	while ((n = PQnotifies(r->db)) != NULL) {
		if (!strcmp(n->relname, "orchard_checkpoint")) {
			if (r->ckpt_ids.n >= MAX_NOTIFIED || !n->extra || !orc_is_dns_label(n->extra))
				r->ckpt_notified = 1;
			else
				ctl_strv_push(&r->ckpt_ids, n->extra);
		} else if (r->notified.n >= MAX_NOTIFIED)
			r->overflow = 1;
		else if (n->extra && orc_is_dns_label(n->extra))
			ctl_strv_push(&r->notified, n->extra);
		PQfreemem(n);
	}
}

/* Mark a row failed (if still in `from`) and remove what is left of it. */
void rec_fail_sandbox(struct rec *r, const char *id, const char *from, const char *msg,
			 const char *handle)
{
	char *why;

	if (r->drv->ops->diagnose && (why = r->drv->ops->diagnose(r->drv, id)) != NULL) {
		orc_log(ORC_LOG_INFO, "sandbox log tail", "sandbox_id", id, "line", why, NULL);
		free(why);
	}
	rec_transition(r, id, from, "failed", msg, NULL, NULL);
	if (r->drv->ops->destroy(r->drv, id, handle) < 0)
		orc_log(ORC_LOG_WARN, "cleanup of a failed sandbox incomplete; retried by the sweep",
			"sandbox_id", id, NULL);
}

