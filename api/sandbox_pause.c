/*
 * POST /sandboxes/{id}/pause and /resume (docs/checkpoints.md).
 *
 * The api records what the user wants (sandboxes.pause_desired) and waits
 * for the controller to have frozen or thawed the sandbox's processes with
 * the cgroup freezer (sandboxes.paused). A paused sandbox keeps its memory
 * and uses no CPU; its agent is frozen too, so exec and file calls on it
 * are 409 until it is resumed. TTL keeps counting while paused; the idle
 * timeout counts from the last activity, and pause/resume are activity.
 * When the controller cannot freeze (no freezer on the host) it puts
 * pause_desired back and the request fails with 409.
 */
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "checkpoint.h"
#include "err.h"
#include "json.h"
#include "log.h"
#include "strutil.h"
#include "xalloc.h"

#define PAUSE_WAIT_S 60

static int set_desired(PGresult **out, struct api_req *r, int pause)
{
	char tenant[24];
	const char *params[5] = { r->id, tenant, pause ? "true" : "false", r->key_id, r->request_id };

	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	return orc_pg_pool_query_one(out, &api_server.db,
		"WITH u AS (UPDATE sandboxes SET pause_desired = $3::boolean, last_activity_at = now()"
		" WHERE id = $1 AND tenant_id = $2::bigint AND state NOT IN ('deleting', 'deleted')"
		" RETURNING id, tenant_id, state),"
		" e AS (INSERT INTO events (sandbox_id, tenant_id, kind, api_key_id, request_id)"
		" SELECT id, tenant_id, CASE WHEN $3::boolean THEN 'sandbox.pause' ELSE 'sandbox.resume'"
		" END, $4::bigint, nullif($5, '') FROM u WHERE state = 'ready')"
		" SELECT state FROM u",
		5, params);
}

/* 1 when done, 0 when the controller gave up (desired put back), or err. */
static int wait_applied(PGresult **out, struct api_req *r, int pause)
{
	char tenant[24], sql[1024];
	const char *params[2] = { r->id, tenant };
	int64_t deadline = orc_mono_ms() + PAUSE_WAIT_S * 1000;
	struct api_waiter w;
	PGresult *res = NULL;
	int err, desired, paused;

	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	snprintf(sql, sizeof(sql), "SELECT %s FROM sandboxes s JOIN tenants t ON t.id = s.tenant_id"
		 " WHERE s.id = $1 AND s.tenant_id = $2", api_sandbox_cols);
	api_waiter_init(&w, API_CHAN_SANDBOX, r->id);
	for (;;) {
		if ((err = orc_pg_pool_query_one(&res, &api_server.db, sql, 2, params)) < 0)
			return err;
		desired = !strcmp(PQgetvalue(res, 0, PQfnumber(res, "pause_desired")), "t");
		paused = !strcmp(PQgetvalue(res, 0, PQfnumber(res, "paused")), "t");
		if (strcmp(PQgetvalue(res, 0, API_SANDBOX_COL_STATE), "ready") || paused == pause ||
		    desired != pause || orc_mono_ms() >= deadline) {
			*out = res;
			return paused == pause ? 1 : desired != pause ? 0 : ORC_ETIMEOUT;
		}
		PQclear(res);
		api_waiter_wait(&w, deadline);
	}
}

/* Pause or resume r->id; reply with the sandbox when reply is set, else
 * return 0 without replying (errors are always replied). */
static int apply(struct api_req *r, int pause, int reply)
{
	const char *what = pause ? "pause" : "resume";
	PGresult *res = NULL;
	int err;

	if ((err = api_checkpoint_supported(r)) < 0)
		return err;
	if (!strcmp(api_server.driver, "kubernetes"))
		return api_reply_error(r, ORC_EINVALID, "%s is not supported by the kubernetes driver: "
				       "no cgroup freezer of a pod is reachable through the Kubernetes "
				       "API; see docs/checkpoints.md", what);
	if ((err = set_desired(&res, r, pause)) < 0) {
		if (err == ORC_ENOTFOUND)
			return api_reply_error(r, err, "sandbox %s not found", r->id);
		return api_reply_error(r, err, "cannot %s sandbox %s", what, r->id);
	}
	if (strcmp(PQgetvalue(res, 0, 0), "ready")) {
		err = api_reply_error(r, API_ENOTREADY, "sandbox %s is %s; only a ready sandbox can be "
				      "%sd", r->id, PQgetvalue(res, 0, 0), what);
		PQclear(res);
		return err;
	}
	PQclear(res);
	res = NULL;
	err = wait_applied(&res, r, pause);
	if (res)
		api_own_pg(r, res);
	if (err == ORC_ETIMEOUT)
		return api_reply_error(r, err, "sandbox %s was not %sd after %d s; the controller may be "
				       "down", r->id, what, PAUSE_WAIT_S);
	if (err < 0)
		return api_reply_error(r, err, "cannot read sandbox %s", r->id);
	if (strcmp(PQgetvalue(res, 0, API_SANDBOX_COL_STATE), "ready"))
		return api_reply_error(r, API_ENOTREADY, "sandbox %s is no longer ready (status %s)",
				       r->id, PQgetvalue(res, 0, API_SANDBOX_COL_STATE));
	if (err == 0)
		return api_reply_error(r, ORC_ECONFLICT, "the controller could not %s sandbox %s (no "
				       "cgroup freezer for it on this host?); see docs/checkpoints.md",
				       what, r->id);
	orc_log(ORC_LOG_INFO, pause ? "sandbox paused" : "sandbox resumed", "sandbox_id", r->id, NULL);
	if (!reply)
		return 0;
	return api_reply_json(r, 200, api_own_json(r, api_sandbox_view(res, 0)));
}

int api_sandbox_pause(struct api_req *r)
{
	return apply(r, 1, 1);
}

int api_sandbox_resume(struct api_req *r)
{
	return apply(r, 0, 1);
}

int api_exec_resume(struct api_req *r, json_object *body)
{
	char tenant[24], msg[256];
	const char *params[2] = { r->id, tenant };
	PGresult *res = NULL;
	PGconn *db = NULL;
	int resume = 0, err, paused;

	if ((err = orc_json_get_bool(body, "resume", &resume, msg, sizeof(msg))) < 0)
		return api_reply_error(r, err, "%s", msg);
	if (!resume || strcmp(api_server.driver, "local"))
		return 0;
	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		return api_reply_error(r, err, "database unavailable");
	err = orc_pg_query(&res, db, "SELECT 1 FROM sandboxes WHERE id = $1 AND tenant_id = $2::bigint"
			   " AND state = 'ready' AND (paused OR pause_desired)", 2, params);
	orc_pg_pool_release(&api_server.db, db);
	if (err < 0)
		return api_reply_error(r, err, "cannot read sandbox %s", r->id);
	paused = PQntuples(res) == 1;
	PQclear(res);
	return paused ? apply(r, 0, 0) : 0;
}
