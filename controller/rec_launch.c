/*
 * Launching the pending rows of a pass, in batches.
 *
 * Each launch is a driver create; their handles and addresses are then
 * recorded on the rows with one statement (one commit) per batch, and the
 * launched sandboxes join the waiters. A pass launches at most
 * REC_LAUNCH_BATCH sandboxes and hands the rest to the next pass, so a
 * burst of creates alternates with health rounds: the first sandboxes
 * become ready while later ones are still being launched.
 *
 * A driver may launch off the loop (create() answers CTL_CREATE_RUNNING:
 * the local driver's forks, restored and started in helper processes):
 * such a row waits in r->starting, with a copy of its row, and
 * rec_launch_poll() asks the driver again whenever its jobs_fd wakes the
 * loop; the launches that ended are recorded as one batch.
 *
 * Recording is only an optimisation for adoption: a launched sandbox whose
 * handle never reached its row (the controller died, the database was
 * away) is adopted from what the driver keeps on the host by the next pass
 * that sees the row pending.
 */
#include "rec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "strutil.h"
#include "xalloc.h"

static const char record_handles_sql[] =
	"UPDATE sandboxes s SET driver_handle = v.handle, agent_address = v.address"
	" FROM unnest($1::text[], $2::text[], $3::text[]) AS v(id, handle, address)"
	" WHERE s.id = v.id AND s.state = 'pending'"
	" RETURNING s.id";

/* A launch off the loop: its row (copied: it outlives the pass) and the
 * request the driver answers when asked again. */
struct rec_starting {
	struct row row;
	struct ctl_sandbox sb;
	int64_t t0;
};

static struct rec_starting *starting_find(struct rec *r, const char *id, size_t *at)
{
	for (size_t i = 0; i < r->nstarting; i++)
		if (!strcmp(r->starting[i]->row.id, id)) {
			if (at)
				*at = i;
			return r->starting[i];
		}
	return NULL;
}

static char *dup_opt(const char *s)
{
	return s ? xstrdup(s) : NULL;
}

/* Takes sb's strings. */
static void starting_add(struct rec *r, const struct row *row, struct ctl_sandbox *sb, int64_t t0)
{
	struct rec_starting *s = xcalloc(1, sizeof(*s));

	s->row = *row;
	s->row.id = xstrdup(row->id);
	s->row.state = xstrdup(row->state);
	s->row.image = xstrdup(row->image);
	s->row.token = xstrdup(row->token);
	s->row.handle = dup_opt(row->handle);
	s->row.expired = dup_opt(row->expired);
	s->row.forked_from = dup_opt(row->forked_from);
	s->sb = *sb;
	*sb = (struct ctl_sandbox)CTL_SANDBOX_INIT;
	s->t0 = t0;
	if (r->nstarting == r->astarting) {
		r->astarting = r->astarting ? orc_mul_size(r->astarting, 2) : 16;
		r->starting = xrealloc(r->starting, orc_mul_size(r->astarting, sizeof(*r->starting)));
	}
	r->starting[r->nstarting++] = s;
}

static void starting_free(struct rec_starting *s)
{
	rec_row_release(&s->row);
	ctl_sandbox_release(&s->sb);
	free(s);
}

static void batch_add(struct rec_launch_batch *b, const struct row *row, const char *handle,
		      const char *address, int64_t create_ms)
{
	struct rec_launched *l;

	if (b->n == b->alloc) {
		b->alloc = b->alloc ? orc_mul_size(b->alloc, 2) : 16;
		b->v = xrealloc(b->v, orc_mul_size(b->alloc, sizeof(*b->v)));
	}
	l = &b->v[b->n++];
	l->row = row;
	l->handle = xstrdup(handle);
	l->address = address ? xstrdup(address) : NULL;
	l->create_ms = create_ms;
	l->recorded = 0;
	l->off_loop = 0;
}

static void batch_release(struct rec_launch_batch *b)
{
	for (size_t i = 0; i < b->n; i++) {
		free(b->v[i].handle);
		free(b->v[i].address);
	}
	free(b->v);
	memset(b, 0, sizeof(*b));
}

static struct rec_launched *batch_find(struct rec_launch_batch *b, const char *id)
{
	for (size_t i = 0; i < b->n; i++)
		if (!strcmp(b->v[i].row->id, id))
			return &b->v[i];
	return NULL;
}

void rec_launch_batch_commit(struct rec *r, struct rec_launch_batch *b)
{
	struct rec_handles h = REC_HANDLES_INIT;
	struct rec_launched *l;
	PGresult *res = NULL;
	size_t i;

	if (!b->n)
		return;
	for (i = 0; i < b->n; i++)
		rec_handles_add(&h, b->v[i].row->id, b->v[i].handle, b->v[i].address);
	if (rec_handles_query(r, &res, record_handles_sql, &h) < 0) {
		/* Unrecorded; the next pass adopts them from the host. */
		orc_log(ORC_LOG_WARN, "could not record launched sandboxes", NULL);
		goto done;
	}
	for (int row = 0; row < PQntuples(res); row++)
		if ((l = batch_find(b, PQgetvalue(res, row, 0))) != NULL)
			l->recorded = 1;
	for (i = 0; i < b->n; i++) {
		l = &b->v[i];
		if (!l->recorded) {
			/* Deleted meanwhile: its notification brings it back as 'deleting'. */
			orc_log(ORC_LOG_INFO, "sandbox row changed during launch", "sandbox_id", l->row->id, NULL);
			continue;
		}
		orc_log(ORC_LOG_DEBUG, "sandbox launched", "sandbox_id", l->row->id, "handle", l->handle,
			ORC_LOG_INT("create_ms", l->create_ms), NULL);
		rec_waiter_add(r, l->row, l->handle, l->address, 1);
		if (l->off_loop)
			r->w[r->nw - 1].next_check_ms = orc_mono_ms();
	}
done:
	PQclear(res);
	rec_handles_release(&h);
	batch_release(b);
}

int rec_launch(struct rec *r, struct rec_launch_batch *b, const struct row *row)
{
	struct ctl_sandbox sb = CTL_SANDBOX_INIT;
	char *msg;
	int64_t t0;
	int launched = 0, err;

	if (rec_waiter_find(r, row->id) || batch_find(b, row->id))
		return 0;  /* launched already; the health round decides */
	if (starting_find(r, row->id, NULL))
		return 0;  /* launching off the loop: rec_launch_poll() */
	if (orc_now() > row->deadline) {
		msg = xasprintf("sandbox did not become ready within %d seconds", row->timeout_s);
		rec_fail_sandbox(r, row->id, "pending", msg, row->handle);
		free(msg);
		return 0;
	}
	if (row->handle && r->drv->ops->status) {
		/* Launched by an earlier controller: adopt; status() decides. */
		orc_log(ORC_LOG_INFO, "adopted a pending sandbox", "sandbox_id", row->id,
			"handle", row->handle, NULL);
		rec_waiter_add(r, row, row->handle, NULL, 1);
		return 0;
	}
	if (row->handle) {
		/* Launched by an earlier controller: adopt, never relaunch. */
		if (r->drv->ops->alive(r->drv, row->id, row->handle)) {
			char *addr = r->drv->ops->agent_address(r->drv, row->id);
			orc_log(ORC_LOG_INFO, "adopted a pending sandbox", "sandbox_id", row->id,
				"handle", row->handle, NULL);
			rec_waiter_add(r, row, row->handle, addr, 0);
			free(addr);
		} else {
			rec_fail_sandbox(r, row->id, "pending",
				     "sandbox process exited before it became ready", row->handle);
		}
		return 0;
	}
	sb.id = xstrdup(row->id);
	sb.image = xstrdup(row->image);
	sb.token = xstrdup(row->token);
	sb.block_network = row->block_network;
	sb.tools = row->tools;
	sb.cpu_millis = row->cpu_millis;
	sb.memory_bytes = row->memory_bytes;
	sb.disk_bytes = row->disk_bytes;
	sb.ttl_left_s = row->ttl_left_s > 0 ? row->ttl_left_s : 1;
	sb.restore = row->forked_from ? xstrdup(row->forked_from) : NULL;
	t0 = orc_mono_ms();
	err = r->drv->ops->create(r->drv, &sb);
	if (err == CTL_CREATE_RUNNING) {
		starting_add(r, row, &sb, t0);
		goto done;
	}
	if (err < 0) {
		rec_fail_sandbox(r, row->id, "pending", sb.error ? sb.error : "launching the sandbox failed",
			     NULL);
		goto done;
	}
	batch_add(b, row, sb.handle, sb.address, orc_mono_ms() - t0);
	launched = 1;
done:
	ctl_sandbox_release(&sb);
	return launched;
}

/* One launch off the loop asked again: CTL_CREATE_RUNNING, or it ended
 * (then it is failed here, or joins b). */
static int starting_poll(struct rec *r, struct rec_launch_batch *b, struct rec_starting *s)
{
	char *msg;
	int err;

	if (orc_now() > s->row.deadline) {
		msg = xasprintf("sandbox did not become ready within %d seconds", s->row.timeout_s);
		/* destroy() stops its helper */
		rec_fail_sandbox(r, s->row.id, "pending", msg, NULL);
		free(msg);
		return 0;
	}
	err = r->drv->ops->create(r->drv, &s->sb);
	if (err == CTL_CREATE_RUNNING)
		return err;
	if (err < 0) {
		rec_fail_sandbox(r, s->row.id, "pending",
				 s->sb.error ? s->sb.error : "launching the sandbox failed", NULL);
		return 0;
	}
	batch_add(b, &s->row, s->sb.handle, s->sb.address, orc_mono_ms() - s->t0);
	b->v[b->n - 1].off_loop = 1;
	return 0;
}

void rec_launch_poll(struct rec *r)
{
	struct rec_launch_batch b = REC_LAUNCH_BATCH_INIT;
	struct rec_starting **ended;
	size_t nended = 0, i, round;

	if (!r->nstarting)
		return;
	ended = xcalloc(r->nstarting, sizeof(*ended));
	/* Twice: a launch that ended frees a helper for one still queued. */
	for (round = 0; round < 2; round++) {
		for (i = 0; i < r->nstarting;) {
			struct rec_starting *s = r->starting[i];
			if (starting_poll(r, &b, s) == CTL_CREATE_RUNNING) {
				i++;
				continue;
			}
			r->starting[i] = r->starting[--r->nstarting];
			ended[nended++] = s;
		}
	}
	/* b points into the ended rows: free them after */
	rec_launch_batch_commit(r, &b);
	for (i = 0; i < nended; i++)
		starting_free(ended[i]);
	free(ended);
}

void rec_launch_forget(struct rec *r, const char *id)
{
	struct rec_starting *s;
	size_t at;

	if (!(s = starting_find(r, id, &at)))
		return;
	r->starting[at] = r->starting[--r->nstarting];
	starting_free(s);
}

void rec_launch_release(struct rec *r)
{
	while (r->nstarting)
		starting_free(r->starting[--r->nstarting]);
	free(r->starting);
	r->starting = NULL;
	r->astarting = 0;
}
