#ifndef ORC_PGPOOL_H
#define ORC_PGPOOL_H
#include <pthread.h>
#include <libpq-fe.h>
/*
 * A fixed-size pool of PostgreSQL connections shared by threads. A
 * connection is held only for the statements of one unit of work and is
 * never held across a call to an agent (DESIGN.md).
 *
 *   PGconn *c;
 *   if ((err = orc_pg_pool_acquire(&pool, &c)) < 0) goto done;
 *   ... orc_pg_query(...) ...
 *   orc_pg_pool_release(&pool, c);
 */
struct orc_pg_pool {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	char *conninfo;
	PGconn **idle;
	int nidle;
	int size;
	int open;      /* connections that exist (idle + in use) */
	unsigned long long waits;     /* acquires that found no free connection */
	unsigned long long timeouts;  /* ... and gave up (ORC_EUNAVAIL) */
};

/* A consistent snapshot of a pool's use (for metrics). */
struct orc_pg_pool_stats {
	int size, open, idle;
	unsigned long long waits, timeouts;
};
void orc_pg_pool_stats(struct orc_pg_pool_stats *out, struct orc_pg_pool *pool);

/* Allocates the pool (it connects lazily); orc_pg_pool_release_all frees it. */
int orc_pg_pool_open(struct orc_pg_pool *pool, const char *conninfo, int size);
void orc_pg_pool_release_all(struct orc_pg_pool *pool);
/* Waits up to 10 s for a free connection; ORC_EUNAVAIL if the database
 * cannot be reached. */
int orc_pg_pool_acquire(struct orc_pg_pool *pool, PGconn **out);
/* Return c to the pool; a broken connection is closed and replaced later. */
void orc_pg_pool_release(struct orc_pg_pool *pool, PGconn *c);

/* Connect once (for tools and LISTEN connections). The connection
 * prepares the statements orc_pg_query runs on it (pgstmt.h). */
int orc_pg_connect(PGconn **out, const char *conninfo);

/*
 * Run one parameterised statement (text parameters; NULL = SQL NULL).
 * Maps failures: unique violation -> ORC_ECONFLICT, check/format errors ->
 * ORC_EINVALID, connection loss -> ORC_EUNAVAIL, others -> ORC_ERROR; the
 * server's message is logged. *out (if not NULL) gets the result on
 * success, which the caller PQclear()s. A text is prepared on its
 * connection the first time and only executed after (pgstmt.h).
 */
int orc_pg_query(PGresult **out, PGconn *c, const char *sql, int nparams,
		 const char *const *params);
/* Same, with per-parameter lengths and formats (1 = binary, for bytea). */
int orc_pg_query_bin(PGresult **out, PGconn *c, const char *sql, int nparams,
		     const char *const *params, const int *lengths, const int *formats);
/* orc_pg_query() of a statement that answers one row: that row's result
 * in *out, or ORC_ENOTFOUND when it returned none or more. */
int orc_pg_query_one(PGresult **out, PGconn *c, const char *sql, int nparams,
		     const char *const *params);
/* orc_pg_query_one() on a connection of pool, given back at once. */
int orc_pg_pool_query_one(PGresult **out, struct orc_pg_pool *pool, const char *sql, int nparams,
			  const char *const *params);
/* BEGIN / COMMIT / ROLLBACK. */
int orc_pg_begin(PGconn *c);
int orc_pg_commit(PGconn *c);
void orc_pg_rollback(PGconn *c);
#endif
