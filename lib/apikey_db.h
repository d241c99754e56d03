#ifndef ORC_APIKEY_DB_H
#define ORC_APIKEY_DB_H
#include <libpq-fe.h>

#include "apikey.h"
/*
 * Storing a new API key: the one INSERT behind POST /v1/keys (api/keys.c)
 * and `orchard-admin key create` (admin/key.c).
 *
 * Generate a key into *key and insert its id and hash for tenant (a live,
 * not deleted one) with role ("user" or "admin") and name (NULL: none),
 * trying again with a new key id on the rare collision. 0 with *id_out the
 * new api_keys.id (a decimal string, id_out at least 24 bytes); ORC_ENOTFOUND
 * when there is no such tenant; another orc_err when the database refused.
 * The caller wipes *key (orc_key_wipe) in every case.
 */
int orc_key_insert(char *id_out, struct orc_key *key, PGconn *db, const char *tenant, const char *role,
		   const char *name);
#endif
