#include "pgpool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "err.h"
#include "log.h"
#include "pgstmt.h"
#include "xalloc.h"

/*
 * The server's notices, and the FATAL it sends an idle connection it
 * terminates (pg_terminate_backend, a fast shutdown), reach libpq's notice
 * processor, whose default writes them bare to stderr: our log, which is
 * one JSON object per line. Log them as ours instead.
 */
static void log_notice(void *arg, const char *message)
{
	char buf[512];
	size_t n;

	(void)arg;
	snprintf(buf, sizeof(buf), "%s", message);
	n = strlen(buf);
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = '\0';
	orc_log(ORC_LOG_WARN, "database notice", "notice", buf, NULL);
}

int orc_pg_connect(PGconn **out, const char *conninfo)
{
	PGconn *c = PQconnectdb(conninfo);

	if (PQstatus(c) != CONNECTION_OK) {
		orc_log(ORC_LOG_ERROR, "database connection failed", "error", PQerrorMessage(c), NULL);
		PQfinish(c);
		return ORC_EUNAVAIL;
	}
	PQsetNoticeProcessor(c, log_notice, NULL);
	orc_pg_stmt_attach(c);
	*out = c;
	return 0;
}

int orc_pg_pool_open(struct orc_pg_pool *pool, const char *conninfo, int size)
{
	memset(pool, 0, sizeof(*pool));
	pthread_mutex_init(&pool->lock, NULL);
	pthread_cond_init(&pool->cond, NULL);
	pool->conninfo = xstrdup(conninfo);
	pool->size = size > 0 ? size : 1;
	pool->idle = xcalloc((size_t)pool->size, sizeof(PGconn *));
	return 0;
}

void orc_pg_pool_release_all(struct orc_pg_pool *pool)
{
	int i;

	if (!pool->idle)
		return;
	for (i = 0; i < pool->nidle; i++)
		PQfinish(pool->idle[i]);
	free(pool->idle);
	free(pool->conninfo);
	pool->idle = NULL;
	pool->conninfo = NULL;
	pthread_mutex_destroy(&pool->lock);
	pthread_cond_destroy(&pool->cond);
}

int orc_pg_pool_acquire(struct orc_pg_pool *pool, PGconn **out)
{
	struct timespec deadline;
	PGconn *c = NULL;
	int err = 0, rc = 0;

	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += 10;
	pthread_mutex_lock(&pool->lock);
	if (!pool->nidle && pool->open >= pool->size)
		pool->waits++;
	while (!pool->nidle && pool->open >= pool->size && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&pool->cond, &pool->lock, &deadline);
	if (pool->nidle) {
		c = pool->idle[--pool->nidle];
	} else if (pool->open < pool->size) {
		pool->open++;
	} else {
		pool->timeouts++;
		pthread_mutex_unlock(&pool->lock);
		orc_log(ORC_LOG_WARN, "database pool exhausted", NULL);
		return ORC_EUNAVAIL;
	}
	pthread_mutex_unlock(&pool->lock);

	if (c && PQstatus(c) != CONNECTION_OK) {
		PQfinish(c);
		c = NULL;
	}
	if (!c && (err = orc_pg_connect(&c, pool->conninfo)) < 0) {
		pthread_mutex_lock(&pool->lock);
		pool->open--;
		pthread_cond_signal(&pool->cond);
		pthread_mutex_unlock(&pool->lock);
		return err;
	}
	*out = c;
	return 0;
}

void orc_pg_pool_stats(struct orc_pg_pool_stats *out, struct orc_pg_pool *pool)
{
	pthread_mutex_lock(&pool->lock);
	out->size = pool->size;
	out->open = pool->open;
	out->idle = pool->nidle;
	out->waits = pool->waits;
	out->timeouts = pool->timeouts;
	pthread_mutex_unlock(&pool->lock);
}

void orc_pg_pool_release(struct orc_pg_pool *pool, PGconn *c)
{
	if (!c)
		return;
	if (PQstatus(c) != CONNECTION_OK || PQtransactionStatus(c) != PQTRANS_IDLE) {
		/* Never hand out a broken connection or one inside a transaction. */
		PQfinish(c);
		c = NULL;
	}
	pthread_mutex_lock(&pool->lock);
	if (c)
		pool->idle[pool->nidle++] = c;
	else
		pool->open--;
	pthread_cond_signal(&pool->cond);
	pthread_mutex_unlock(&pool->lock);
}

static int map_result(PGresult *res, PGconn *c)
{
	const char *state;
	ExecStatusType st = PQresultStatus(res);

	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
		return 0;
	if (PQstatus(c) != CONNECTION_OK) {
		orc_log(ORC_LOG_ERROR, "database connection lost", "error", PQerrorMessage(c), NULL);
		return ORC_EUNAVAIL;
	}
	state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	if (state && !strcmp(state, "23505"))
		return ORC_ECONFLICT;
	orc_log(ORC_LOG_ERROR, "database statement failed", "error", PQresultErrorMessage(res),
		"sqlstate", state, NULL);
	if (state && (!strncmp(state, "22", 2) || !strncmp(state, "23", 2)))
		return ORC_EINVALID;
	if (state && (!strcmp(state, "57P01") || !strncmp(state, "08", 2)))
		return ORC_EUNAVAIL;
	return ORC_ERROR;
}

int orc_pg_query_bin(PGresult **out, PGconn *c, const char *sql, int nparams,
		     const char *const *params, const int *lengths, const int *formats)
{
	PGresult *res = orc_pg_stmt_exec(c, sql, nparams, params, lengths, formats);
	int err = map_result(res, c);

	if (err < 0 || !out)
		PQclear(res);
	else
		*out = res;
	return err;
}

int orc_pg_query(PGresult **out, PGconn *c, const char *sql, int nparams, const char *const *params)
{
	return orc_pg_query_bin(out, c, sql, nparams, params, NULL, NULL);
}

int orc_pg_query_one(PGresult **out, PGconn *c, const char *sql, int nparams,
		     const char *const *params)
{
	PGresult *res = NULL;
	int err;

	if ((err = orc_pg_query(&res, c, sql, nparams, params)) < 0)
		return err;
	if (PQntuples(res) != 1) {
		PQclear(res);
		return ORC_ENOTFOUND;
	}
	*out = res;
	return 0;
}

int orc_pg_pool_query_one(PGresult **out, struct orc_pg_pool *pool, const char *sql, int nparams,
			  const char *const *params)
{
	PGconn *c = NULL;
	int err;

	if ((err = orc_pg_pool_acquire(pool, &c)) < 0)
		return err;
	err = orc_pg_query_one(out, c, sql, nparams, params);
	orc_pg_pool_release(pool, c);
	return err;
}

int orc_pg_begin(PGconn *c)
{
	return orc_pg_query(NULL, c, "BEGIN", 0, NULL);
}

int orc_pg_commit(PGconn *c)
{
	return orc_pg_query(NULL, c, "COMMIT", 0, NULL);
}

void orc_pg_rollback(PGconn *c)
{
	PQclear(PQexec(c, "ROLLBACK"));
}
