/*
 * The INSERT of a new API key, shared by the api and orchard-admin
 * (apikey_db.h).
 */
#include <stdio.h>

#include "apikey_db.h"
#include "err.h"
#include "pgpool.h"

int orc_key_insert(char *id_out, struct orc_key *key, PGconn *db, const char *tenant, const char *role,
		   const char *name)
{
	const char *params[5];
	PGresult *res = NULL;
	int err = ORC_ERROR, tries;

	for (tries = 0; tries < ORC_KEY_CREATE_TRIES; tries++) {
		if ((err = orc_key_generate(key)) < 0)
			return err;
		params[0] = tenant;
		params[1] = key->key_id;
		params[2] = key->hash;
		params[3] = role;
		params[4] = name;
		err = orc_pg_query_one(&res, db,
			"INSERT INTO api_keys (tenant_id, key_id, secret_hash, role, name)"
			" SELECT id, $2, $3, $4, $5 FROM tenants WHERE name = $1 AND deleted_at IS NULL"
			" RETURNING id", 5, params);
		if (err != ORC_ECONFLICT)
			break;
	}
	if (err < 0)
		return err;
	snprintf(id_out, 24, "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	return 0;
}
