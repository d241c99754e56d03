/*
 * orchard-admin stats: the dashboard summaries (sql/migrations/
 * 004_dashboards.sql), read straight from the database through
 * dash_stats(), the same document GET /v1/stats answers with.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <json-c/json.h>

#include "admin.h"
#include "buf.h"
#include "err.h"
#include "stats_print.h"
#include "xalloc.h"

const char stats_usage[] =
	"usage: orchard-admin stats [--tenant NAME] [-o table|json]\n"
	"\n"
	"Print the dashboard summaries (docs/observability.md): active sandboxes by\n"
	"tenant, image and state; exec latency percentiles per hour and the slowest\n"
	"commands of the last 24 hours; failure reasons (last 24 hours and all);\n"
	"per-tenant usage (sandbox-hours, execs) per day for the last 7 days.\n"
	"\n"
	"  --tenant NAME   only this tenant (default: all tenants)\n"
	"  -o FORMAT       table (default) or json (the document GET /v1/stats returns)\n"
	"\n"
	"Example:\n"
	"  orchard-admin stats --tenant research -o json | jq .failure_reasons\n";

/* The tenant's id as text into out (bigint digits). */
static int tenant_id(char *out, size_t outlen, struct admin_ctx *ctx, const char *name)
{
	const char *params[1] = { name };
	PGresult *res = NULL;
	int err;

	if ((err = admin_query(&res, ctx, "SELECT id FROM tenants WHERE name = $1", 1, params)) < 0) {
		admin_error("looking up tenant \"%s\" failed: %s", name, ctx->errmsg);
		return err;
	}
	if (PQntuples(res) != 1) {
		admin_error("no tenant \"%s\" (orchard-admin tenant list shows them)", name);
		PQclear(res);
		return ORC_ENOTFOUND;
	}
	snprintf(out, outlen, "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	return 0;
}

int cmd_stats(struct admin_ctx *ctx, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "tenant", required_argument, NULL, 't' },
		{ "output", required_argument, NULL, 'o' },
		{ NULL, 0, NULL, 0 },
	};
	const char *tenant = NULL, *params[1] = { NULL };
	char id[32];
	PGresult *res = NULL;
	json_object *doc = NULL;
	int opt, json = 0, rc = ADMIN_FAIL;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "o:", opts, NULL)) != -1) {
		switch (opt) {
		case 't':
			tenant = optarg;
			break;
		case 'o':
			if (strcmp(optarg, "json") && strcmp(optarg, "table"))
				return admin_usage_error(stats_usage, "stats: -o wants table or json, not \"%s\"",
							 optarg);
			json = !strcmp(optarg, "json");
			break;
		default:
			return admin_bad_option(stats_usage);
		}
	}
	if (optind < argc)
		return admin_usage_error(stats_usage, "stats: unexpected argument \"%s\"", argv[optind]);
	if (admin_connect(ctx) < 0)
		return ADMIN_FAIL;
	if (tenant) {
		if (tenant_id(id, sizeof(id), ctx, tenant) < 0)
			return ADMIN_FAIL;
		params[0] = id;
	}
	if (admin_query(&res, ctx, "SELECT dash_stats($1::bigint)", 1, params) < 0) {
		admin_error("reading the dashboard views failed: %s (is the database migrated? "
			    "orchard-admin migrate)", ctx->errmsg);
		goto done;
	}
	if (!(doc = json_tokener_parse(PQgetvalue(res, 0, 0))) || !json_object_is_type(doc, json_type_object)) {
		admin_error("dash_stats() returned no JSON object");
		goto done;
	}
	if (json)
		puts(json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
							 JSON_C_TO_STRING_NOSLASHESCAPE));
	else
		orc_stats_print(stdout, doc, 1);
	rc = ADMIN_OK;
done:
	if (doc)
		json_object_put(doc);
	PQclear(res);
	return rc;
}
