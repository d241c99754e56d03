#ifndef ADMIN_H
#define ADMIN_H
#include <stddef.h>

#include <libpq-fe.h>
/*
 * orchard-admin: the operator's tool for what needs direct database access
 * (migrations, tenants, API keys, stats, retention). One file per command
 * group, dispatched from the commands[] table in main.c (git's builtin/
 * style).
 *
 * A command returns the process exit status: ADMIN_OK, ADMIN_FAIL (with a
 * message on stderr) or ADMIN_USAGE.
 */
enum { ADMIN_OK = 0, ADMIN_FAIL = 1, ADMIN_USAGE = 2 };

struct admin_ctx {
	const char *conninfo;   /* --database-url, else ORCHARD_DATABASE_URL */
	PGconn *conn;           /* opened on first admin_connect() */
	char errmsg[512];       /* the server's message for the last failed query */
};

struct admin_cmd {
	const char *name;
	int (*fn)(struct admin_ctx *ctx, int argc, char **argv);
	const char *summary;
	const char *usage;      /* full help text for `CMD --help` */
};

/* Print "orchard-admin: <message>" on stderr. */
void admin_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Usage error: message, then the command's usage, on stderr; returns ADMIN_USAGE. */
int admin_usage_error(const char *usage, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* After getopt printed its own complaint: the usage on stderr; ADMIN_USAGE. */
int admin_bad_option(const char *usage);

/* Connect (once); prints the reason and returns a negative orc_err on failure. */
int admin_connect(struct admin_ctx *ctx);
/*
 * One parameterised statement. 0 on success (*out, if not NULL, gets the
 * result to PQclear), ORC_ECONFLICT on a unique violation, ORC_EINVALID on
 * a check violation, ORC_ERROR otherwise; ctx->errmsg holds the server's
 * message. Nothing is printed.
 */
int admin_query(PGresult **out, struct admin_ctx *ctx, const char *sql, int nparams,
		const char *const *params);
/* Run a command table's sub-command: argv[0] is the group name. */
int admin_dispatch(struct admin_ctx *ctx, const struct admin_cmd *table, const char *group_usage,
		   int argc, char **argv);

int cmd_migrate(struct admin_ctx *ctx, int argc, char **argv);
int cmd_tenant(struct admin_ctx *ctx, int argc, char **argv);
int cmd_key(struct admin_ctx *ctx, int argc, char **argv);
int cmd_stats(struct admin_ctx *ctx, int argc, char **argv);
int cmd_prune(struct admin_ctx *ctx, int argc, char **argv);
int cmd_image(struct admin_ctx *ctx, int argc, char **argv);

extern const char migrate_usage[];
extern const char tenant_usage[];
extern const char key_usage[];
extern const char stats_usage[];
extern const char prune_usage[];
extern const char image_usage[];

#endif
