/*
 * DELETE /tenants/{name}[?force=true] (admin keys only): one transaction
 * that
 *
 *   - locks the tenant's row (FOR UPDATE: a sandbox create waits for it and
 *     then finds the tenant deleted, sql/migrations/026_tenant_delete.sql);
 *   - refuses (409) the caller's own tenant, which would revoke the key
 *     making the request and lock the last admin out;
 *   - refuses (409) a tenant with live sandboxes (not deleting or deleted)
 *     unless force=true, which deletes them the way DELETE /sandboxes/{id}
 *     does (state 'deleting', one sandbox.delete event each; the controller
 *     tears them down) together with its live checkpoints;
 *   - revokes every key of the tenant (each api replica drops it at once
 *     through the orchard_key notification);
 *   - marks the tenant deleted_at: it is no longer listed, changed or given
 *     keys or sandboxes, and its name is not reused. Its rows stay for
 *     retention.
 *
 * 200 {"name", "deleted_at", "sandboxes_deleted", "checkpoints_deleted",
 * "keys_revoked"}; 404 for an unknown or already deleted tenant.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "err.h"
#include "json.h"

enum { TD_ID, TD_SANDBOXES };

static int lock_tenant(PGresult **out, PGconn *db, const char *name)
{
	const char *params[1] = { name };

	return orc_pg_query(out, db,
		"SELECT t.id, (SELECT count(*) FROM sandboxes s WHERE s.tenant_id = t.id"
		" AND s.state NOT IN ('deleting', 'deleted'))"
		" FROM tenants t WHERE t.name = $1 AND t.deleted_at IS NULL FOR UPDATE OF t", 1, params);
}

/* Everything after the checks, in the open transaction; *out: the answer's row. */
static int delete_tenant(PGresult **out, PGconn *db, const char *id, struct api_req *r)
{
	const char *params[3] = { id, r->key_id, r->request_id };

	return orc_pg_query(out, db,
		"WITH sb AS (UPDATE sandboxes SET state = 'deleting', deleted_at = now()"
		"  WHERE tenant_id = $1::bigint AND state NOT IN ('deleting', 'deleted')"
		"  RETURNING id, tenant_id),"
		" ev AS (INSERT INTO events (sandbox_id, tenant_id, kind, api_key_id, request_id)"
		"  SELECT sb.id, sb.tenant_id, 'sandbox.delete', $2::bigint, nullif($3, '') FROM sb),"
		" ck AS (UPDATE checkpoints SET state = 'deleting', deleted_at = now()"
		"  WHERE tenant_id = $1::bigint AND state NOT IN ('deleting', 'deleted') RETURNING id),"
		" k AS (UPDATE api_keys SET revoked_at = now()"
		"  WHERE tenant_id = $1::bigint AND revoked_at IS NULL RETURNING id),"
		" t AS (UPDATE tenants SET deleted_at = now() WHERE id = $1::bigint RETURNING name, deleted_at)"
		" SELECT t.name, to_char(t.deleted_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),"
		"  (SELECT count(*) FROM sb), (SELECT count(*) FROM ck), (SELECT count(*) FROM k) FROM t",
		3, params);
}

static json_object *deleted_view(PGresult *res)
{
	static const char *const counts[] = { "sandboxes_deleted", "checkpoints_deleted", "keys_revoked" };
	json_object *o = json_object_new_object();
	int i;

	json_object_object_add(o, "name", json_object_new_string(PQgetvalue(res, 0, 0)));
	json_object_object_add(o, "deleted_at", json_object_new_string(PQgetvalue(res, 0, 1)));
	for (i = 0; i < 3; i++)
		json_object_object_add(o, counts[i],
				       json_object_new_int64(strtoll(PQgetvalue(res, 0, 2 + i), NULL, 10)));
	return o;
}

int api_tenant_delete(struct api_req *r)
{
	PGresult *t = NULL, *res = NULL;
	PGconn *db = NULL;
	char live[32];
	int err, force = 0;

	if ((err = api_req_query_bool(&force, r, "force")) < 0)
		return err;
	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		return api_reply_error(r, err, "database unavailable");
	if ((err = orc_pg_begin(db)) < 0 || (err = lock_tenant(&t, db, r->id)) < 0) {
		err = api_reply_error(r, err, "cannot delete tenant \"%s\"", r->id);
		goto rollback;
	}
	if (PQntuples(t) != 1) {
		err = api_reply_error(r, ORC_ENOTFOUND, "tenant \"%s\" not found", r->id);
		goto rollback;
	}
	if (strtoll(PQgetvalue(t, 0, TD_ID), NULL, 10) == r->tenant_id) {
		err = api_reply_error(r, ORC_ECONFLICT, "tenant \"%s\" is the tenant of the key making this "
				      "request: delete it with another tenant's admin key", r->id);
		goto rollback;
	}
	snprintf(live, sizeof(live), "%s", PQgetvalue(t, 0, TD_SANDBOXES));
	if (!force && strcmp(live, "0")) {
		err = api_reply_error(r, ORC_ECONFLICT, "tenant \"%s\" has %s live sandbox%s: delete %s first, "
				      "or pass force=true to delete %s with the tenant", r->id, live,
				      strcmp(live, "1") ? "es" : "", strcmp(live, "1") ? "them" : "it",
				      strcmp(live, "1") ? "them" : "it");
		goto rollback;
	}
	if ((err = delete_tenant(&res, db, PQgetvalue(t, 0, TD_ID), r)) < 0 || (err = orc_pg_commit(db)) < 0) {
		err = api_reply_error(r, err, "cannot delete tenant \"%s\"", r->id);
		goto rollback;
	}
	orc_pg_pool_release(&api_server.db, db);
	PQclear(t);
	api_own_pg(r, res);
	return api_reply_json(r, 200, api_own_json(r, deleted_view(res)));
rollback:
	orc_pg_rollback(db);
	orc_pg_pool_release(&api_server.db, db);
	PQclear(t);
	PQclear(res);
	return err;
}
