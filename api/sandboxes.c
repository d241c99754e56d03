/*
 * Sandbox routes other than create: get, list, wait, delete, heartbeat.
 * Every query is scoped to the caller's tenant; rows being deleted or
 * deleted are not found (another tenant's id is 404 too, never 403).
 */
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "err.h"
#include "json.h"
#include "log.h"
#include "strutil.h"
#include "xalloc.h"

#define WAIT_DEFAULT_S 3600
#define WAIT_MAX_S 3600

static void tenant_str(char out[24], const struct api_req *r)
{
	snprintf(out, 24, "%lld", (long long)r->tenant_id);
}

/* The caller's live sandbox r->id into *out (the caller PQclear()s it);
 * ORC_ENOTFOUND when there is none. */
static int sandbox_fetch(PGresult **out, struct api_req *r)
{
	char tenant[24], sql[1024];
	const char *params[2] = { r->id, tenant };
	PGresult *res = NULL;
	int err;

	tenant_str(tenant, r);
	snprintf(sql, sizeof(sql), "SELECT %s FROM sandboxes s JOIN tenants t ON t.id = s.tenant_id"
		 " WHERE s.id = $1 AND s.tenant_id = $2 AND s.state NOT IN ('deleting', 'deleted')",
		 api_sandbox_cols);
	if ((err = orc_pg_pool_query_one(&res, &api_server.db, sql, 2, params)) < 0)
		return err;
	*out = res;
	return 0;
}

int api_sandbox_rows(PGresult **out, PGconn *db, int64_t tenant_id, const char *sql, int nargs,
		     const char *const *args)
{
	char tenant[24];
	const char *params[API_SANDBOX_ROWS_ARGS + 1] = { tenant };
	PGconn *c = db;
	PGresult *res = NULL;
	int err, i;

	if (nargs < 0 || nargs > API_SANDBOX_ROWS_ARGS)
		return ORC_EINVALID;
	snprintf(tenant, sizeof(tenant), "%lld", (long long)tenant_id);
	for (i = 0; i < nargs; i++)
		params[i + 1] = args[i];
	if (!db && (err = orc_pg_pool_acquire(&api_server.db, &c)) < 0)
		return err;
	err = orc_pg_query(&res, c, sql, nargs + 1, params);
	if (!db)
		orc_pg_pool_release(&api_server.db, c);
	if (err < 0)
		return err;
	if (PQntuples(res) < 1) {
		PQclear(res);
		return ORC_ENOTFOUND;
	}
	*out = res;
	return 0;
}

static int reply_fetch_error(struct api_req *r, int err)
{
	if (err == ORC_ENOTFOUND)
		return api_reply_error(r, err, "sandbox %s not found", r->id);
	return api_reply_error(r, err, "cannot read sandbox %s", r->id);
}

int api_sandbox_get(struct api_req *r)
{
	PGresult *res;
	int err;

	if ((err = sandbox_fetch(&res, r)) < 0)
		return reply_fetch_error(r, err);
	api_own_pg(r, res);
	return api_reply_json(r, 200, api_own_json(r, api_sandbox_view(res, 0)));
}

/* ?timeout= seconds: default dflt, clamped to max; 0 checks once. */
int api_query_timeout(int64_t *out, struct api_req *r, int64_t dflt, int64_t max)
{
	const char *v = api_req_query(r, "timeout");
	double d;

	if (!v || !*v) {
		*out = dflt;
		return 0;
	}
	if (orc_parse_double(&d, v, 0, 1e9) < 0)
		return api_reply_error(r, ORC_EINVALID, "query parameter 'timeout' must be a "
				       "non-negative number of seconds");
	*out = d > (double)max ? max : (int64_t)(d + 0.999);
	return 0;
}

int api_sandbox_wait(struct api_req *r)
{
	struct api_waiter w;
	PGresult *res;
	int64_t timeout, deadline;
	int err;

	if ((err = api_query_timeout(&timeout, r, WAIT_DEFAULT_S, WAIT_MAX_S)) < 0)
		return err;
	deadline = orc_mono_ms() + timeout * 1000;
	api_waiter_init(&w, API_CHAN_SANDBOX, r->id);
	for (;;) {
		if ((err = sandbox_fetch(&res, r)) < 0)
			return reply_fetch_error(r, err);
		/* pending is the only state worth waiting in */
		if (strcmp(PQgetvalue(res, 0, API_SANDBOX_COL_STATE), "pending")) {
			api_own_pg(r, res);
			return api_reply_json(r, 200, api_own_json(r, api_sandbox_view(res, 0)));
		}
		PQclear(res);
		if (orc_mono_ms() >= deadline)
			return api_reply_error(r, ORC_ETIMEOUT, "sandbox %s was not ready after %lld s",
					       r->id, (long long)timeout);
		api_waiter_wait(&w, deadline);
	}
}

int api_sandbox_delete(struct api_req *r)
{
	char tenant[24];
	const char *params[4] = { r->id, tenant, r->key_id, r->request_id };
	json_object *o;
	PGconn *db = NULL;
	int err;

	tenant_str(tenant, r);
	if (!api_valid_id(r->id))
		goto deleted; /* cannot exist */
	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		return api_reply_error(r, err, "database unavailable");
	err = orc_pg_query(NULL, db,
		"WITH d AS (UPDATE sandboxes SET state = 'deleting', deleted_at = now()"
		" WHERE id = $1 AND tenant_id = $2 AND state NOT IN ('deleting', 'deleted')"
		" RETURNING id, tenant_id)"
		" INSERT INTO events (sandbox_id, tenant_id, kind, api_key_id, request_id)"
		" SELECT d.id, d.tenant_id, 'sandbox.delete', $3::bigint, nullif($4, '') FROM d",
		4, params);
	orc_pg_pool_release(&api_server.db, db);
	if (err < 0)
		return api_reply_error(r, err, "cannot delete sandbox %s", r->id);
deleted:
	/* Orchard answers 200 for unknown ids too: delete is idempotent. */
	o = api_own_json(r, json_object_new_object());
	json_object_object_add(o, "status", json_object_new_string("deleted"));
	json_object_object_add(o, "sandbox_id", orc_json_new_text(r->id, strlen(r->id)));
	return api_reply_json(r, 200, o);
}

int api_sandbox_heartbeat(struct api_req *r)
{
	char tenant[24];
	const char *params[2] = { r->id, tenant };
	PGresult *res = NULL;
	json_object *o;
	int err;

	tenant_str(tenant, r);
	err = orc_pg_pool_query_one(&res, &api_server.db,
		"UPDATE sandboxes SET last_heartbeat_at = now(), last_activity_at = now()"
		" WHERE id = $1 AND tenant_id = $2 AND state NOT IN ('deleting', 'deleted') RETURNING id",
		2, params);
	if (err == ORC_ENOTFOUND)
		return api_reply_error(r, err, "sandbox %s not found", r->id);
	if (err < 0)
		return api_reply_error(r, err, "cannot record the heartbeat of sandbox %s", r->id);
	api_own_pg(r, res);
	o = api_own_json(r, json_object_new_object());
	json_object_object_add(o, "status", json_object_new_string("ok"));
	json_object_object_add(o, "sandbox_id", json_object_new_string(r->id));
	return api_reply_json(r, 200, o);
}
