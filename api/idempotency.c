/*
 * Idempotency-Key, bound to the body first sent with it
 * (sql/migrations/027_api_ux.sql, idempotency_keys). A retry with the
 * same key and the same body is answered like the first call (each
 * route's own replay, marked Idempotent-Replayed: true); the same key with
 * another body is a client bug that used to return the first result
 * quietly, and is refused with 422 naming the conflict.
 */
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "err.h"

static const char bind_sql[] =
	"WITH i AS (INSERT INTO idempotency_keys (tenant_id, scope, key, body_sha256)"
	" VALUES ($1::bigint, $2, $3, sha256($4::bytea)) ON CONFLICT DO NOTHING RETURNING 1)"
	" SELECT EXISTS (SELECT 1 FROM i),"
	" (SELECT k.body_sha256 = sha256($4::bytea) FROM idempotency_keys k"
	" WHERE k.tenant_id = $1::bigint AND k.scope = $2 AND k.key = $3)";

#define RACED 1   /* a concurrent first use committed after our snapshot */

/* *out 1: bound now or to this body already; 0: to another body. */
static int bind_once(int *out, PGconn *db, const char *const *params, const int *lengths,
		     const int *formats)
{
	PGresult *res = NULL;
	int err;

	if ((err = orc_pg_query_bin(&res, db, bind_sql, 4, params, lengths, formats)) < 0)
		return err;
	if (PQgetvalue(res, 0, 0)[0] == 't')
		*out = 1;
	else if (PQgetisnull(res, 0, 1))
		err = RACED;
	else
		*out = PQgetvalue(res, 0, 1)[0] == 't';
	PQclear(res);
	return err;
}

int api_idempotency_bind(struct api_req *r, PGconn *db, const char *scope, const char *key)
{
	char tenant[24];
	const char *params[4] = { tenant, scope, key, r->body.ptr ? r->body.ptr : "" };
	int lengths[4] = { 0, 0, 0, (int)r->body.len }, formats[4] = { 0, 0, 0, 1 };
	PGconn *own = NULL;
	int err = 0, same = 0, attempt;

	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	if (!db && (err = orc_pg_pool_acquire(&api_server.db, &own)) == 0)
		db = own;
	for (attempt = 0; attempt < 3 && err == 0; attempt++)
		if ((err = bind_once(&same, db, params, lengths, formats)) != RACED)
			break;
	orc_pg_pool_release(&api_server.db, own);
	if (err != 0)
		return api_reply_error(r, err < 0 ? err : ORC_ERROR, "cannot look up the Idempotency-Key");
	if (!same)
		return api_reply_error(r, ORC_EINVALID, "Idempotency-Key \"%.255s\" was already used with a"
				       " different request body; send the same body to retry, or use a"
				       " new key for a new request", key);
	return 0;
}

void api_idempotency_unbind(struct api_req *r, const char *scope, const char *key)
{
	char tenant[24];
	const char *params[3] = { tenant, scope, key };
	PGconn *db = NULL;

	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	if (orc_pg_pool_acquire(&api_server.db, &db) < 0)
		return;
	orc_pg_query(NULL, db, "DELETE FROM idempotency_keys WHERE tenant_id = $1::bigint"
		     " AND scope = $2 AND key = $3", 3, params);
	orc_pg_pool_release(&api_server.db, db);
}

void api_idempotency_replayed(struct api_req *r)
{
	api_req_add_header(r, "Idempotent-Replayed", "true");
}
