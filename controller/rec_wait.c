/*
 * Launched sandboxes waiting to become ready. Between passes their agents
 * are asked GET /health (short timeout) until they answer 200 -> 'ready',
 * their process dies or their pending timeout passes -> 'failed'. A driver
 * with a status op (kubernetes) is asked first, without waiting; one with
 * readiness hints (events_fd/drain) pokes a waiter to be checked at once,
 * and polling is only the fallback.
 */
#include "rec.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_client.h"
#include "ctl_metrics.h"
#include "err.h"
#include "log.h"
#include "strutil.h"
#include "xalloc.h"

#define FALLBACK_CHECK_MS 200     /* health polling of a sandbox whose driver hints */

/*
 * Every sandbox whose agent answered in one health round becomes ready in
 * one statement, so one commit: a burst of launches must not queue behind
 * a WAL flush per sandbox. Same effect per row as rec_transition(pending
 * -> ready): the pending note cleared, ready_at, handle and address, and a
 * sandbox.ready event; a row no longer pending (deleted meanwhile) is left.
 */
static const char ready_batch_sql[] =
	"WITH v AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) AS v(id, handle, address)),"
	" u AS ("
	"  UPDATE sandboxes s SET state = 'ready', state_message = NULL, ready_at = now(),"
	"   driver_handle = COALESCE(v.handle, s.driver_handle),"
	"   agent_address = COALESCE(v.address, s.agent_address)"
	"  FROM v WHERE s.id = v.id AND s.state = 'pending'"
	"  RETURNING s.id, s.tenant_id)"
	" INSERT INTO events (sandbox_id, tenant_id, kind, data)"
	" SELECT id, tenant_id, 'sandbox.ready', '{\"from\": \"pending\"}'::jsonb FROM u"
	" RETURNING sandbox_id";

/* Why a sandbox is still pending ($2); becoming ready clears it (rec_db.c). */
static const char pending_note_sql[] =
	"UPDATE sandboxes SET state_message = $2 WHERE id = $1 AND state = 'pending'";

struct waiter *rec_waiter_find(struct rec *r, const char *id)
{
	size_t i;

	for (i = 0; i < r->nw; i++)
		if (!strcmp(r->w[i].id, id))
			return &r->w[i];
	return NULL;
}

void rec_waiter_add(struct rec *r, const struct row *row, const char *handle, const char *address,
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
	w->ready = 0;
	w->restore = row->forked_from && r->drv->ops->restore_agent ? xstrdup(row->forked_from) : NULL;
	/* The agent needs a moment; with hints, polling is only the fallback. */
	w->next_check_ms = w->launched_ms + (w->watched ? FALLBACK_CHECK_MS : 2);
}

void rec_waiter_remove(struct rec *r, struct waiter *w)
{
	size_t i = (size_t)(w - r->w);

	if (w->watched && r->drv->ops->unwatch)
		r->drv->ops->unwatch(r->drv, w->id);
	free(w->id);
	free(w->token);
	free(w->address);
	free(w->handle);
	free(w->note);
	free(w->restore);
	r->w[i] = r->w[--r->nw];
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
		rec_fail_sandbox(r, w->id, "pending", st.message ? st.message : "the sandbox failed to start",
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
		if (rec_db_exec(r, pending_note_sql, 2, p) >= 0) {
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

static void log_ready(struct waiter *w)
{
	orc_log(ORC_LOG_INFO, "sandbox state changed", "sandbox_id", w->id, "from", "pending",
		"to", "ready", NULL);
	orc_log(ORC_LOG_INFO, "sandbox ready", "sandbox_id", w->id,
		ORC_LOG_INT("ms_since_launch", orc_mono_ms() - w->launched_ms), NULL);
	ctl_metrics_ready(w->deadline - w->timeout_s, w->launched_ms);
}

/* Commit the round's ready waiters (w->ready) and drop them from the list.
 * On a database error they are dropped all the same: the rows stay
 * pending with their handles, and the next sweep adopts them again. */
static void commit_ready(struct rec *r, size_t nready)
{
	struct rec_handles h = REC_HANDLES_INIT;
	PGresult *res = NULL;
	struct waiter *w;
	size_t i;

	if (!nready)
		return;
	for (i = 0; i < r->nw; i++)
		if (r->w[i].ready)
			rec_handles_add(&h, r->w[i].id, r->w[i].handle, r->w[i].address);
	if (rec_handles_query(r, &res, ready_batch_sql, &h) < 0) {
		orc_log(ORC_LOG_WARN, "recording ready sandboxes failed; the next sweep adopts them", NULL);
	} else {
		for (int row = 0; row < PQntuples(res); row++)
			if ((w = rec_waiter_find(r, PQgetvalue(res, row, 0))) != NULL)
				log_ready(w);
	}
	PQclear(res);
	for (i = r->nw; i > 0; i--)
		if (r->w[i - 1].ready)
			rec_waiter_remove(r, &r->w[i - 1]);
	rec_handles_release(&h);
}

/* Ask every due waiter's agent for /health. */
void rec_health_round(struct rec *r)
{
	struct orc_buf body = ORC_BUF_INIT;
	struct orc_agent_req req;
	struct waiter *w;
	char *msg;
	int64_t now;
	long status;
	size_t i = 0, nready = 0;
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
			rec_fail_sandbox(r, w->id, "pending", msg, w->handle);
			free(msg);
			rec_waiter_remove(r, w);
			continue;
		}
		if (r->drv->ops->status && (err = waiter_status(r, w)) <= 0) {
			if (err < 0) {
				rec_waiter_remove(r, w);
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
		if (err == 0 && status == 200 && w->restore && (err = rec_restore(r, w)) < 0) {
			if (err != ORC_EUNAVAIL) {
				rec_waiter_remove(r, w);
				continue;
			}
			status = 0;   /* look again next round */
		}
		if (err == 0 && status == 200) {
			if (r->drv->ops->seal)
				r->drv->ops->seal(r->drv, w->id);
			w->ready = 1;
			w->next_check_ms = INT64_MAX;
			nready++;
			i++;
			continue;
		}
		if (err == 0 && status == 401)
			orc_log(ORC_LOG_WARN, "agent rejected the sandbox token", "sandbox_id", w->id, NULL);
		if (!r->drv->ops->status && !r->drv->ops->alive(r->drv, w->id, w->handle)) {
			char *why = r->drv->ops->diagnose ? r->drv->ops->diagnose(r->drv, w->id) : NULL;
			msg = xasprintf("sandbox process exited before it became ready%s%.200s",
					why ? ": " : "", why ? why : "");
			rec_fail_sandbox(r, w->id, "pending", msg, w->handle);
			free(msg);
			free(why);
			rec_waiter_remove(r, w);
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
	commit_ready(r, nready);
}

/* The driver says id's agent may be up: check it now. */
void rec_poke(const char *id, void *arg)
{
	struct rec *r = arg;
	struct waiter *w = rec_waiter_find(r, id);

	if (w) {
		w->poked_ms = orc_mono_ms();
		w->next_check_ms = w->poked_ms;
	}
}

int64_t rec_next_wakeup(const struct rec *r)
{
	int64_t t = r->next_sweep_ms;
	size_t i;

	for (i = 0; i < r->nw; i++)
		if (r->w[i].next_check_ms < t)
			t = r->w[i].next_check_ms;
	if (r->notified.n || r->overflow || r->ckpt_ids.n)
		t = 0;   /* notified rows are acted on at once */
	/* a checkpoint pass is due (a copy runs off the loop: rec_checkpoint.c),
	 * or launches run off the loop (their timeouts; the wake-up is jobs_fd) */
	if ((r->ckpt_notified || r->nstarting) && t > orc_mono_ms() + CKPT_POLL_MS)
		t = orc_mono_ms() + CKPT_POLL_MS;
	return t;
}

