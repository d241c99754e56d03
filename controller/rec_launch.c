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
	int launched = 0;

	if (rec_waiter_find(r, row->id) || batch_find(b, row->id))
		return 0;  /* launched already; the health round decides */
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
	sb.ttl_left_s = row->ttl_left_s > 0 ? row->ttl_left_s : 1;
	sb.restore = row->forked_from ? xstrdup(row->forked_from) : NULL;
	t0 = orc_mono_ms();
	if (r->drv->ops->create(r->drv, &sb) < 0) {
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
