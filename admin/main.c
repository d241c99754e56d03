/*
 * orchard-admin: migrations, tenants and API keys, straight to PostgreSQL.
 *
 *   orchard-admin [--database-url CONNINFO] COMMAND [ARGS]
 *
 * The connection comes from --database-url, else ORCHARD_DATABASE_URL (a
 * libpq conninfo string or URI). Exit status: 0 ok, 1 failure, 2 usage.
 */
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "admin.h"
#include "cmdline.h"
#include "err.h"
#include "log.h"

static const char main_usage[] =
	"usage: orchard-admin [--database-url CONNINFO] COMMAND [ARGS]\n"
	"\n"
	"Commands:\n"
	"  migrate               apply pending sql/migrations/*.sql files\n"
	"  tenant create|list    manage tenants\n"
	"  key create|list|revoke  manage API keys\n"
	"  stats                 dashboard summaries (usage, latency, failures)\n"
	"  prune                 delete what is left of long-deleted sandboxes\n"
	"  image import|ls|rm    the local driver's images (docs/images.md)\n"
	"  help [COMMAND]        show help for a command\n"
	"\n"
	"The database connection is --database-url, else $ORCHARD_DATABASE_URL\n"
	"(libpq conninfo, e.g. \"host=/var/run/postgresql dbname=orchard\").\n"
	"Each command takes --help. Exit status: 0 ok, 1 failure, 2 usage error.\n";

static int cmd_help(struct admin_ctx *ctx, int argc, char **argv);

static const struct admin_cmd commands[] = {
	{ "migrate", cmd_migrate, "apply pending migrations", migrate_usage },
	{ "tenant", cmd_tenant, "manage tenants", tenant_usage },
	{ "key", cmd_key, "manage API keys", key_usage },
	{ "stats", cmd_stats, "dashboard summaries", stats_usage },
	{ "prune", cmd_prune, "retention: prune long-deleted sandboxes", prune_usage },
	{ "image", cmd_image, "the local driver's images", image_usage },
	{ "help", cmd_help, "show help", main_usage },
};

static const struct admin_cmd *find_cmd(const struct admin_cmd *table, size_t n, const char *name)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (!strcmp(table[i].name, name))
			return &table[i];
	return NULL;
}

static int cmd_help(struct admin_ctx *ctx, int argc, char **argv)
{
	const struct admin_cmd *c;

	(void)ctx;
	if (argc < 2) {
		fputs(main_usage, stdout);
		return ADMIN_OK;
	}
	c = find_cmd(commands, sizeof(commands) / sizeof(*commands), argv[1]);
	if (!c)
		return admin_usage_error(main_usage, "unknown command \"%s\"", argv[1]);
	fputs(c->usage, stdout);
	return ADMIN_OK;
}

void admin_error(const char *fmt, ...)
{
	va_list ap;

	fputs("orchard-admin: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int admin_usage_error(const char *usage, const char *fmt, ...)
{
	va_list ap;

	fputs("orchard-admin: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\n\n", stderr);
	fputs(usage, stderr);
	return ADMIN_USAGE;
}

int admin_bad_option(const char *usage)
{
	fputc('\n', stderr);
	fputs(usage, stderr);
	return ADMIN_USAGE;
}

int admin_dispatch(struct admin_ctx *ctx, const struct admin_cmd *table, const char *group_usage,
		   int argc, char **argv)
{
	const struct admin_cmd *c;
	size_t n = 0;

	while (table[n].name)
		n++;
	if (argc < 2)
		return admin_usage_error(group_usage, "%s: missing sub-command", argv[0]);
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		fputs(group_usage, stdout);
		return ADMIN_OK;
	}
	c = find_cmd(table, n, argv[1]);
	if (!c)
		return admin_usage_error(group_usage, "%s: unknown sub-command \"%s\"", argv[0], argv[1]);
	if (orc_wants_help(argc - 1, argv + 1)) {
		fputs(c->usage, stdout);
		return ADMIN_OK;
	}
	return c->fn(ctx, argc - 1, argv + 1);
}

static void noop_notice(void *arg, const char *message)
{
	(void)arg;
	(void)message;
}

int admin_connect(struct admin_ctx *ctx)
{
	PGconn *c;
	char *msg, *nl;

	if (ctx->conn)
		return 0;
	if (!ctx->conninfo || !*ctx->conninfo) {
		admin_error("no database: set ORCHARD_DATABASE_URL or pass --database-url");
		return ORC_EINVALID;
	}
	c = PQconnectdb(ctx->conninfo);
	if (PQstatus(c) != CONNECTION_OK) {
		msg = PQerrorMessage(c);
		if ((nl = strrchr(msg, '\n')) != NULL && nl[1] == '\0')
			*nl = '\0';
		admin_error("cannot connect to the database: %s", msg);
		PQfinish(c);
		return ORC_EUNAVAIL;
	}
	/* Server notices (e.g. "relation already exists, skipping") are noise here. */
	PQsetNoticeProcessor(c, noop_notice, NULL);
	ctx->conn = c;
	return 0;
}

int admin_query(PGresult **out, struct admin_ctx *ctx, const char *sql, int nparams,
		const char *const *params)
{
	PGresult *res = PQexecParams(ctx->conn, sql, nparams, NULL, params, NULL, NULL, 0);
	ExecStatusType st = PQresultStatus(res);
	const char *state, *msg;
	int err = ORC_ERROR;
	size_t n;

	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
		if (out)
			*out = res;
		else
			PQclear(res);
		return 0;
	}
	msg = PQresultErrorMessage(res);
	if (!*msg)
		msg = PQerrorMessage(ctx->conn);
	snprintf(ctx->errmsg, sizeof(ctx->errmsg), "%s", msg);
	n = strlen(ctx->errmsg);
	while (n && (ctx->errmsg[n - 1] == '\n' || ctx->errmsg[n - 1] == ' '))
		ctx->errmsg[--n] = '\0';
	state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	if (state && !strcmp(state, "23505"))
		err = ORC_ECONFLICT;
	else if (state && !strncmp(state, "23", 2))
		err = ORC_EINVALID;
	PQclear(res);
	return err;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "database-url", required_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct admin_ctx ctx = { 0 };
	const struct admin_cmd *c;
	int opt, rc;

	orc_log_init("orchard-admin");
	ctx.conninfo = getenv("ORCHARD_DATABASE_URL");
	while ((opt = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (opt) {
		case 'd':
			ctx.conninfo = optarg;
			break;
		case 'h':
			fputs(main_usage, stdout);
			return ADMIN_OK;
		default:
			return admin_bad_option(main_usage);
		}
	}
	if (optind >= argc)
		return admin_usage_error(main_usage, "missing command");
	c = find_cmd(commands, sizeof(commands) / sizeof(*commands), argv[optind]);
	if (!c)
		return admin_usage_error(main_usage, "unknown command \"%s\"", argv[optind]);
	if (c->fn != cmd_help && c->fn != cmd_tenant && c->fn != cmd_key &&
	    orc_wants_help(argc - optind, argv + optind)) {
		fputs(c->usage, stdout);
		return ADMIN_OK;
	}
	/* Sub-commands parse their own options from a fresh getopt state. */
	rc = c->fn(&ctx, argc - optind, argv + optind);
	if (ctx.conn)
		PQfinish(ctx.conn);
	return rc;
}
