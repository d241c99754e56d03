/*
 * GET /stats: the dashboard summary (docs/observability.md). The whole
 * document comes from one SQL function, dash_stats() (migration 004), so
 * this route, `orchard-admin stats` and the Grafana panels cannot disagree.
 *
 * A user key always sees its own tenant (naming another is 404, as for any
 * other tenant's object); an admin key sees every tenant, or ?tenant=NAME.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "err.h"
#include "json.h"

/* Resolve which tenant the summary covers: "" (all) or a tenant id. */
static int stats_scope(char *out, size_t outlen, struct api_req *r, PGconn *db)
{
	const char *name = api_req_query(r, "tenant");
	const char *params[1] = { name };
	PGresult *res = NULL;
	int admin = r->role && !strcmp(r->role, "admin");
	int err;

	if (!name || !*name) {
		if (admin)
			out[0] = '\0';
		else
			snprintf(out, outlen, "%lld", (long long)r->tenant_id);
		return 0;
	}
	if ((err = orc_pg_query_one(&res, db, "SELECT id FROM tenants WHERE name = $1", 1, params)) < 0)
		return err;
	if (!admin && strtoll(PQgetvalue(res, 0, 0), NULL, 10) != r->tenant_id) {
		PQclear(res);
		return ORC_ENOTFOUND;
	}
	snprintf(out, outlen, "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	return 0;
}

int api_stats_get(struct api_req *r)
{
	char tenant[24];
	const char *params[1] = { tenant };
	json_object *doc = NULL;
	PGresult *res = NULL;
	PGconn *db = NULL;
	int err;

	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		return api_reply_error(r, err, "database unavailable");
	if ((err = stats_scope(tenant, sizeof(tenant), r, db)) == 0) {
		if (!tenant[0])
			params[0] = NULL;
		err = orc_pg_query(&res, db, "SELECT dash_stats($1::bigint)::text", 1, params);
	}
	orc_pg_pool_release(&api_server.db, db);
	if (err == ORC_ENOTFOUND)
		return api_reply_error(r, err, "tenant \"%s\" not found", api_req_query(r, "tenant"));
	if (err < 0)
		return api_reply_error(r, err, "cannot compute the statistics");
	api_own_pg(r, res);
	if (orc_json_parse(&doc, PQgetvalue(res, 0, 0), (size_t)PQgetlength(res, 0, 0),
			   API_ERRBUF(r)) < 0 || !doc)
		return api_reply_error(r, ORC_ERROR, "statistics are malformed: %s", r->error);
	return api_reply_json(r, 200, api_own_json(r, doc));
}
