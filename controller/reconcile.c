/*
 * The reconcile loop. One thread, three database connections at most
 * (leader lock, this loop's LISTEN + statements), no transaction ever open
 * while a driver or an agent is called.
 *
 * A pass reads the rows it cares about and then, per row:
 *   1. pending, nothing running    -> driver create, record handle/address
 *   2. deleting                    -> driver destroy, state 'deleted'
 *   3. ready, process gone         -> state 'failed' ("sandbox process exited")
 *   4. (full sweeps) anything the driver owns without a pending/ready
 *      row is an orphan            -> driver destroy
 * Launched sandboxes wait in a list; between passes their agents are asked
 * GET /health every few ms (short timeout) until they answer 200 -> 'ready',
 * their process dies or their pending timeout passes -> 'failed'. A driver
 * with a status op (kubernetes) is asked first, without waiting: it gives
 * the agent's address once known, fails the sandbox with its reason, notes
 * why it is still pending on the row, and the agent is called only once
 * the driver says the sandbox is up; so create() need not wait and many
 * sandboxes start at once.
 *
 * A full sweep runs every sweep interval; a NOTIFY orchard_sandbox (payload:
 * the row id) runs a pass over just the notified rows at once, and a NOTIFY
 * orchard_checkpoint a checkpoint pass over just the notified checkpoints.
 */
#include "reconcile.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl_metrics.h"
#include "err.h"
#include "leader.h"
#include "log.h"
#include "prune.h"
#include "pgpool.h"
#include "rec.h"
#include "strutil.h"
#include "xalloc.h"

#define RECONNECT_MS 1000

/*
 * Lifetimes are judged on the database clock ($2: default TTL, $3: the
 * heartbeat rule's timeout), so controller and database clocks may differ.
 * Activity is the latest heartbeat or exec/file call (the API writes both).
 */
static const char select_rows[] =
	"SELECT id, state, image, block_network, agent_token, driver_handle,"
	" extract(epoch FROM created_at)::float8 + timeout_seconds, timeout_seconds,"
	" cpu_millis, memory_bytes,"
	" ceil(extract(epoch FROM created_at + make_interval(secs => COALESCE(ttl_seconds, $2::int))"
	"  - now()))::bigint,"
	" CASE WHEN state NOT IN ('pending', 'ready') THEN NULL"
	"  WHEN now() >= created_at + make_interval(secs => COALESCE(ttl_seconds, $2::int))"
	"   THEN 'ttl expired after ' || COALESCE(ttl_seconds, $2::int) || 's'"
	"  WHEN state = 'ready' AND idle_timeout_seconds IS NOT NULL AND now() >="
	"   GREATEST(last_heartbeat_at, last_activity_at, ready_at) + make_interval(secs => idle_timeout_seconds)"
	"   THEN 'idle timeout: no activity for ' || idle_timeout_seconds || 's'"
	"  WHEN state = 'ready' AND last_heartbeat_at IS NOT NULL AND now() >="
	"   GREATEST(last_heartbeat_at, last_activity_at) + make_interval(secs => $3::int)"
	"   THEN 'no heartbeat for ' || $3::int || 's'"
	" END, forked_from, pause_desired, paused, tools, admitted_at IS NOT NULL,"
	" COALESCE(disk_bytes, 0)"
	" FROM sandboxes"
	" WHERE state IN ('pending', 'ready', 'deleting') AND driver = $1";

/* ---- actions --------------------------------------------------------------- */

static void delete(struct rec *r, const struct row *row)
{
	struct waiter *w = rec_waiter_find(r, row->id);

	if (w)
		rec_waiter_remove(r, w);
	rec_launch_forget(r, row->id);
	if (r->drv->ops->destroy(r->drv, row->id, row->handle) < 0) {
		orc_log(ORC_LOG_WARN, "deleting sandbox failed; retrying on the next sweep",
			"sandbox_id", row->id, NULL);
		return;
	}
	rec_transition(r, row->id, "deleting", "deleted", NULL, NULL, NULL);
}

/*
 * TTL, idle timeout or the heartbeat rule ran out: 'deleting' with the
 * reason (event sandbox.expired), then torn down by this same pass.
 */
static void expire(struct rec *r, struct row *row)
{
	struct waiter *w;

	if (rec_transition_kind(r, row->id, row->state, "deleting", row->expired, NULL, NULL,
			    "sandbox.expired") <= 0)
		return;
	if ((w = rec_waiter_find(r, row->id)) != NULL)
		rec_waiter_remove(r, w);
	free(row->state);
	row->state = xstrdup("deleting");
}

/* A queued row (not admitted) is never launched; past its readiness
 * timeout it fails, saying it was queued. */
static void queued_timeout(struct rec *r, const struct row *row)
{
	char *msg;

	if (orc_now() <= row->deadline)
		return;
	msg = xasprintf("sandbox did not become ready within %d seconds: it was still queued for "
			"capacity (admission, docs/controller.md)", row->timeout_s);
	rec_fail_sandbox(r, row->id, "pending", msg, NULL);
	free(msg);
}

static void check_ready(struct rec *r, const struct row *row)
{
	struct ctl_sb_status st = CTL_SB_STATUS_INIT;
	char *msg;

	if (r->drv->ops->status) {
		if (r->drv->ops->status(r->drv, &st, row->id, row->handle) == 0 &&
		    st.state == CTL_SB_FAILED) {
			msg = xasprintf("sandbox process exited%s%.400s", st.message ? ": " : "",
					st.message ? st.message : "");
			rec_fail_sandbox(r, row->id, "ready", msg, row->handle);
			free(msg);
		}
		ctl_sb_status_release(&st);
		return;
	}
	if (r->drv->ops->alive(r->drv, row->id, row->handle))
		return;
	rec_fail_sandbox(r, row->id, "ready", "sandbox process exited", row->handle);
}

static int row_is_live(const struct row *rows, size_t n, const char *id)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (!strcmp(rows[i].id, id))
			return !strcmp(rows[i].state, "pending") || !strcmp(rows[i].state, "ready");
	return 0;
}

static void remove_orphans(struct rec *r, const struct row *rows, size_t n)
{
	char **ids = NULL;
	size_t nids = 0, i;

	if (r->drv->ops->list_owned(r->drv, &ids, &nids) < 0)
		return;
	for (i = 0; i < nids; i++) {
		if (row_is_live(rows, n, ids[i]) || rec_waiter_find(r, ids[i]))
			continue;
		orc_log(ORC_LOG_INFO, "removing an orphan sandbox (no pending or ready row)",
			"sandbox_id", ids[i], NULL);
		r->drv->ops->destroy(r->drv, ids[i], NULL);
	}
	ctl_ids_free(ids, nids);
}

/* ---- passes ---------------------------------------------------------------- */

static char *dup_or_null(PGresult *res, int i, int j)
{
	return PQgetisnull(res, i, j) ? NULL : xstrdup(PQgetvalue(res, i, j));
}

void rec_row_release(struct row *row)
{
	free(row->id);
	free(row->state);
	free(row->image);
	free(row->token);
	free(row->handle);
	free(row->expired);
	free(row->forked_from);
	memset(row, 0, sizeof(*row));
}

static void rows_free(struct row *rows, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		rec_row_release(&rows[i]);
	free(rows);
}

/* The rows of this pass, copied out so no result is held while acting. */
static int fetch_rows(struct row **out, size_t *nout, struct rec *r, int full)
{
	struct orc_buf sql = ORC_BUF_INIT, arr = ORC_BUF_INIT;
	char ttl[24], hb[24];
	const char *p[4] = { r->cfg->driver, ttl, hb, NULL };
	PGresult *res = NULL;
	struct row *rows = NULL;
	size_t i, n;
	int err;

	orc_buf_adds(&sql, select_rows);
	if (!full) {
		orc_buf_addc(&arr, '{');
		for (i = 0; i < r->notified.n; i++)   /* ids are DNS labels: no quoting */
			orc_buf_addf(&arr, "%s%s", i ? "," : "", r->notified.v[i]);
		orc_buf_addc(&arr, '}');
		p[3] = orc_buf_cstr(&arr);
		orc_buf_adds(&sql, " AND id = ANY($4::text[])");
	}
	snprintf(ttl, sizeof(ttl), "%lld", (long long)r->cfg->default_ttl_s);
	snprintf(hb, sizeof(hb), "%lld", (long long)r->cfg->heartbeat_timeout_s);
	if (!r->db) {
		err = ORC_EUNAVAIL;
		goto done;
	}
	if ((err = orc_pg_query(&res, r->db, orc_buf_cstr(&sql), full ? 3 : 4, p)) < 0) {
		if (PQstatus(r->db) != CONNECTION_OK)
			rec_db_drop(r);
		goto done;
	}
	n = (size_t)PQntuples(res);
	rows = xcalloc(n ? n : 1, sizeof(*rows));
	for (i = 0; i < n; i++) {
		int64_t v;
		double dl;
		rows[i].id = xstrdup(PQgetvalue(res, (int)i, 0));
		rows[i].state = xstrdup(PQgetvalue(res, (int)i, 1));
		rows[i].image = xstrdup(PQgetvalue(res, (int)i, 2));
		rows[i].block_network = !strcmp(PQgetvalue(res, (int)i, 3), "t");
		rows[i].token = xstrdup(PQgetvalue(res, (int)i, 4));
		rows[i].handle = dup_or_null(res, (int)i, 5);
		rows[i].deadline = orc_parse_double(&dl, PQgetvalue(res, (int)i, 6), 0, 1e12) == 0 ? dl : 0;
		rows[i].timeout_s = orc_parse_i64(&v, PQgetvalue(res, (int)i, 7), 0, INT32_MAX) == 0 ? (int)v : 0;
		rows[i].cpu_millis = orc_parse_i64(&v, PQgetvalue(res, (int)i, 8), 0, INT64_MAX) == 0 ? v : 0;
		rows[i].memory_bytes = orc_parse_i64(&v, PQgetvalue(res, (int)i, 9), 0, INT64_MAX) == 0 ? v : 0;
		rows[i].ttl_left_s = orc_parse_i64(&v, PQgetvalue(res, (int)i, 10), INT32_MIN, INT32_MAX) == 0 ? v : 0;
		rows[i].expired = dup_or_null(res, (int)i, 11);
		rows[i].forked_from = dup_or_null(res, (int)i, 12);
		rows[i].pause_desired = !strcmp(PQgetvalue(res, (int)i, 13), "t");
		rows[i].paused = !strcmp(PQgetvalue(res, (int)i, 14), "t");
		rows[i].tools = !strcmp(PQgetvalue(res, (int)i, 15), "t");
		rows[i].admitted = !strcmp(PQgetvalue(res, (int)i, 16), "t");
		rows[i].disk_bytes = orc_parse_i64(&v, PQgetvalue(res, (int)i, 17), 0, INT64_MAX) == 0 ? v : 0;
	}
	*out = rows;
	*nout = n;
done:
	PQclear(res);
	orc_buf_release(&sql);
	orc_buf_release(&arr);
	return err;
}

static void pass(struct rec *r, int full)
{
	struct rec_launch_batch batch = REC_LAUNCH_BATCH_INIT;
	struct row *rows = NULL;
	size_t n = 0, i, launched = 0;
	int64_t t0 = orc_mono_ms();
	int err;

	err = fetch_rows(&rows, &n, r, full);
	/* Consumed either way: a failed fetch is caught up by the next sweep. */
	ctl_strv_release(&r->notified);
	r->overflow = 0;
	if (err < 0)
		return;
	/* Lifetimes first, so an expired row is neither launched nor failed. */
	for (i = 0; i < n; i++)
		if (rows[i].expired)
			expire(r, &rows[i]);
	/* Then launch: creation latency is what users wait on. Beyond a
	 * batch, rows go to the next pass, after a health round. */
	for (i = 0; i < n; i++) {
		if (strcmp(rows[i].state, "pending"))
			continue;
		if (!rows[i].admitted)
			queued_timeout(r, &rows[i]);
		else if (launched == REC_LAUNCH_BATCH)
			ctl_strv_push(&r->notified, rows[i].id);
		else
			launched += rec_launch(r, &batch, &rows[i]);
	}
	rec_launch_batch_commit(r, &batch);
	for (i = 0; i < n; i++)
		if (!strcmp(rows[i].state, "deleting"))
			delete(r, &rows[i]);
	for (i = 0; i < n; i++)
		if (!strcmp(rows[i].state, "ready"))
			check_ready(r, &rows[i]);
	for (i = 0; i < n; i++)
		if (!strcmp(rows[i].state, "ready") && rows[i].pause_desired != rows[i].paused)
			rec_pause_apply(r, &rows[i]);
	if (full)
		remove_orphans(r, rows, n);
	for (i = 0; full && i < n; i++)
		ctl_metrics_state_seen(rows[i].state);
	ctl_metrics_pass(full, orc_mono_ms() - t0);
	orc_log(ORC_LOG_DEBUG, full ? "sweep done" : "pass done", ORC_LOG_INT("rows", n),
		ORC_LOG_INT("ms", orc_mono_ms() - t0), NULL);
	rows_free(rows, n);
}

/*
 * Retention runs on the leader between passes, bounded per tick so the loop
 * is never held for long; whatever is left is taken on the next tick.
 */
#define PRUNE_INTERVAL_MS (10 * 60 * 1000)
#define PRUNE_FIRST_MS (60 * 1000)
#define PRUNE_MAX_BATCHES 200

static void prune_tick(struct rec *r, int64_t now)
{
	struct orc_prune_opts o = ORC_PRUNE_OPTS_INIT;
	struct orc_prune_result res;

	r->next_prune_ms = now + PRUNE_INTERVAL_MS;
	if (orc_prune_opts_from_env(&o) < 0)
		return;
	o.max_batches = PRUNE_MAX_BATCHES;
	if (orc_prune(&res, r->db, &o) < 0) {
		orc_log(ORC_LOG_WARN, "retention pruning failed; retried on the next tick", NULL);
		return;
	}
	if (!res.sandboxes && !res.jobs && !res.events && !res.idempotency_keys && !res.job_output)
		return;
	orc_log(ORC_LOG_INFO, "pruned old deleted sandboxes", ORC_LOG_INT("sandboxes", res.sandboxes),
		ORC_LOG_INT("jobs", res.jobs), ORC_LOG_INT("events", res.events),
		ORC_LOG_INT("idempotency_keys", res.idempotency_keys),
		ORC_LOG_INT("job_output_moved", res.job_output),
		ORC_LOG_BOOL("more", res.more), NULL);
}

int ctl_reconcile_run(const struct ctl_config *cfg, struct ctl_driver *driver, PGconn *leader)
{
	struct rec r;
	struct pollfd pfd[4];
	int64_t now, wake, last_connect = 0;
	unsigned nfds, jobs_i;
	int err = 0, evfd, jobsfd;
	size_t i;

	memset(&r, 0, sizeof(r));
	r.cfg = cfg;
	r.drv = driver;
	r.leader = leader;
	r.next_prune_ms = orc_mono_ms() + PRUNE_FIRST_MS;

	while (!ctl_stopping) {
		now = orc_mono_ms();
		if (!r.db && now - last_connect >= RECONNECT_MS) {
			last_connect = now;
			if (rec_db_open(&r) < 0)
				orc_log(ORC_LOG_WARN, "database unavailable; retrying every second", NULL);
		}
		rec_collect_notifies(&r);
		if (r.jobs_woke) {
			/* a helper ended: empty the pipe first, then ask */
			r.jobs_woke = 0;
			driver->ops->jobs_drain(driver);
			r.ckpt_notified = 1;
		}
		if (r.db && now >= r.next_sweep_ms) {
			if ((err = ctl_leader_check(leader, 1)) < 0)
				break;
			r.next_sweep_ms = now + cfg->sweep_interval_ms;
			if ((err = rec_capacity_refresh(&r)) < 0)
				break;
			rec_admit(&r);
			pass(&r, 1);
			if (r.db)
				rec_checkpoint_pass(&r, 1);
			if (now >= r.next_prune_ms)
				prune_tick(&r, now);
		} else if (r.db && r.overflow) {
			r.next_sweep_ms = 0;
			continue;
		} else if (r.db && (r.notified.n || r.freed)) {
			rec_admit(&r);
			pass(&r, 0);
		}
		if (r.db && r.nstarting)
			rec_launch_poll(&r);
		if (r.db && (r.ckpt_notified || r.ckpt_ids.n))
			rec_checkpoint_pass(&r, 0);
		if (driver->ops->drain)
			driver->ops->drain(driver, rec_poke, &r);
		if (r.db)
			rec_health_round(&r);
		rec_collect_notifies(&r);

		now = orc_mono_ms();
		wake = r.db ? rec_next_wakeup(&r) : now + RECONNECT_MS;
		nfds = 0;
		pfd[nfds++] = (struct pollfd){ PQsocket(leader), POLLIN, 0 };
		if (r.db)
			pfd[nfds++] = (struct pollfd){ PQsocket(r.db), POLLIN, 0 };
		evfd = driver->ops->events_fd ? driver->ops->events_fd(driver) : -1;
		if (evfd >= 0 && r.nw)
			pfd[nfds++] = (struct pollfd){ evfd, POLLIN, 0 };
		jobsfd = driver->ops->jobs_fd ? driver->ops->jobs_fd(driver) : -1;
		jobs_i = nfds;
		if (jobsfd >= 0)
			pfd[nfds++] = (struct pollfd){ jobsfd, POLLIN, 0 };
		if (wake > now && ctl_wait(pfd, nfds, wake - now) > 0) {
			if (jobs_i < nfds && (pfd[jobs_i].revents & POLLIN))
				r.jobs_woke = 1;
			if ((pfd[0].revents & (POLLIN | POLLHUP | POLLERR)) &&
			    (err = ctl_leader_check(leader, 0)) < 0)
				break;
		}
	}
	rec_launch_release(&r);
	for (i = r.nw; i > 0; i--)
		rec_waiter_remove(&r, &r.w[i - 1]);
	free(r.w);
	ctl_strv_release(&r.notified);
	ctl_strv_release(&r.ckpt_ids);
	rec_db_drop(&r);
	return ctl_stopping && err == 0 ? 0 : err;
}
