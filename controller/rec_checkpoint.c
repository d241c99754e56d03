/*
 * The reconcile loop's checkpoint side (docs/checkpoints.md): pending
 * checkpoints are taken through the driver, deleted and expired ones
 * removed, and (on full sweeps) copies without a live row removed; and a
 * ready sandbox whose pause_desired differs from paused is frozen or
 * thawed.
 *
 * Crash safety: a checkpoint row is 'ready' only after the driver's copy
 * is complete; a controller killed mid-copy leaves the row 'pending' and a
 * partial copy, which the next pass (of the next leader) takes again from
 * scratch or fails when its sandbox is gone; a whole btrfs snapshot under
 * a pending row is adopted (checkpoint_local.c). A fork is a set of pending
 * sandbox rows, launched like any other; a checkpoint being deleted waits
 * until no fork of it is still pending.
 *
 * A copy that takes long runs off the loop (the driver answers
 * CTL_CHECKPOINT_RUNNING): the pass asks again every CKPT_POLL_MS until
 * it is done, and the loop serves everything else meanwhile. So does the
 * count of a checkpoint's bytes, which the local driver makes after the
 * checkpoint is ready (bytes NULL until then).
 */
#include "rec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "log.h"
#include "pgarray.h"
#include "strutil.h"
#include "xalloc.h"

#define CKPT_BATCH 64

static const char select_ckpts[] =
	"SELECT c.id, c.state, c.sandbox_id, COALESCE(s.state, 'deleted'),"
	" c.expires_at IS NOT NULL AND c.expires_at <= now(),"
	" EXISTS (SELECT 1 FROM sandboxes f WHERE f.forked_from = c.id AND f.state = 'pending')"
	" FROM checkpoints c LEFT JOIN sandboxes s ON s.id = c.sandbox_id"
	" WHERE c.driver = $1 AND (c.state IN ('pending', 'deleting')"
	"  OR (c.state = 'ready' AND (c.expires_at <= now() OR c.bytes IS NULL)))";
static const char only_ids[] = " AND c.id = ANY($2::text[])";
static const char batch[] = " ORDER BY c.created_at, c.id LIMIT 64";

enum { K_ID, K_STATE, K_SANDBOX, K_SB_STATE, K_EXPIRED, K_FORKS_PENDING };

/* Move checkpoint id from `from` to `to` (with message); 1 when it moved. */
static int ckpt_set(struct rec *r, const char *id, const char *from, const char *to,
		    const char *message, const char *bytes)
{
	const char *p[5] = { id, from, to, message, bytes };

	return rec_db_exec(r,
		"UPDATE checkpoints SET state = $3, state_message = COALESCE($4, state_message),"
		" bytes = COALESCE($5::bigint, bytes),"
		" ready_at = CASE WHEN $3 = 'ready' THEN now() ELSE ready_at END,"
		" deleted_at = CASE WHEN $3 IN ('deleting', 'deleted') THEN COALESCE(deleted_at, now())"
		"  ELSE deleted_at END"
		" WHERE id = $1 AND state = $2", 5, p);
}

/*
 * A ready checkpoint whose bytes are not counted yet (the driver counts
 * them off the loop, after the checkpoint was answered): ask again until
 * the count is in. A controller killed meanwhile leaves bytes NULL, and
 * the next one counts again.
 */
static void count(struct rec *r, const char *id)
{
	const char *p[2] = { id, NULL };
	char bytes[24];
	int64_t n = 0;
	int err;

	if (!r->drv->ops->checkpoint_bytes)
		err = ORC_EUNAVAIL;
	else if ((err = r->drv->ops->checkpoint_bytes(r->drv, &n, id)) == CTL_CHECKPOINT_RUNNING) {
		r->ckpt_notified = 1;
		return;
	}
	if (err < 0) {
		/* 0 rather than asking for ever; the log says why */
		orc_log(ORC_LOG_WARN, "counting a checkpoint's bytes failed; recorded as 0",
			"checkpoint_id", id, NULL);
		n = 0;
	}
	snprintf(bytes, sizeof(bytes), "%lld", (long long)n);
	p[1] = bytes;
	if (rec_db_exec(r, "UPDATE checkpoints SET bytes = $2::bigint WHERE id = $1 AND bytes IS NULL",
			2, p) == 1)
		orc_log(ORC_LOG_INFO, "checkpoint bytes recorded", "checkpoint_id", id,
			ORC_LOG_INT("bytes", n), NULL);
}

/*
 * The state of checkpoint id is captured for good (CTL_CHECKPOINT_TAKEN):
 * the api's step barrier may let the sandbox's next step go now, before
 * the row's update to ready is committed (api/step_policy.c). Only a
 * wake-up, so its commit need not wait for the disk: a lost one costs the
 * barrier the wait for 'ready', and a controller that dies before the row
 * is ready leaves the snapshot, which the next one adopts.
 */
static void announce_taken(struct rec *r, const char *id)
{
	const char *p[1] = { id };

	rec_db_exec(r, "SELECT set_config('synchronous_commit', 'off', true),"
		    " pg_notify('orchard_checkpoint_taken', $1)", 1, p);
}

static void take(struct rec *r, const char *id, const char *sandbox, const char *sb_state)
{
	char *why = NULL, bytes[24], *msg;
	int64_t n = 0;
	int err;

	if (strcmp(sb_state, "ready")) {
		msg = xasprintf("sandbox %s is %s: only a running sandbox can be checkpointed", sandbox,
				sb_state);
		ckpt_set(r, id, "pending", "failed", msg, NULL);
		free(msg);
		return;
	}
	if (r->drv->ops->checkpoint_agent) {
		err = rec_checkpoint_agent(r, &n, &why, sandbox, id);
	} else if (!r->drv->ops->checkpoint) {
		ckpt_set(r, id, "pending", "failed", "checkpoints are not supported by this driver", NULL);
		return;
	} else if ((err = r->drv->ops->checkpoint(r->drv, &n, &why, sandbox, id)) ==
		   CTL_CHECKPOINT_TAKEN) {
		announce_taken(r, id);
		err = r->drv->ops->checkpoint(r->drv, &n, &why, sandbox, id);
	}
	if (err == CTL_CHECKPOINT_RUNNING) {
		/* copying off the loop: look again soon (rec_next_wakeup) */
		r->ckpt_notified = 1;
		return;
	}
	if (err < 0) {
		orc_log(ORC_LOG_WARN, "checkpoint failed", "checkpoint_id", id, "sandbox_id", sandbox,
			"error", why ? why : "", NULL);
		ckpt_set(r, id, "pending", "failed", why ? why : "the copy failed", NULL);
		free(why);
		return;
	}
	snprintf(bytes, sizeof(bytes), "%lld", (long long)n);
	/* Deleted meanwhile: the 'deleting' pass removes the copy. */
	if (ckpt_set(r, id, "pending", "ready", NULL, n == CTL_BYTES_UNCOUNTED ? NULL : bytes) != 1) {
		r->ckpt_notified = 1;
		return;
	}
	orc_log(ORC_LOG_INFO, "checkpoint taken", "checkpoint_id", id, "sandbox_id", sandbox,
		ORC_LOG_INT("bytes", n), NULL);
	if (n == CTL_BYTES_UNCOUNTED)
		count(r, id);
}

static void drop(struct rec *r, const char *id)
{
	if (r->drv->ops->checkpoint_remove && r->drv->ops->checkpoint_remove(r->drv, id) < 0) {
		orc_log(ORC_LOG_WARN, "removing a checkpoint failed; retrying on the next sweep",
			"checkpoint_id", id, NULL);
		return;
	}
	ckpt_set(r, id, "deleting", "deleted", NULL, NULL);
}

/* Copies the driver holds without a pending, ready or deleting row. */
static void remove_orphans(struct rec *r)
{
	struct orc_pg_array ids = ORC_PG_ARRAY_INIT;
	char **v = NULL;
	size_t n = 0, i;
	PGresult *res = NULL;
	const char *p[1];

	if (!r->drv->ops->checkpoint_list || r->drv->ops->checkpoint_list(r->drv, &v, &n) < 0 || !n)
		goto done;
	for (i = 0; i < n; i++)
		orc_pg_array_add(&ids, v[i]);
	p[0] = orc_pg_array_cstr(&ids);
	if (rec_db_query(r, &res, "SELECT id FROM checkpoints WHERE id = ANY($1::text[])"
			 " AND state IN ('pending', 'ready', 'deleting')", 1, p) < 0)
		goto done;
	for (i = 0; i < n; i++) {
		int live = 0;
		for (int j = 0; j < PQntuples(res) && !live; j++)
			live = !strcmp(PQgetvalue(res, j, 0), v[i]);
		if (live)
			continue;
		orc_log(ORC_LOG_INFO, "removing an orphan checkpoint copy", "checkpoint_id", v[i], NULL);
		r->drv->ops->checkpoint_remove(r->drv, v[i]);
	}
done:
	PQclear(res);
	orc_pg_array_release(&ids);
	ctl_ids_free(v, n);
}

/*
 * The checkpoints to act on: all of them (full, or ckpt_notified: a copy
 * runs, too many notifications), or just the notified ones, which spares a
 * step's checkpoint the scan of every other (reconcile.c).
 */
static int fetch(struct rec *r, PGresult **out, int full)
{
	struct orc_pg_array ids = ORC_PG_ARRAY_INIT;
	struct orc_buf sql = ORC_BUF_INIT;
	const char *p[2] = { r->cfg->driver, NULL };
	int only = !full && !r->ckpt_notified, err;
	size_t i;

	orc_buf_adds(&sql, select_ckpts);
	if (only) {
		for (i = 0; i < r->ckpt_ids.n; i++)
			orc_pg_array_add(&ids, r->ckpt_ids.v[i]);
		p[1] = orc_pg_array_cstr(&ids);
		orc_buf_adds(&sql, only_ids);
	}
	orc_buf_adds(&sql, batch);
	/* Consumed either way: a failed query is caught up by the next sweep. */
	r->ckpt_notified = 0;
	ctl_strv_release(&r->ckpt_ids);
	err = rec_db_query(r, out, orc_buf_cstr(&sql), only ? 2 : 1, p);
	orc_buf_release(&sql);
	orc_pg_array_release(&ids);
	return err;
}

void rec_checkpoint_pass(struct rec *r, int full)
{
	PGresult *res = NULL;
	int i, n;

	if (fetch(r, &res, full) < 0)
		return;
	n = PQntuples(res);
	for (i = 0; i < n; i++) {
		const char *id = PQgetvalue(res, i, K_ID), *state = PQgetvalue(res, i, K_STATE);
		if (!strcmp(state, "ready") && strcmp(PQgetvalue(res, i, K_EXPIRED), "t")) {
			count(r, id);
			continue;
		}
		if (!strcmp(state, "ready")) {
			/* expired */
			if (ckpt_set(r, id, "ready", "deleting", "expired", NULL) != 1)
				continue;
			state = "deleting";
		}
		if (!strcmp(state, "pending"))
			take(r, id, PQgetvalue(res, i, K_SANDBOX), PQgetvalue(res, i, K_SB_STATE));
		else if (!strcmp(PQgetvalue(res, i, K_FORKS_PENDING), "f"))
			drop(r, id);
	}
	if (n == CKPT_BATCH)
		r->ckpt_notified = 1;
	PQclear(res);
	if (full && r->db)
		remove_orphans(r);
}

void rec_pause_apply(struct rec *r, const struct row *row)
{
	const char *p[2] = { row->id, row->pause_desired ? "true" : "false" };
	int err = r->drv->ops->pause ? r->drv->ops->pause(r->drv, row->id, row->pause_desired) :
		ORC_EUNAVAIL;

	if (err < 0) {
		orc_log(ORC_LOG_WARN, row->pause_desired ? "pausing a sandbox failed" :
			"resuming a sandbox failed", "sandbox_id", row->id, NULL);
		/* Put the wish back, so the api's waiter answers at once. */
		rec_db_exec(r, "UPDATE sandboxes SET pause_desired = paused WHERE id = $1"
			    " AND pause_desired = $2::boolean", 2, p);
		return;
	}
	rec_db_exec(r, "UPDATE sandboxes SET paused = $2::boolean WHERE id = $1", 2, p);
}
