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
 * the row id) runs a pass over just the notified rows at once.
 */
#include "reconcile.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_client.h"
#include "ctl_metrics.h"
#include "err.h"
#include "leader.h"
#include "local.h"
#include "log.h"
#include "prune.h"
#include "pgpool.h"
#include "strutil.h"
#include "xalloc.h"

#define MAX_NOTIFIED 512          /* more than this: do a full sweep instead */
#define RECONNECT_MS 1000
#define FALLBACK_CHECK_MS 200     /* health polling of a sandbox whose driver hints */

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
	" END"
	" FROM sandboxes"
	" WHERE state IN ('pending', 'ready', 'deleting') AND driver = $1";

/*
 * A state change and its event in one statement (so one short implicit
 * transaction); guarded by the expected current state so a concurrent
 * delete always wins. Returns 1 when the row changed, 0 when it was no
 * longer in state `from`.
 */
static const char transition_sql[] =
	"WITH u AS ("
	" UPDATE sandboxes SET state = $3::text,"
	"  state_message = COALESCE($4::text, state_message),"
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

static const char record_handle_sql[] =
	"UPDATE sandboxes SET driver_handle = $2, agent_address = $3"
	" WHERE id = $1 AND state = 'pending'";

/* Why a sandbox is still pending ($2), or no reason any more (NULL). */
static const char pending_note_sql[] =
	"UPDATE sandboxes SET state_message = $2 WHERE id = $1 AND state = 'pending'";
static const char clear_note_sql[] =
	"UPDATE sandboxes SET state_message = NULL"
	" WHERE id = $1 AND state = 'ready' AND state_message = $2";

/* ---- database ------------------------------------------------------------ */

static void db_drop(struct rec *r)
{
	if (r->db) {
		PQfinish(r->db);
		r->db = NULL;
	}
}

static int db_open(struct rec *r)
{
	int err;

	if ((err = orc_pg_connect(&r->db, r->cfg->database_url)) < 0)
		return err;
	if ((err = orc_pg_query(NULL, r->db, "LISTEN orchard_sandbox", 0, NULL)) < 0) {
		db_drop(r);
		return err;
	}
	/* Whatever happened while we were not listening: look at everything. */
	r->next_sweep_ms = 0;
	return 0;
}

/* Run a statement; returns the affected row count or a negative error.
 * A lost connection is dropped here and reopened by the loop. */
static int db_exec(struct rec *r, const char *sql, int n, const char *const *params)
{
	PGresult *res = NULL;
	int err;

	if (!r->db)
		return ORC_EUNAVAIL;
	if ((err = orc_pg_query(&res, r->db, sql, n, params)) < 0) {
		if (err == ORC_EUNAVAIL || PQstatus(r->db) != CONNECTION_OK)
			db_drop(r);
		return err;
	}
	err = (int)strtol(PQcmdTuples(res), NULL, 10);
	PQclear(res);
	return err;
}

static int transition_kind(struct rec *r, const char *id, const char *from, const char *to,
			   const char *message, const char *handle, const char *address,
			   const char *kind)
{
	const char *p[7] = { id, from, to, message, handle, address, kind };
	int n = db_exec(r, transition_sql, 7, p);

	if (n > 0)
		orc_log(to[0] == 'f' ? ORC_LOG_WARN : ORC_LOG_INFO, "sandbox state changed",
			"sandbox_id", id, "from", from, "to", to, "message", message, NULL);
	return n;
}

static int transition(struct rec *r, const char *id, const char *from, const char *to,
		      const char *message, const char *handle, const char *address)
{
	return transition_kind(r, id, from, to, message, handle, address, NULL);
}

static void collect_notifies(struct rec *r)
{
	PGnotify *n;

	if (!r->db)
		return;
	if (!PQconsumeInput(r->db)) {
		orc_log(ORC_LOG_WARN, "database connection lost", "error", PQerrorMessage(r->db), NULL);
		db_drop(r);
		return;
	}
	while ((n = PQnotifies(r->db)) != NULL) {
		if (r->notified.n >= MAX_NOTIFIED)
			r->overflow = 1;
		else if (n->extra && orc_is_dns_label(n->extra))
			ctl_strv_push(&r->notified, n->extra);
		PQfreemem(n);
	}
}

/* ---- waiters ------------------------------------------------------------- */

static struct waiter *waiter_find(struct rec *r, const char *id)
{
	size_t i;

	for (i = 0; i < r->nw; i++)
		if (!strcmp(r->w[i].id, id))
			return &r->w[i];
	return NULL;
}

static void waiter_add(struct rec *r, const struct row *row, const char *handle, const char *address,
		       int watched)
{
	struct waiter *w;

	if (r->nw == r->aw) {
		r->aw = r->aw ? orc_mul_size(r->aw, 2) : 16;
		r->w = xrealloc(r->w, orc_mul_size(r->aw, sizeof(*r->w)));
	}
	w = &r->w[r->nw++];
	w->id = xstrdup(row->id);
	w->token = xstrdup(row->token);
	w->handle = xstrdup(handle);
	w->address = address ? xstrdup(address) : NULL;
	w->note = NULL;
	w->deadline = row->deadline;
	w->timeout_s = row->timeout_s;
	w->launched_ms = orc_mono_ms();
	w->poked_ms = 0;
	w->watched = watched && r->drv->ops->events_fd && r->drv->ops->events_fd(r->drv) >= 0;
	/* The agent needs a moment; with hints, polling is only the fallback. */
	w->next_check_ms = w->launched_ms + (w->watched ? FALLBACK_CHECK_MS : 2);
}

static void waiter_remove(struct rec *r, struct waiter *w)
{
	size_t i = (size_t)(w - r->w);

	if (w->watched && r->drv->ops->unwatch)
		r->drv->ops->unwatch(r->drv, w->id);
	free(w->id);
	free(w->token);
	free(w->address);
	free(w->handle);
	free(w->note);
	r->w[i] = r->w[--r->nw];
}

/* ---- actions --------------------------------------------------------------- */

/* Mark a row failed (if still in `from`) and remove what is left of it. */
static void fail_sandbox(struct rec *r, const char *id, const char *from, const char *msg,
			 const char *handle)
{
	char *why;

	if (r->drv->ops->diagnose && (why = r->drv->ops->diagnose(r->drv, id)) != NULL) {
		orc_log(ORC_LOG_INFO, "sandbox log tail", "sandbox_id", id, "line", why, NULL);
		free(why);
	}
	transition(r, id, from, "failed", msg, NULL, NULL);
	if (r->drv->ops->destroy(r->drv, id, handle) < 0)
		orc_log(ORC_LOG_WARN, "cleanup of a failed sandbox incomplete; retried by the sweep",
			"sandbox_id", id, NULL);
}

static void launch(struct rec *r, const struct row *row)
{
	struct ctl_sandbox sb = CTL_SANDBOX_INIT;
	const char *p[3];
	char *msg, ms[32];
	int64_t t0;
	int err, n;

	if (waiter_find(r, row->id))
		return;  /* launched already; the health round decides */
	if (orc_now() > row->deadline) {
		msg = xasprintf("sandbox did not become ready within %d seconds", row->timeout_s);
		fail_sandbox(r, row->id, "pending", msg, row->handle);
		free(msg);
		return;
	}
	if (row->handle && r->drv->ops->status) {
		/* Launched by an earlier controller: adopt; status() decides. */
		orc_log(ORC_LOG_INFO, "adopted a pending sandbox", "sandbox_id", row->id,
			"handle", row->handle, NULL);
		waiter_add(r, row, row->handle, NULL, 1);
		return;
	}
	if (row->handle) {
		/* Launched by an earlier controller: adopt, never relaunch. */
		if (r->drv->ops->alive(r->drv, row->id, row->handle)) {
			char *addr = r->drv->ops->agent_address(r->drv, row->id);
			orc_log(ORC_LOG_INFO, "adopted a pending sandbox", "sandbox_id", row->id,
				"handle", row->handle, NULL);
			waiter_add(r, row, row->handle, addr, 0);
			free(addr);
		} else {
			fail_sandbox(r, row->id, "pending",
				     "sandbox process exited before it became ready", row->handle);
		}
		return;
	}
	sb.id = xstrdup(row->id);
	sb.image = xstrdup(row->image);
	sb.token = xstrdup(row->token);
	sb.block_network = row->block_network;
	sb.cpu_millis = row->cpu_millis;
	sb.memory_bytes = row->memory_bytes;
	sb.ttl_left_s = row->ttl_left_s > 0 ? row->ttl_left_s : 1;
	t0 = orc_mono_ms();
	if ((err = r->drv->ops->create(r->drv, &sb)) < 0) {
		fail_sandbox(r, row->id, "pending", sb.error ? sb.error : "launching the sandbox failed",
			     NULL);
		goto done;
	}
	p[0] = sb.id;
	p[1] = sb.handle;
	p[2] = sb.address;
	n = db_exec(r, record_handle_sql, 3, p);
	if (n == 1) {
		snprintf(ms, sizeof(ms), "%lld", (long long)(orc_mono_ms() - t0));
		orc_log(ORC_LOG_DEBUG, "sandbox launched", "sandbox_id", sb.id, "handle", sb.handle,
			"create_ms", ms, NULL);
		waiter_add(r, row, sb.handle, sb.address, 1);
	} else if (n == 0) {
		/* Deleted meanwhile: its notification brings it back as 'deleting'. */
		orc_log(ORC_LOG_INFO, "sandbox row changed during launch", "sandbox_id", sb.id, NULL);
	} else {
		/* Unrecorded; the orphan sweep or the next pass (adopting it from
		 * its handle file) sorts it out. */
		orc_log(ORC_LOG_WARN, "could not record a launched sandbox", "sandbox_id", sb.id, NULL);
	}
done:
	ctl_sandbox_release(&sb);
}

static void delete(struct rec *r, const struct row *row)
{
	struct waiter *w = waiter_find(r, row->id);

	if (w)
		waiter_remove(r, w);
	if (r->drv->ops->destroy(r->drv, row->id, row->handle) < 0) {
		orc_log(ORC_LOG_WARN, "deleting sandbox failed; retrying on the next sweep",
			"sandbox_id", row->id, NULL);
		return;
	}
	transition(r, row->id, "deleting", "deleted", NULL, NULL, NULL);
}

/*
 * TTL, idle timeout or the heartbeat rule ran out: 'deleting' with the
 * reason (event sandbox.expired), then torn down by this same pass.
 */
static void expire(struct rec *r, struct row *row)
{
	struct waiter *w;

	if (transition_kind(r, row->id, row->state, "deleting", row->expired, NULL, NULL,
			    "sandbox.expired") <= 0)
		return;
	if ((w = waiter_find(r, row->id)) != NULL)
		waiter_remove(r, w);
	free(row->state);
	row->state = xstrdup("deleting");
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
			fail_sandbox(r, row->id, "ready", msg, row->handle);
			free(msg);
		}
		ctl_sb_status_release(&st);
		return;
	}
	if (r->drv->ops->alive(r->drv, row->id, row->handle))
		return;
	fail_sandbox(r, row->id, "ready", "sandbox process exited", row->handle);
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
		if (row_is_live(rows, n, ids[i]) || waiter_find(r, ids[i]))
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

static void rows_free(struct row *rows, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		free(rows[i].id);
		free(rows[i].state);
		free(rows[i].image);
		free(rows[i].token);
		free(rows[i].handle);
		free(rows[i].expired);
	}
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
			db_drop(r);
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
	struct row *rows = NULL;
	size_t n = 0, i;
	int64_t t0 = orc_mono_ms();
	char ms[32], cnt[32];
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
	/* Then launch: creation latency is what users wait on. */
	for (i = 0; i < n; i++)
		if (!strcmp(rows[i].state, "pending"))
			launch(r, &rows[i]);
	for (i = 0; i < n; i++)
		if (!strcmp(rows[i].state, "deleting"))
			delete(r, &rows[i]);
	for (i = 0; i < n; i++)
		if (!strcmp(rows[i].state, "ready"))
			check_ready(r, &rows[i]);
	if (full)
		remove_orphans(r, rows, n);
	for (i = 0; full && i < n; i++)
		ctl_metrics_state_seen(rows[i].state);
	ctl_metrics_pass(full, orc_mono_ms() - t0);
	if (orc_log_enabled(ORC_LOG_DEBUG)) {
		snprintf(ms, sizeof(ms), "%lld", (long long)(orc_mono_ms() - t0));
		snprintf(cnt, sizeof(cnt), "%zu", n);
		orc_log(ORC_LOG_DEBUG, full ? "sweep done" : "pass done", "rows", cnt, "ms", ms, NULL);
	}
	rows_free(rows, n);
}

/*
 * Ask the driver where waiter w stands (drivers with a status op): 1 when
 * its agent should be asked now, 0 when not yet, -1 when it failed (the
 * row is failed; the caller removes w). A new pending note goes on the
 * row once per change.
 */
static int waiter_status(struct rec *r, struct waiter *w)
{
	struct ctl_sb_status st = CTL_SB_STATUS_INIT;
	const char *p[2];
	int ret = 0;

	if (r->drv->ops->status(r->drv, &st, w->id, w->handle) < 0)
		return 0;
	if (st.state == CTL_SB_FAILED) {
		fail_sandbox(r, w->id, "pending", st.message ? st.message : "the sandbox failed to start",
			     w->handle);
		ret = -1;
		goto done;
	}
	if (st.address && (!w->address || strcmp(w->address, st.address))) {
		free(w->address);
		w->address = st.address;
		st.address = NULL;
	}
	if (st.state == CTL_SB_PENDING && st.message && (!w->note || strcmp(w->note, st.message))) {
		p[0] = w->id;
		p[1] = st.message;
		if (db_exec(r, pending_note_sql, 2, p) >= 0) {
			free(w->note);
			w->note = st.message;
			st.message = NULL;
		}
	}
	ret = st.state == CTL_SB_READY && w->address ? 1 : 0;
done:
	ctl_sb_status_release(&st);
	return ret;
}

/* Ask every due waiter's agent for /health. */
static void health_round(struct rec *r)
{
	struct orc_buf body = ORC_BUF_INIT;
	struct orc_agent_req req;
	struct waiter *w;
	char *msg, ms[32];
	int64_t now;
	long status;
	size_t i = 0;
	int err;

	while (i < r->nw) {
		w = &r->w[i];
		if (w->next_check_ms > orc_mono_ms()) {
			i++;
			continue;
		}
		if (orc_now() > w->deadline) {
			msg = xasprintf("sandbox did not become ready within %d seconds%s%.400s",
					w->timeout_s, w->note ? ": " : "", w->note ? w->note : "");
			fail_sandbox(r, w->id, "pending", msg, w->handle);
			free(msg);
			waiter_remove(r, w);
			continue;
		}
		if (r->drv->ops->status && (err = waiter_status(r, w)) <= 0) {
			if (err < 0) {
				waiter_remove(r, w);
				continue;
			}
			/* Not up yet: the driver pokes on a change; look again now and
			 * then for what changes without an event (timeouts). */
			w->next_check_ms = orc_mono_ms() + FALLBACK_CHECK_MS;
			i++;
			continue;
		}
		orc_buf_init(&body, 4096);
		memset(&req, 0, sizeof(req));
		req.address = w->address;
		req.token = w->token;
		req.method = "GET";
		req.path = "/health";
		req.timeout_ms = r->cfg->health_timeout_ms;
		status = 0;
		err = orc_agent_call(&body, &status, &req);
		orc_buf_release(&body);
		if (err == 0 && status == 200) {
			if (r->drv->ops->seal)
				r->drv->ops->seal(r->drv, w->id);
			snprintf(ms, sizeof(ms), "%lld", (long long)(orc_mono_ms() - w->launched_ms));
			if (transition(r, w->id, "pending", "ready", NULL, w->handle, w->address) > 0) {
				orc_log(ORC_LOG_INFO, "sandbox ready", "sandbox_id", w->id,
					"ms_since_launch", ms, NULL);
				ctl_metrics_ready(w->deadline - w->timeout_s, w->launched_ms);
				if (w->note) {   /* a pending note is history now */
					const char *p[2] = { w->id, w->note };
					db_exec(r, clear_note_sql, 2, p);
				}
			}
			waiter_remove(r, w);
			continue;
		}
		if (err == 0 && status == 401)
			orc_log(ORC_LOG_WARN, "agent rejected the sandbox token", "sandbox_id", w->id, NULL);
		if (!r->drv->ops->status && !r->drv->ops->alive(r->drv, w->id, w->handle)) {
			char *why = r->drv->ops->diagnose ? r->drv->ops->diagnose(r->drv, w->id) : NULL;
			msg = xasprintf("sandbox process exited before it became ready%s%.200s",
					why ? ": " : "", why ? why : "");
			fail_sandbox(r, w->id, "pending", msg, w->handle);
			free(msg);
			free(why);
			waiter_remove(r, w);
			continue;
		}
		/* Just hinted (socket bound, maybe not yet listening) or no hints
		 * and young: look again soon; otherwise fall back to slow polling. */
		now = orc_mono_ms();
		if (w->watched)
			w->next_check_ms = now + (w->poked_ms && now - w->poked_ms < 100 ? 5 : FALLBACK_CHECK_MS);
		else
			w->next_check_ms = now + (now - w->launched_ms < 300 ? 5 : r->cfg->health_interval_ms);
		i++;
	}
}

/* The driver says id's agent may be up: check it now. */
static void poke(const char *id, void *arg)
{
	struct rec *r = arg;
	struct waiter *w = waiter_find(r, id);

	if (w) {
		w->poked_ms = orc_mono_ms();
		w->next_check_ms = w->poked_ms;
	}
}

static int64_t next_wakeup(const struct rec *r)
{
	int64_t t = r->next_sweep_ms;
	size_t i;

	for (i = 0; i < r->nw; i++)
		if (r->w[i].next_check_ms < t)
			t = r->w[i].next_check_ms;
	if (r->notified.n || r->overflow)
		t = 0;
	return t;
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
	char sb[24], jobs[24], ev[24];

	r->next_prune_ms = now + PRUNE_INTERVAL_MS;
	if (orc_prune_opts_from_env(&o) < 0)
		return;
	o.max_batches = PRUNE_MAX_BATCHES;
	if (orc_prune(&res, r->db, &o) < 0) {
		orc_log(ORC_LOG_WARN, "retention pruning failed; retried on the next tick", NULL);
		return;
	}
	if (!res.sandboxes && !res.jobs && !res.events)
		return;
	snprintf(sb, sizeof(sb), "%lld", (long long)res.sandboxes);
	snprintf(jobs, sizeof(jobs), "%lld", (long long)res.jobs);
	snprintf(ev, sizeof(ev), "%lld", (long long)res.events);
	orc_log(ORC_LOG_INFO, "pruned old deleted sandboxes", "sandboxes", sb, "jobs", jobs,
		"events", ev, "more", res.more ? "true" : "false", NULL);
}

int ctl_reconcile_run(const struct ctl_config *cfg, struct ctl_driver *driver, PGconn *leader)
{
	struct rec r;
	struct pollfd pfd[3];
	int64_t now, wake, last_connect = 0;
	unsigned nfds;
	int err = 0, evfd;
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
			if (db_open(&r) < 0)
				orc_log(ORC_LOG_WARN, "database unavailable; retrying every second", NULL);
		}
		collect_notifies(&r);
		if (r.db && now >= r.next_sweep_ms) {
			if ((err = ctl_leader_check(leader, 1)) < 0)
				break;
			r.next_sweep_ms = now + cfg->sweep_interval_ms;
			pass(&r, 1);
			if (now >= r.next_prune_ms)
				prune_tick(&r, now);
		} else if (r.db && r.overflow) {
			r.next_sweep_ms = 0;
			continue;
		} else if (r.db && r.notified.n) {
			pass(&r, 0);
		}
		if (driver->ops->drain)
			driver->ops->drain(driver, poke, &r);
		if (r.db)
			health_round(&r);
		collect_notifies(&r);

		now = orc_mono_ms();
		wake = r.db ? next_wakeup(&r) : now + RECONNECT_MS;
		nfds = 0;
		pfd[nfds++] = (struct pollfd){ PQsocket(leader), POLLIN, 0 };
		if (r.db)
			pfd[nfds++] = (struct pollfd){ PQsocket(r.db), POLLIN, 0 };
		evfd = driver->ops->events_fd ? driver->ops->events_fd(driver) : -1;
		if (evfd >= 0 && r.nw)
			pfd[nfds++] = (struct pollfd){ evfd, POLLIN, 0 };
		if (wake > now && ctl_wait(pfd, nfds, wake - now) > 0 && (pfd[0].revents & (POLLIN | POLLHUP | POLLERR))) {
			if ((err = ctl_leader_check(leader, 0)) < 0)
				break;
		}
	}
	for (i = r.nw; i > 0; i--)
		waiter_remove(&r, &r.w[i - 1]);
	free(r.w);
	ctl_strv_release(&r.notified);
	db_drop(&r);
	return ctl_stopping && err == 0 ? 0 : err;
}
