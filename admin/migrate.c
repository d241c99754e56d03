/*
 * orchard-admin migrate: apply sql/migrations/NNN_name.sql files in numeric
 * order, each once, each in its own transaction together with the row that
 * records it in schema_migrations (its NNN is the version).
 *
 * Two concurrent runs are safe: every transaction first takes the same
 * transaction-level advisory lock and re-checks whether its file was
 * recorded meanwhile.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "admin.h"
#include "buf.h"
#include "err.h"
#include "strutil.h"
#include "xalloc.h"

#define MIGRATION_MAX_BYTES (16u << 20)
#define MIGRATIONS_MAX 10000

/* Two int4 keys ('orch', 'migr'): a key space apart from any bigint lock
 * (the controller's leader election uses one). */
#define MIGRATE_LOCK "SELECT pg_advisory_xact_lock(1869767528, 1835624306)"

const char migrate_usage[] =
	"usage: orchard-admin migrate [--dir DIR] [--wait SECONDS]\n"
	"\n"
	"Apply every DIR/NNN_name.sql not yet recorded in schema_migrations, in\n"
	"numeric order, each in its own transaction. Safe to run again (it then\n"
	"applies nothing) and safe to run concurrently.\n"
	"\n"
	"  --dir DIR   migrations directory (default: ../sql/migrations beside\n"
	"              the orchard-admin binary, else ./sql/migrations)\n"
	"  --wait S    retry connecting once a second for up to S seconds\n"
	"              (0-3600, default 0): a database that is still starting\n"
	"              (a container started alongside it) is waited for\n"
	"\n"
	"Example:\n"
	"  ORCHARD_DATABASE_URL='host=/tmp/pg dbname=orchard' orchard-admin migrate\n";

struct migration {
	int64_t num;
	char *version;   /* the digits as written: "001" */
	char *file;      /* "001_init.sql" */
};

static void migrations_free(struct migration *m, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		free(m[i].version);
		free(m[i].file);
	}
	free(m);
}

static int cmp_migration(const void *a, const void *b)
{
	const struct migration *x = a, *y = b;

	return (x->num > y->num) - (x->num < y->num);
}

/* "NNN_name.sql" -> the length of NNN, or 0 if the name does not match. */
static size_t migration_digits(const char *name)
{
	size_t n = strlen(name), d = 0;

	while (name[d] >= '0' && name[d] <= '9')
		d++;
	if (!d || d > 9 || name[d] != '_' || n < d + 6 || strcmp(name + n - 4, ".sql"))
		return 0;
	return d;
}

/* The migration files of dir, sorted; duplicate numbers are an error. */
static int migrations_scan(struct migration **out, size_t *nout, const char *dir)
{
	struct migration *m = NULL;
	size_t n = 0, alloc = 0, d, i;
	struct dirent *de;
	DIR *dh;
	int err = 0;

	if (!(dh = opendir(dir))) {
		admin_error("opendir() \"%s\" failed: %s", dir, strerror(errno));
		return ORC_ERROR;
	}
	while ((de = readdir(dh)) != NULL) {
		int64_t num;
		char digits[16];

		if (!(d = migration_digits(de->d_name)))
			continue;
		memcpy(digits, de->d_name, d);
		digits[d] = '\0';
		if (orc_parse_i64(&num, digits, 0, INT32_MAX) < 0)
			continue;
		if (n == MIGRATIONS_MAX) {
			admin_error("too many migration files in \"%s\"", dir);
			err = ORC_ETOOBIG;
			goto done;
		}
		if (n == alloc) {
			alloc = alloc ? alloc * 2 : 16;
			m = xrealloc(m, orc_mul_size(alloc, sizeof(*m)));
		}
		m[n].num = num;
		m[n].version = xstrdup(digits);
		m[n].file = xstrdup(de->d_name);
		n++;
	}
	if (n)
		qsort(m, n, sizeof(*m), cmp_migration);
	for (i = 1; i < n; i++) {
		if (m[i].num == m[i - 1].num) {
			admin_error("migrations \"%s\" and \"%s\" have the same number",
				    m[i - 1].file, m[i].file);
			err = ORC_EINVALID;
			goto done;
		}
	}
	*out = m;
	*nout = n;
	m = NULL;
done:
	closedir(dh);
	if (m)
		migrations_free(m, n);
	return err;
}

static int read_file(struct orc_buf *out, const char *path)
{
	char chunk[65536];
	ssize_t r;
	int fd, err = 0;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		admin_error("open() \"%s\" failed: %s", path, strerror(errno));
		return ORC_ERROR;
	}
	for (;;) {
		r = read(fd, chunk, sizeof(chunk));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			admin_error("read() \"%s\" failed: %s", path, strerror(errno));
			err = ORC_ERROR;
			break;
		}
		if (r == 0)
			break;
		if (orc_buf_add(out, chunk, (size_t)r) < 0) {
			admin_error("\"%s\" is larger than %u bytes", path, MIGRATION_MAX_BYTES);
			err = ORC_ETOOBIG;
			break;
		}
	}
	close(fd);
	return err;
}

/* ../sql/migrations beside the binary, else ./sql/migrations. */
static char *default_dir(void)
{
	char exe[PATH_MAX], *slash, *dir;
	struct stat st;
	ssize_t n;

	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = '\0';
		if ((slash = strrchr(exe, '/')) != NULL) {
			*slash = '\0';
			dir = xasprintf("%s/../sql/migrations", exe);
			if (!stat(dir, &st) && S_ISDIR(st.st_mode) && realpath(dir, exe)) {
				free(dir);
				return xstrdup(exe);
			}
			free(dir);
		}
	}
	return xstrdup("sql/migrations");
}

/* Run one statement that returns nothing we need; report failures. */
static int exec_simple(struct admin_ctx *ctx, const char *sql, const char *what)
{
	int err = admin_query(NULL, ctx, sql, 0, NULL);

	if (err < 0)
		admin_error("%s failed: %s", what, ctx->errmsg);
	return err;
}

static void rollback(struct admin_ctx *ctx)
{
	PQclear(PQexec(ctx->conn, "ROLLBACK"));
}

static int ensure_table(struct admin_ctx *ctx)
{
	int err;

	if ((err = exec_simple(ctx, "BEGIN", "begin")) < 0)
		return err;
	if ((err = exec_simple(ctx, MIGRATE_LOCK, "taking the migration lock")) < 0 ||
	    (err = exec_simple(ctx,
			       "CREATE TABLE IF NOT EXISTS schema_migrations ("
			       " version text PRIMARY KEY,"
			       " applied_at timestamptz DEFAULT now())",
			       "creating schema_migrations")) < 0 ||
	    (err = exec_simple(ctx, "COMMIT", "commit")) < 0) {
		rollback(ctx);
		return err;
	}
	return 0;
}

/* Apply one migration unless it is recorded; *applied_out says which. */
static int migration_apply(int *applied_out, struct admin_ctx *ctx, const char *dir,
			   const struct migration *m)
{
	struct orc_buf sql = ORC_BUF_INIT;
	const char *params[1] = { m->version };
	PGresult *res = NULL;
	ExecStatusType st;
	char *path = xasprintf("%s/%s", dir, m->file);
	int err, applied = 0;

	orc_buf_init(&sql, MIGRATION_MAX_BYTES);
	if ((err = read_file(&sql, path)) < 0)
		goto done;
	if ((err = exec_simple(ctx, "BEGIN", "begin")) < 0)
		goto done;
	if ((err = exec_simple(ctx, MIGRATE_LOCK, "taking the migration lock")) < 0)
		goto done;
	if ((err = admin_query(&res, ctx, "SELECT 1 FROM schema_migrations WHERE version = $1",
			       1, params)) < 0) {
		admin_error("reading schema_migrations failed: %s", ctx->errmsg);
		goto done;
	}
	if (PQntuples(res) == 0) {
		/* PQexec, not PQexecParams: a migration is many statements. */
		PQclear(res);
		res = PQexec(ctx->conn, orc_buf_cstr(&sql));
		st = PQresultStatus(res);
		if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK && st != PGRES_EMPTY_QUERY) {
			const char *msg = PQresultErrorMessage(res);
			int len = (int)strlen(msg);

			while (len > 0 && (msg[len - 1] == '\n' || msg[len - 1] == ' '))
				len--;
			admin_error("migration \"%s\" failed (nothing of it was applied): %.*s",
				    m->file, len, msg);
			err = ORC_ERROR;
			goto done;
		}
		if ((err = admin_query(NULL, ctx, "INSERT INTO schema_migrations (version) VALUES ($1)",
				       1, params)) < 0) {
			admin_error("recording migration \"%s\" failed: %s", m->file, ctx->errmsg);
			goto done;
		}
		applied = 1;
	}
	if ((err = exec_simple(ctx, "COMMIT", "commit")) < 0)
		goto done;
	*applied_out = applied;
done:
	if (err < 0 && PQtransactionStatus(ctx->conn) != PQTRANS_IDLE)
		rollback(ctx);
	PQclear(res);
	orc_buf_release(&sql);
	free(path);
	return err;
}

/* admin_connect, retried once a second while the server does not answer,
 * for up to wait_s seconds. */
static int connect_waiting(struct admin_ctx *ctx, int64_t wait_s)
{
	int64_t deadline = orc_mono_ms() + wait_s * 1000;
	int err;

	while ((err = admin_connect(ctx)) == ORC_EUNAVAIL && orc_mono_ms() < deadline) {
		fprintf(stderr, "orchard-admin: waiting for the database (%llds left)\n",
			(long long)(deadline - orc_mono_ms() + 999) / 1000);
		sleep(1);
	}
	return err;
}

int cmd_migrate(struct admin_ctx *ctx, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "dir", required_argument, NULL, 'd' },
		{ "wait", required_argument, NULL, 'w' },
		{ NULL, 0, NULL, 0 },
	};
	struct migration *m = NULL;
	size_t n = 0, i, napplied = 0;
	char *dir = NULL;
	int64_t wait_s = 0;
	int opt, applied, rc = ADMIN_FAIL;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
		switch (opt) {
		case 'd':
			free(dir);
			dir = xstrdup(optarg);
			break;
		case 'w':
			if (orc_parse_i64(&wait_s, optarg, 0, 3600) < 0) {
				rc = admin_usage_error(migrate_usage, "migrate: --wait takes 0-3600 "
						       "seconds, not \"%s\"", optarg);
				goto done;
			}
			break;
		default:
			rc = admin_bad_option(migrate_usage);
			goto done;
		}
	}
	if (optind < argc) {
		rc = admin_usage_error(migrate_usage, "migrate: unexpected argument \"%s\"", argv[optind]);
		goto done;
	}
	if (!dir)
		dir = default_dir();
	if (migrations_scan(&m, &n, dir) < 0)
		goto done;
	if (!n) {
		admin_error("no NNN_name.sql files in \"%s\"", dir);
		goto done;
	}
	if (connect_waiting(ctx, wait_s) < 0 || ensure_table(ctx) < 0)
		goto done;
	for (i = 0; i < n; i++) {
		if (migration_apply(&applied, ctx, dir, &m[i]) < 0)
			goto done;
		if (applied) {
			printf("applied %s\n", m[i].file);
			fflush(stdout);
			napplied++;
		}
	}
	if (!napplied)
		printf("up to date (%zu migration%s in %s)\n", n, n == 1 ? "" : "s", dir);
	rc = ADMIN_OK;
done:
	if (m)
		migrations_free(m, n);
	free(dir);
	return rc;
}
