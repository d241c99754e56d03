#ifndef ORC_PGSTMT_H
#define ORC_PGSTMT_H
#include <libpq-fe.h>
/*
 * Prepared statements per connection, behind orc_pg_query (pgpool.c).
 *
 * Every statement text is parsed and planned by the server once per
 * connection (PQprepare under a name derived from a hash of the text), then
 * only bound and executed (PQexecPrepared). The cache of what a connection
 * has prepared lives with the connection (libpq instance data), so it goes
 * away with it: a connection replaced after a PostgreSQL restart starts
 * with none, and PQreset forgets them. A statement that cannot be prepared
 * runs as before (unnamed, PQexecParams), and so does every statement when
 * ORCHARD_PG_PREPARE=0 (docs/configuration.md; for A/B measurements).
 */

/* Give c a statement cache (no-op when prepared statements are off or
 * libpq refuses). orc_pg_connect calls it for every connection. */
void orc_pg_stmt_attach(PGconn *c);

/* Like PQexecParams (never NULL: an out-of-memory result is an error
 * result); prepared when c has a cache. */
PGresult *orc_pg_stmt_exec(PGconn *c, const char *sql, int nparams, const char *const *params,
			   const int *lengths, const int *formats);

/* Statements c has prepared (0 without a cache). */
int orc_pg_stmt_count(PGconn *c);
/* Process totals: statements prepared, executions of prepared ones. */
void orc_pg_stmt_stats(unsigned long long *prepared, unsigned long long *executed);
#endif
