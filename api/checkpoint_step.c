/*
 * The checkpoint of step t of a sandbox's trajectory (docs/checkpoints.md,
 * issue 21): POST /sandboxes/{id}/fork {"step": t} forks from it.
 *
 * Every checkpoint records traj_step, the number of steps its sandbox's
 * trajectory had when it was written (sql/migrations/022_rollout_steps.sql),
 * so "the state after step t" is a ready checkpoint with traj_step = t; one
 * taken automatically after the step (kind 'step', its event a step: not
 * the end of a PTY session that followed it) is preferred, then the
 * latest. The sandbox may be deleted: its rows and checkpoints are kept.
 */
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "checkpoint.h"
#include "err.h"
#include "strutil.h"
#include "xalloc.h"

#define PENDING_WAIT_S 120

enum { S_STEPS, S_READY, S_PENDING, S_GONE, S_GONE_WHY, S_WITH };

static const char step_sql[] =
	"SELECT (SELECT count(*) FROM events e WHERE e.sandbox_id = s.id AND e.tenant_id = s.tenant_id"
	"  AND orchard_step_kind(e.kind)),"
	" (SELECT c.id FROM checkpoints c WHERE c.sandbox_id = s.id AND c.tenant_id = s.tenant_id"
	"  AND c.traj_step = $3::bigint AND c.state = 'ready'"
	"  ORDER BY c.kind = 'step' DESC, COALESCE((SELECT orchard_step_kind(e.kind) FROM events e"
	"   WHERE e.id = c.step_event_id), false) DESC, c.created_at DESC, c.id DESC LIMIT 1),"
	" (SELECT c.id FROM checkpoints c WHERE c.sandbox_id = s.id AND c.tenant_id = s.tenant_id"
	"  AND c.traj_step = $3::bigint AND c.state = 'pending' ORDER BY c.created_at DESC LIMIT 1),"
	" (SELECT c.id FROM checkpoints c WHERE c.sandbox_id = s.id AND c.tenant_id = s.tenant_id"
	"  AND c.traj_step = $3::bigint AND c.state IN ('deleting', 'deleted', 'failed')"
	"  ORDER BY c.created_at DESC LIMIT 1),"
	" (SELECT COALESCE(c.state_message, c.state) FROM checkpoints c WHERE c.sandbox_id = s.id"
	"  AND c.tenant_id = s.tenant_id AND c.traj_step = $3::bigint"
	"  AND c.state IN ('deleting', 'deleted', 'failed') ORDER BY c.created_at DESC LIMIT 1),"
	" (SELECT string_agg(DISTINCT c.traj_step::text, ', ') FROM checkpoints c"
	"  WHERE c.sandbox_id = s.id AND c.tenant_id = s.tenant_id AND c.state = 'ready')"
	" FROM sandboxes s WHERE s.id = $1 AND s.tenant_id = $2::bigint";

/* One look at step `step`: *res the row of step_sql (owned by r), or the
 * error replied. */
static int look(PGresult **res, struct api_req *r, const char *sandbox_id, int64_t step)
{
	char tenant[24], step_s[24];
	const char *params[3] = { sandbox_id, tenant, step_s };
	int err;

	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	snprintf(step_s, sizeof(step_s), "%lld", (long long)step);
	if ((err = orc_pg_pool_query_one(res, &api_server.db, step_sql, 3, params)) < 0) {
		if (err == ORC_ENOTFOUND)
			return api_reply_error(r, err, "sandbox %s not found", sandbox_id);
		return api_reply_error(r, err, "cannot read the checkpoints of sandbox %s", sandbox_id);
	}
	api_own_pg(r, *res);
	return 0;
}

int api_checkpoint_at_step(char **out, struct api_req *r, const char *sandbox_id, int64_t step)
{
	PGresult *res = NULL, *done = NULL;
	int64_t steps = 0;
	int err;

	if ((err = look(&res, r, sandbox_id, step)) < 0)
		return err;
	if (PQgetisnull(res, 0, S_READY) && !PQgetisnull(res, 0, S_PENDING)) {
		/* Just after the step: its checkpoint is being taken. */
		if (api_checkpoint_wait(&done, r->tenant_id, PQgetvalue(res, 0, S_PENDING),
					orc_mono_ms() + PENDING_WAIT_S * 1000) == 0)
			PQclear(done);
		if ((err = look(&res, r, sandbox_id, step)) < 0)
			return err;
	}
	if (orc_parse_i64(&steps, PQgetvalue(res, 0, S_STEPS), 0, INT64_MAX) < 0)
		steps = 0;
	if (!PQgetisnull(res, 0, S_READY)) {
		*out = PQgetvalue(res, 0, S_READY);
		return 0;
	}
	if (step > steps)
		return api_reply_error(r, ORC_EINVALID, "sandbox %s has %lld steps in its trajectory; "
				       "there is no step %lld", sandbox_id, (long long)steps,
				       (long long)step);
	if (!PQgetisnull(res, 0, S_PENDING))
		return api_reply_error(r, ORC_ECONFLICT, "the checkpoint of step %lld of sandbox %s (%s) "
				       "is still being taken; retry shortly", (long long)step, sandbox_id,
				       PQgetvalue(res, 0, S_PENDING));
	if (!PQgetisnull(res, 0, S_GONE))
		return api_reply_error(r, ORC_ECONFLICT, "the checkpoint of step %lld of sandbox %s (%s) "
				       "is no longer available: %s", (long long)step, sandbox_id,
				       PQgetvalue(res, 0, S_GONE), PQgetvalue(res, 0, S_GONE_WHY));
	return api_reply_error(r, ORC_ECONFLICT, "no checkpoint was taken at step %lld of sandbox %s "
			       "(ready checkpoints are at steps: %s); create the sandbox with "
			       "\"checkpoints\": \"every_step\" or checkpoint it after the step",
			       (long long)step, sandbox_id,
			       PQgetisnull(res, 0, S_WITH) ? "none" : PQgetvalue(res, 0, S_WITH));
}
