/*
 * orchard-admin key create|list|revoke.
 *
 * `key create` prints the whole key once, alone on stdout, so scripts can
 * capture it: KEY=$(orchard-admin key create --tenant t). Only the argon2id
 * hash of its secret is stored (keygen.c).
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "admin.h"
#include "apikey_db.h"
#include "err.h"
#include "strutil.h"


static const char key_create_usage[] =
	"usage: orchard-admin key create --tenant NAME [--admin] [--name LABEL] [--create-tenant]\n"
	"\n"
	"Create an API key for tenant NAME and print it, once, alone on stdout:\n"
	"orch_<key id>_<secret>. Only an argon2id hash of the secret is stored;\n"
	"the key cannot be shown again.\n"
	"\n"
	"  --tenant NAME     the tenant the key belongs to (required)\n"
	"  --admin           an admin key (manages tenants, keys and quotas)\n"
	"  --name LABEL      a label for `key list` (at most 200 characters)\n"
	"  --create-tenant   create the tenant first if it does not exist\n"
	"\n"
	"Example:\n"
	"  export ORCHARD_API_KEY=$(orchard-admin key create --tenant research --name ci)\n";

static const char key_list_usage[] =
	"usage: orchard-admin key list [--tenant NAME]\n"
	"\n"
	"List API keys (never their secrets): id, key id, tenant, role, label,\n"
	"created, last used and revoked times (UTC).\n";

static const char key_revoke_usage[] =
	"usage: orchard-admin key revoke ID\n"
	"\n"
	"Revoke a key. ID is the numeric id from `key list`, the 12-character key\n"
	"id, or the whole key. The API stops accepting it at once. Revoking a\n"
	"revoked key again changes nothing.\n"
	"\n"
	"Example:\n"
	"  orchard-admin key revoke 3f2a9c01b7de\n";

const char key_usage[] =
	"usage: orchard-admin key create --tenant NAME [--admin] [--name LABEL] [--create-tenant]\n"
	"       orchard-admin key list [--tenant NAME]\n"
	"       orchard-admin key revoke ID\n"
	"\n"
	"Examples:\n"
	"  KEY=$(orchard-admin key create --tenant research --admin)\n"
	"  orchard-admin key list --tenant research\n"
	"  orchard-admin key revoke 3f2a9c01b7de\n";

static int ensure_tenant(struct admin_ctx *ctx, const char *tenant)
{
	const char *params[1] = { tenant };

	if (admin_query(NULL, ctx, "INSERT INTO tenants (name) VALUES ($1) ON CONFLICT (name) DO NOTHING",
			1, params) < 0) {
		admin_error("creating tenant \"%s\" failed: %s", tenant, ctx->errmsg);
		return ORC_ERROR;
	}
	return 0;
}

static int key_create(struct admin_ctx *ctx, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "tenant", required_argument, NULL, 't' },
		{ "admin", no_argument, NULL, 'a' },
		{ "name", required_argument, NULL, 'n' },
		{ "create-tenant", no_argument, NULL, 'c' },
		{ NULL, 0, NULL, 0 },
	};
	struct orc_key key;
	const char *tenant = NULL, *label = NULL, *role = "user";
	char id[24];
	int opt, err, create_tenant = 0, rc = ADMIN_FAIL;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 't': tenant = optarg; break;
		case 'a': role = "admin"; break;
		case 'n': label = optarg; break;
		case 'c': create_tenant = 1; break;
		default: return admin_bad_option(key_create_usage);
		}
	}
	if (optind < argc)
		return admin_usage_error(key_create_usage, "key create: unexpected argument \"%s\"",
					 argv[optind]);
	if (!tenant)
		return admin_usage_error(key_create_usage, "key create: --tenant NAME is required");
	if (!orc_is_dns_label(tenant)) {
		admin_error("invalid tenant name \"%s\"", tenant);
		return ADMIN_FAIL;
	}
	if (label && !orc_key_name_valid(label)) {
		admin_error("invalid --name: at most %d characters of UTF-8 text without control characters",
			    ORC_KEY_NAME_MAX);
		return ADMIN_FAIL;
	}
	if (admin_connect(ctx) < 0)
		return ADMIN_FAIL;
	if (create_tenant && ensure_tenant(ctx, tenant) < 0)
		return ADMIN_FAIL;
	memset(&key, 0, sizeof(key));
	err = orc_key_insert(id, &key, ctx->conn, tenant, role, label);
	if (err == ORC_ENOTFOUND) {
		admin_error("tenant \"%s\" does not exist (create it with `orchard-admin tenant create %s`"
			    " or pass --create-tenant)", tenant, tenant);
		goto done;
	}
	if (err < 0) {
		admin_error("creating key failed: %s", PQerrorMessage(ctx->conn));
		goto done;
	}
	printf("%s\n", key.full);
	if (fflush(stdout) != 0) {
		admin_error("writing the key to stdout failed");
		goto done;
	}
	if (isatty(STDERR_FILENO))
		fprintf(stderr, "created %s key %s (id %s) for tenant \"%s\"; it is shown only once\n",
			role, key.key_id, id, tenant);
	rc = ADMIN_OK;
done:
	orc_key_wipe(&key);
	return rc;
}

static const char *or_dash(PGresult *res, int row, int col)
{
	return PQgetisnull(res, row, col) ? "-" : PQgetvalue(res, row, col);
}

#define UTC_TIME(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"

static int key_list(struct admin_ctx *ctx, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "tenant", required_argument, NULL, 't' },
		{ NULL, 0, NULL, 0 },
	};
	const char *params[1] = { NULL };
	PGresult *res = NULL;
	int opt, i, n, c;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (opt != 't')
			return admin_bad_option(key_list_usage);
		params[0] = optarg;
	}
	if (optind < argc)
		return admin_usage_error(key_list_usage, "key list: unexpected argument \"%s\"",
					 argv[optind]);
	if (admin_connect(ctx) < 0)
		return ADMIN_FAIL;
	if (params[0]) {
		if (admin_query(&res, ctx, "SELECT 1 FROM tenants WHERE name = $1", 1, params) < 0) {
			admin_error("listing keys failed: %s", ctx->errmsg);
			return ADMIN_FAIL;
		}
		n = PQntuples(res);
		PQclear(res);
		if (!n) {
			admin_error("tenant \"%s\" does not exist", params[0]);
			return ADMIN_FAIL;
		}
	}
	if (admin_query(&res, ctx,
			"SELECT k.id, k.key_id, t.name, k.role, k.name, " UTC_TIME("k.created_at") ", "
			UTC_TIME("k.last_used_at") ", " UTC_TIME("k.revoked_at")
			" FROM api_keys k JOIN tenants t ON t.id = k.tenant_id"
			" WHERE $1::text IS NULL OR t.name = $1 ORDER BY k.id", 1, params) < 0) {
		admin_error("listing keys failed: %s", ctx->errmsg);
		return ADMIN_FAIL;
	}
	n = PQntuples(res);
	printf("%-5s %-12s %-20s %-5s %-20s %-20s %-20s %s\n", "ID", "KEY_ID", "TENANT", "ROLE",
	       "NAME", "CREATED", "LAST_USED", "REVOKED");
	for (i = 0; i < n; i++) {
		for (c = 0; c < 8; c++) {
			static const int width[] = { 5, 12, 20, 5, 20, 20, 20, 0 };
			printf(c < 7 ? "%-*s " : "%-*s\n", width[c], or_dash(res, i, c));
		}
	}
	PQclear(res);
	return ADMIN_OK;
}

static int key_revoke(struct admin_ctx *ctx, int argc, char **argv)
{
	char key_id[ORC_KEY_ID_LEN + 1], idbuf[24];
	const char *arg, *secret, *params[2];
	PGresult *res = NULL;
	int64_t id;
	size_t n;

	optind = 0;
	if (getopt_long(argc, argv, "", (const struct option[]){ { NULL, 0, NULL, 0 } }, NULL) != -1)
		return admin_bad_option(key_revoke_usage);
	if (argc - optind != 1)
		return admin_usage_error(key_revoke_usage, "key revoke: expected one ID");
	arg = argv[optind];
	/* A whole key "orch_<key_id>_<secret>": take its key id. */
	if (orc_key_parse(key_id, &secret, arg) == 0)
		arg = key_id;
	params[0] = arg;
	params[1] = NULL;
	if (orc_parse_i64(&id, arg, 1, INT64_MAX) == 0) {
		snprintf(idbuf, sizeof(idbuf), "%lld", (long long)id);
		params[1] = idbuf;
	}
	if (admin_connect(ctx) < 0)
		return ADMIN_FAIL;
	/* coalesce: revoking twice keeps the first time and notifies nobody again. */
	if (admin_query(&res, ctx,
			"UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())"
			" WHERE key_id = $1 OR id = $2::bigint RETURNING id, key_id", 2, params) < 0) {
		admin_error("revoking key \"%s\" failed: %s", argv[optind], ctx->errmsg);
		return ADMIN_FAIL;
	}
	if (PQntuples(res) == 0) {
		PQclear(res);
		admin_error("no key \"%s\" (see `orchard-admin key list`)", argv[optind]);
		return ADMIN_FAIL;
	}
	for (n = 0; n < (size_t)PQntuples(res); n++)
		printf("revoked key %s (id %s)\n", PQgetvalue(res, (int)n, 1), PQgetvalue(res, (int)n, 0));
	PQclear(res);
	return ADMIN_OK;
}

static const struct admin_cmd key_commands[] = {
	{ "create", key_create, "create an API key", key_create_usage },
	{ "list", key_list, "list API keys", key_list_usage },
	{ "revoke", key_revoke, "revoke an API key", key_revoke_usage },
	{ NULL, NULL, NULL, NULL },
};

int cmd_key(struct admin_ctx *ctx, int argc, char **argv)
{
	return admin_dispatch(ctx, key_commands, key_usage, argc, argv);
}
