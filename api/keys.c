/*
 * Admin routes for API keys (admin keys only; the router answers 403 to
 * others):
 *
 *   GET    /keys[?tenant=NAME]   every key (never a secret or its hash)
 *   POST   /keys                 {"tenant", "role"?, "name"?}: a new key,
 *                                201 with the whole key shown this once
 *   DELETE /keys/{id}            revoke; {id} is the numeric id or the
 *                                12-character key id. Revoking again
 *                                changes nothing and answers the same.
 *
 * A revocation reaches every api replica's key cache at once through the
 * orchard_key notification (auth.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "apikey_db.h"
#include "err.h"
#include "json.h"
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

/* ?tenant= of the key list: NULL when absent or empty, else a DNS label (422, replied). */
static int query_tenant(const char **out, struct api_req *r)
{
	const char *tenant = api_req_query(r, "tenant");

	if (tenant && !*tenant)
		tenant = NULL;
	if (tenant && !orc_is_dns_label(tenant))
		return api_reply_error(r, ORC_EINVALID, "query parameter 'tenant' must be a tenant name "
				       "(a DNS label)");
	*out = tenant;
	return 0;
}

int api_key_list(struct api_req *r)
{
	const char *tenant = NULL, *params[1];
	json_object *o, *arr;
	PGresult *res = NULL;
	PGconn *db = NULL;
	int err, i;

	if ((err = query_tenant(&tenant, r)) < 0)
		return err;
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

/*
 * The {id} of DELETE /keys/{id}: exactly one of *key_id (the 12-character
 * key id, pointing into id) and num (the numeric id, canonical decimal)
 * is set, so one request revokes one key. ORC_ENOTFOUND when it is neither.
 */
static int parse_key_ref(const char **key_id, char num[24], const char *id)
{
	int64_t n;

	*key_id = NULL;
	num[0] = '\0';
	if (orc_key_id_valid(id)) {
		*key_id = id;
		return 0;
	}
	if (orc_parse_i64(&n, id, 1, INT64_MAX) == 0) {
		snprintf(num, 24, "%lld", (long long)n);
		return 0;
	}
	return ORC_ENOTFOUND;
}

int api_key_revoke(struct api_req *r)
{
	char num[24];
	const char *params[2] = { NULL, NULL };
	PGresult *res = NULL;
	int err;

	if (parse_key_ref(&params[0], num, r->id) < 0)
		return api_reply_error(r, ORC_ENOTFOUND, "key %s not found", r->id);
	params[1] = num[0] ? num : NULL;
	/* coalesce keeps the first revocation time: revoking is idempotent */
	err = orc_pg_pool_query_one(&res, &api_server.db,
		"WITH k AS (UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())"
		" WHERE key_id = $1 OR id = $2::bigint RETURNING *)"
		" SELECT " KEY_COLS " FROM k JOIN tenants t ON t.id = k.tenant_id", 2, params);
	if (err == ORC_ENOTFOUND)
		return api_reply_error(r, err, "key %s not found", r->id);
	if (err < 0)
		return api_reply_error(r, err, "cannot revoke key %s", r->id);
	api_own_pg(r, res);
	return api_reply_json(r, 200, api_own_json(r, key_view(res, 0)));
}

/* The fields of a key-create body, validated; 0 or an error reply. */
static int parse_key_create(struct api_req *r, json_object *body, const char **tenant,
			    const char **role, const char **name)
{
	static const char *const fields[] = { "tenant", "role", "name", NULL };
	size_t i;
	int err;

	json_object_object_foreach(body, k, v) {
		int known = 0;
		(void)v;
		for (i = 0; fields[i]; i++)
			known |= !strcmp(k, fields[i]);
		if (!known)
			return api_reply_error(r, ORC_EINVALID, "unknown field '%.64s' (fields: tenant, "
					       "role, name)", k);
	}
	if ((err = orc_json_get_str(body, "tenant", tenant, API_ERRBUF(r))) < 0)
		return api_reply_failed(r, err);
	if (err == 1)
		return api_reply_error(r, ORC_EINVALID, "field 'tenant' is required");
	if (!orc_is_dns_label(*tenant))
		return api_reply_error(r, ORC_EINVALID, "field 'tenant' must be a tenant name (a DNS label)");
	if ((err = orc_json_get_str(body, "role", role, API_ERRBUF(r))) < 0)
		return api_reply_failed(r, err);
	if (err == 1)
		*role = "user";
	if (strcmp(*role, "user") && strcmp(*role, "admin"))
		return api_reply_error(r, ORC_EINVALID, "field 'role' must be \"user\" or \"admin\"");
	if ((err = orc_json_get_str(body, "name", name, API_ERRBUF(r))) < 0)
		return api_reply_failed(r, err);
	if (err == 1)
		*name = NULL;
	if (*name && !orc_key_name_valid(*name))
		return api_reply_error(r, ORC_EINVALID, "field 'name' must be at most %d bytes of text "
				       "without control characters", ORC_KEY_NAME_MAX);
	return 0;
}

int api_key_create(struct api_req *r)
{
	const char *tenant, *role, *name, *params[1];
	struct orc_key key;
	json_object *body, *view;
	PGresult *res = NULL;
	PGconn *db = NULL;
	char id[24];
	int err;

	if ((err = api_req_json_body(&body, r)) < 0)
		return err;
	if ((err = parse_key_create(r, body, &tenant, &role, &name)) < 0)
		return err;
	memset(&key, 0, sizeof(key));
	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		return api_reply_error(r, err, "database unavailable");
	if ((err = orc_key_insert(id, &key, db, tenant, role, name)) == 0) {
		params[0] = id;
		err = orc_pg_query(&res, db, "SELECT " KEY_COLS " FROM api_keys k JOIN tenants t"
				   " ON t.id = k.tenant_id WHERE k.id = $1::bigint", 1, params);
	}
	orc_pg_pool_release(&api_server.db, db);
	if (err == ORC_ENOTFOUND) {
		orc_key_wipe(&key);
		return api_reply_error(r, err, "tenant \"%s\" not found", tenant);
	}
	if (err < 0 || PQntuples(res) != 1) {
		orc_key_wipe(&key);
		PQclear(res);
		return api_reply_error(r, err < 0 ? err : ORC_ERROR, "cannot create a key for tenant \"%s\"",
				       tenant);
	}
	api_own_pg(r, res);
	view = api_own_json(r, key_view(res, 0));
	json_object_object_add(view, "key", json_object_new_string(key.full));
	orc_key_wipe(&key);
	api_req_add_header(r, "Location", "/v1/keys/%s", PQgetvalue(res, 0, K_KEY_ID));
	return api_reply_json(r, 201, view);
}
