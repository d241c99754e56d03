/*
 * orchard-admin tenant create|list.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "admin.h"
#include "err.h"
#include "strutil.h"

static const char tenant_create_usage[] =
	"usage: orchard-admin tenant create NAME [--if-not-exists]\n"
	"\n"
	"Create a tenant. NAME is a DNS label: lowercase letters, digits and '-',\n"
	"1 to 63 characters, starting and ending with a letter or digit.\n"
	"An existing NAME is an error unless --if-not-exists is given.\n"
	"\n"
	"Example:\n"
	"  orchard-admin tenant create research\n";

static const char tenant_list_usage[] =
	"usage: orchard-admin tenant list\n"
	"\n"
	"List tenants with their number of active (unrevoked) keys, and when a\n"
	"deleted one was deleted (DELETE /v1/tenants/{name}; \"-\" for live ones).\n";

const char tenant_usage[] =
	"usage: orchard-admin tenant create NAME [--if-not-exists]\n"
	"       orchard-admin tenant list\n"
	"\n"
	"Examples:\n"
	"  orchard-admin tenant create research\n"
	"  orchard-admin tenant list\n";

static int tenant_create(struct admin_ctx *ctx, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "if-not-exists", no_argument, NULL, 'e' },
		{ NULL, 0, NULL, 0 },
	};
	const char *params[1];
	PGresult *res = NULL;
	const char *name;
	int opt, err, exists_ok = 0, rc = ADMIN_FAIL;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (opt != 'e')
			return admin_bad_option(tenant_create_usage);
		exists_ok = 1;
	}
	if (argc - optind != 1)
		return admin_usage_error(tenant_create_usage, "tenant create: expected one NAME");
	name = argv[optind];
	if (!orc_is_dns_label(name)) {
		admin_error("invalid tenant name \"%s\": use lowercase letters, digits and '-' "
			    "(1-63 characters, starting and ending with a letter or digit)", name);
		return ADMIN_FAIL;
	}
	if (admin_connect(ctx) < 0)
		return ADMIN_FAIL;
	params[0] = name;
	err = admin_query(&res, ctx,
			  "INSERT INTO tenants (name) VALUES ($1) RETURNING id", 1, params);
	if (err == ORC_ECONFLICT) {
		if (exists_ok) {
			printf("tenant \"%s\" already exists\n", name);
			return ADMIN_OK;
		}
		admin_error("tenant \"%s\" already exists", name);
		return ADMIN_FAIL;
	}
	if (err < 0) {
		admin_error("creating tenant \"%s\" failed: %s", name, ctx->errmsg);
		goto done;
	}
	printf("created tenant \"%s\" (id %s)\n", name, PQgetvalue(res, 0, 0));
	rc = ADMIN_OK;
done:
	PQclear(res);
	return rc;
}

static int tenant_list(struct admin_ctx *ctx, int argc, char **argv)
{
	PGresult *res = NULL;
	int i, n;

	(void)argv;
	if (argc != 1)
		return admin_usage_error(tenant_list_usage, "tenant list: takes no arguments");
	if (admin_connect(ctx) < 0)
		return ADMIN_FAIL;
	if (admin_query(&res, ctx,
			"SELECT t.id, t.name,"
			" (SELECT count(*) FROM api_keys k WHERE k.tenant_id = t.id AND k.revoked_at IS NULL),"
			" to_char(t.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),"
			" coalesce(to_char(t.deleted_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), '-')"
			" FROM tenants t ORDER BY t.id", 0, NULL) < 0) {
		admin_error("listing tenants failed: %s", ctx->errmsg);
		return ADMIN_FAIL;
	}
	n = PQntuples(res);
	printf("%-6s %-32s %-5s %-20s  %s\n", "ID", "NAME", "KEYS", "CREATED", "DELETED");
	for (i = 0; i < n; i++)
		printf("%-6s %-32s %-5s %-20s  %s\n", PQgetvalue(res, i, 0), PQgetvalue(res, i, 1),
		       PQgetvalue(res, i, 2), PQgetvalue(res, i, 3), PQgetvalue(res, i, 4));
	PQclear(res);
	return ADMIN_OK;
}

static const struct admin_cmd tenant_commands[] = {
	{ "create", tenant_create, "create a tenant", tenant_create_usage },
	{ "list", tenant_list, "list tenants", tenant_list_usage },
	{ NULL, NULL, NULL, NULL },
};

int cmd_tenant(struct admin_ctx *ctx, int argc, char **argv)
{
	return admin_dispatch(ctx, tenant_commands, tenant_usage, argc, argv);
}
