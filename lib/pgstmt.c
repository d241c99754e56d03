/*
 * Prepared statements per connection (pgstmt.h).
 *
 * Statements are named after a 64-bit FNV-1a hash of their text and kept in
 * a small open-addressing table per connection, holding the text too: a
 * text that only shares its hash with a prepared one runs unnamed, so a
 * collision costs speed, never a wrong statement. Entries are never removed
 * one by one; the table is cleared when the server may have lost them.
 *
 * A connection is used by one thread at a time (the pool hands it out), so
 * its table needs no lock. The table is libpq instance data of an event
 * procedure, which frees it in PQfinish and clears it in PQreset.
 *
 * The server can still lose statements we think it has (a DISCARD ALL by a
 * proxy, a DEALLOCATE) or refuse a cached plan after a schema change
 * ("cached plan must not change result type", 0A000). Either error marks
 * the table stale: outside a transaction the statement is run again
 * unnamed at once (it failed whole, so nothing ran twice); inside one the
 * transaction has failed anyway and its caller sees the error. A stale
 * connection prepares nothing until a DEALLOCATE ALL outside a transaction
 * has succeeded.
 */
#include "pgstmt.h"

#include <libpq-events.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"
#include "xalloc.h"

#define SLOTS 512        /* a power of two */
/* Statement texts are constants with parameters, a few dozen per program;
 * past this a text built per request would only grow the server's memory. */
#define MAX_STMTS 256
#define NAME_MAX_LEN 24  /* "orc_" + 16 hex digits */

struct stmt {
	uint64_t hash;
	char *sql;       /* NULL: a free slot */
};

struct stmt_cache {
	struct stmt slots[SLOTS];
	int count;
	int stale;       /* the server may hold statements we do not know */
};

static pthread_once_t enabled_once = PTHREAD_ONCE_INIT;
static int enabled;
static unsigned long long prepares, prepared_execs;   /* for metrics; racy reads are fine */

static void read_setting(void)
{
	const char *v = getenv("ORCHARD_PG_PREPARE");

	enabled = !(v && (!strcmp(v, "0") || !strcasecmp(v, "off") || !strcasecmp(v, "false") ||
			  !strcasecmp(v, "no")));
}

static void cache_clear(struct stmt_cache *sc)
{
	int i;

	if (!sc)
		return;
	for (i = 0; i < SLOTS; i++) {
		free(sc->slots[i].sql);
		sc->slots[i].sql = NULL;
	}
	sc->count = 0;
}

static int stmt_event(PGEventId id, void *info, void *pass)
{
	(void)pass;
	switch (id) {
	case PGEVT_REGISTER: {
		PGconn *c = ((PGEventRegister *)info)->conn;
		struct stmt_cache *sc = xcalloc(1, sizeof(*sc));

		if (!PQsetInstanceData(c, stmt_event, sc)) {
			free(sc);
			return 0;
		}
		return 1;
	}
	case PGEVT_CONNRESET:
		/* a new session: the server has none of them */
		cache_clear(PQinstanceData(((PGEventConnReset *)info)->conn, stmt_event));
		return 1;
	case PGEVT_CONNDESTROY: {
		struct stmt_cache *sc = PQinstanceData(((PGEventConnDestroy *)info)->conn, stmt_event);

		cache_clear(sc);
		free(sc);
		return 1;
	}
	default:
		return 1;
	}
}

void orc_pg_stmt_attach(PGconn *c)
{
	pthread_once(&enabled_once, read_setting);
	if (enabled && !PQregisterEventProc(c, stmt_event, "orchard statement cache", NULL))
		orc_log(ORC_LOG_WARN, "cannot attach the statement cache; statements run unprepared", NULL);
}

static uint64_t text_hash(const char *s)
{
	uint64_t h = 14695981039346656037ull;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

/*
 * The slot of sql: 1 when it is prepared, 0 when *slot is free for it, -1
 * when it cannot be prepared (its hash is another text's, or the table is
 * full).
 */
static int cache_find(int *slot, struct stmt_cache *sc, const char *sql, uint64_t h)
{
	unsigned i = (unsigned)h & (SLOTS - 1);

	for (; sc->slots[i].sql; i = (i + 1) & (SLOTS - 1)) {
		if (sc->slots[i].hash == h) {
			*slot = (int)i;
			return strcmp(sc->slots[i].sql, sql) ? -1 : 1;
		}
	}
	if (sc->count >= MAX_STMTS)
		return -1;
	*slot = (int)i;
	return 0;
}

static int state_is(const PGresult *res, const char *code)
{
	const char *s = PQresultErrorField(res, PG_DIAG_SQLSTATE);

	return s && !strcmp(s, code);
}

/* The server lost the statement, or will not run its cached plan. */
static int lost_statement(const PGresult *res)
{
	return state_is(res, "26000") || state_is(res, "0A000");
}

/* Outside a transaction: make the server forget everything, so the
 * table (now empty) is right again. */
static void cache_resync(PGconn *c, struct stmt_cache *sc)
{
	PGresult *res = PQexec(c, "DEALLOCATE ALL");

	if (PQresultStatus(res) == PGRES_COMMAND_OK)
		sc->stale = 0;
	PQclear(res);
}

static PGresult *exec_unnamed(PGconn *c, const char *sql, int nparams, const char *const *params,
			      const int *lengths, const int *formats)
{
	return PQexecParams(c, sql, nparams, NULL, params, lengths, formats, 0);
}

PGresult *orc_pg_stmt_exec(PGconn *c, const char *sql, int nparams, const char *const *params,
			   const int *lengths, const int *formats)
{
	struct stmt_cache *sc = PQinstanceData(c, stmt_event);
	PGTransactionStatusType ts = PQtransactionStatus(c);
	char name[NAME_MAX_LEN];
	PGresult *res;
	uint64_t h;
	int slot = 0, found;

	if (!sc || (ts != PQTRANS_IDLE && ts != PQTRANS_INTRANS))
		return exec_unnamed(c, sql, nparams, params, lengths, formats);
	if (sc->stale) {
		cache_clear(sc);
		if (ts == PQTRANS_IDLE)
			cache_resync(c, sc);
		if (sc->stale)
			return exec_unnamed(c, sql, nparams, params, lengths, formats);
	}
	h = text_hash(sql);
	if ((found = cache_find(&slot, sc, sql, h)) < 0)
		return exec_unnamed(c, sql, nparams, params, lengths, formats);
	snprintf(name, sizeof(name), "orc_%016llx", (unsigned long long)h);
	if (!found) {
		/* Types come from the text ($1::int) or the server's inference,
		 * as for PQexecParams, so one text always has one set. */
		res = PQprepare(c, name, sql, nparams, NULL);
		if (PQresultStatus(res) != PGRES_COMMAND_OK) {
			if (state_is(res, "42P05"))   /* a name we do not know of */
				sc->stale = 1;
			/* Outside a transaction nothing is lost: run it as
			 * before, and let that answer (it may be the same error). */
			if (ts == PQTRANS_IDLE && PQstatus(c) == CONNECTION_OK) {
				PQclear(res);
				return exec_unnamed(c, sql, nparams, params, lengths, formats);
			}
			return res;
		}
		PQclear(res);
		sc->slots[slot].hash = h;
		sc->slots[slot].sql = xstrdup(sql);
		sc->count++;
		__atomic_add_fetch(&prepares, 1, __ATOMIC_RELAXED);
	}
	res = PQexecPrepared(c, name, nparams, params, lengths, formats, 0);
	__atomic_add_fetch(&prepared_execs, 1, __ATOMIC_RELAXED);
	if (lost_statement(res) && PQstatus(c) == CONNECTION_OK) {
		sc->stale = 1;
		if (ts == PQTRANS_IDLE) {
			PQclear(res);
			cache_clear(sc);
			cache_resync(c, sc);
			return exec_unnamed(c, sql, nparams, params, lengths, formats);
		}
	}
	return res;
}

void orc_pg_stmt_stats(unsigned long long *prepared, unsigned long long *executed)
{
	*prepared = __atomic_load_n(&prepares, __ATOMIC_RELAXED);
	*executed = __atomic_load_n(&prepared_execs, __ATOMIC_RELAXED);
}

int orc_pg_stmt_count(PGconn *c)
{
	struct stmt_cache *sc = PQinstanceData(c, stmt_event);

	return sc ? sc->count : 0;
}
