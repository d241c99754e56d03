/*
 * Admin routes for API keys (admin keys only; the router answers 403 to
 * others):
 *
 *   GET    /keys[?tenant=NAME]   every key (never a secret or its hash)
 *   DELETE /keys/{id}            revoke; {id} is the numeric id or the
 *                                12-character key id. Revoking again
 *                                changes nothing and answers the same.
 *
 * A revocation reaches every api replica's key cache at once through the
 * orchard_key notification (auth.c).
 *
 * Creating keys over the API waits for the key generator to move from
 * cli/admin/keygen.c into lib/ (one implementation of the key format and
 * its argon2id parameters); until then `orchard-admin key create` does it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "err.h"
#include "strutil.h"

#define ISO(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
#define KEY_COLS "k.id, k.key_id, t.name, k.role, k.name, " ISO("k.created_at") ", " \
	ISO("k.last_used_at") ", " ISO("k.revoked_at")

enum { K_ID, K_KEY_ID, K_TENANT, K_ROLE, K_NAME, K_CREATED, K_USED, K_REVOKED };

static json_object *col_str(PGresult *res, int row, int col)
{
	if (PQgetisnull(res, row, col))
		return NULL;
	return json_object_new_string(PQgetvalue(res, row, col));
}

static json_object *key_view(PGresult *res, int row)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "id", json_object_new_int64(strtoll(PQgetvalue(res, row, K_ID), NULL, 10)));
	json_object_object_add(o, "key_id", col_str(res, row, K_KEY_ID));
	json_object_object_add(o, "tenant", col_str(res, row, K_TENANT));
	json_object_object_add(o, "role", col_str(res, row, K_ROLE));
	json_object_object_add(o, "name", col_str(res, row, K_NAME));
	json_object_object_add(o, "created_at", col_str(res, row, K_CREATED));
	json_object_object_add(o, "last_used_at", col_str(res, row, K_USED));
	json_object_object_add(o, "revoked_at", col_str(res, row, K_REVOKED));
	json_object_object_add(o, "revoked", json_object_new_boolean(!PQgetisnull(res, row, K_REVOKED)));
	return o;
}

int api_key_list(struct api_req *r)
{
	const char *tenant = api_req_query(r, "tenant"), *params[1];
	json_object *o, *arr;
	PGresult *res = NULL;
	PGconn *db = NULL;
	int err, i;

	if (tenant && !*tenant)
		tenant = NULL;
	if (tenant && !orc_is_dns_label(tenant))
		return api_reply_error(r, ORC_EINVALID, "query parameter 'tenant' must be a tenant name "
				       "(a DNS label)");
	params[0] = tenant;
	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		return api_reply_error(r, err, "database unavailable");
	err = orc_pg_query(&res, db, "SELECT " KEY_COLS " FROM api_keys k JOIN tenants t ON t.id = k.tenant_id"
			   " WHERE $1::text IS NULL OR t.name = $1 ORDER BY k.id", 1, params);
	orc_pg_pool_release(&api_server.db, db);
	if (err < 0)
		return api_reply_error(r, err, "cannot list keys");
	api_own_pg(r, res);
	if (tenant && !PQntuples(res)) {
		/* no keys, or no such tenant: tell them apart */
		PGresult *t = NULL;
		if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
			return api_reply_error(r, err, "database unavailable");
		err = orc_pg_query(&t, db, "SELECT 1 FROM tenants WHERE name = $1", 1, params);
		orc_pg_pool_release(&api_server.db, db);
		if (err < 0)
			return api_reply_error(r, err, "cannot list keys");
		api_own_pg(r, t);
		if (!PQntuples(t))
			return api_reply_error(r, ORC_ENOTFOUND, "tenant \"%s\" not found", tenant);
	}
	o = api_own_json(r, json_object_new_object());
	arr = json_object_new_array();
	for (i = 0; i < PQntuples(res); i++)
		json_object_array_add(arr, key_view(res, i));
	json_object_object_add(o, "keys", arr);
	return api_reply_json(r, 200, o);
}

/* The public middle part of a key: 12 lowercase hex characters. */
static int is_key_id(const char *s)
{
	size_t i;

	if (strlen(s) != 12)
		return 0;
	for (i = 0; i < 12; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
}

int api_key_revoke(struct api_req *r)
{
	char num[24];
	const char *params[2] = { NULL, NULL };
	PGresult *res = NULL;
	PGconn *db = NULL;
	int64_t n;
	int err;

	/* exactly one of key_id and id, so one request revokes one key */
	if (is_key_id(r->id)) {
		params[0] = r->id;
	} else if (orc_parse_i64(&n, r->id, 1, INT64_MAX) == 0) {
		snprintf(num, sizeof(num), "%lld", (long long)n);
		params[1] = num;
	} else {
		return api_reply_error(r, ORC_ENOTFOUND, "key %s not found", r->id);
	}
	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		return api_reply_error(r, err, "database unavailable");
	/* coalesce keeps the first revocation time: revoking is idempotent */
	err = orc_pg_query(&res, db,
		"WITH k AS (UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())"
		" WHERE key_id = $1 OR id = $2::bigint RETURNING *)"
		" SELECT " KEY_COLS " FROM k JOIN tenants t ON t.id = k.tenant_id", 2, params);
	orc_pg_pool_release(&api_server.db, db);
	if (err < 0)
		return api_reply_error(r, err, "cannot revoke key %s", r->id);
	api_own_pg(r, res);
	if (PQntuples(res) != 1)
		return api_reply_error(r, ORC_ENOTFOUND, "key %s not found", r->id);
	return api_reply_json(r, 200, api_own_json(r, key_view(res, 0)));
}
