/*
 * Leader election with a PostgreSQL advisory lock (leader.h).
 */
#include "leader.h"

#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "ctl.h"
#include "err.h"
#include "log.h"
#include "pgpool.h"
#include "strutil.h"

#define RETRY_MS 1000
#define STANDBY_LOG_EVERY_MS 60000

/* 1 when we got the lock, 0 when someone else holds it. */
static int try_lock(PGconn *c)
{
	char key[32];
	const char *params[1] = { key };
	PGresult *res = NULL;
	int got;

	snprintf(key, sizeof(key), "%lld", (long long)CTL_LEADER_LOCK);
	if (orc_pg_query(&res, c, "SELECT pg_try_advisory_lock($1::bigint)", 1, params) < 0)
		return ORC_EUNAVAIL;
	got = PQntuples(res) == 1 && !strcmp(PQgetvalue(res, 0, 0), "t");
	PQclear(res);
	return got;
}

int ctl_leader_acquire(PGconn **out, const char *conninfo)
{
	int64_t last_log = 0;
	PGconn *c = NULL;
	int got;

	while (!ctl_stopping) {
		if (!c && orc_pg_connect(&c, conninfo) < 0)
			c = NULL;
		if (c) {
			got = try_lock(c);
			if (got == 1) {
				orc_log(ORC_LOG_INFO, "leader: holding the controller lock", NULL);
				*out = c;
				return 0;
			}
			if (got < 0) {
				PQfinish(c);
				c = NULL;
			} else if (!last_log || orc_mono_ms() - last_log >= STANDBY_LOG_EVERY_MS) {
				orc_log(ORC_LOG_INFO, "standby: another controller holds the lock; "
					"retrying every second", NULL);
				last_log = orc_mono_ms();
			}
		}
		ctl_wait(NULL, 0, RETRY_MS);
	}
	if (c)
		PQfinish(c);
	return ORC_ETIMEOUT;
}

int ctl_leader_check(PGconn *c, int ping)
{
	PGnotify *n;

	if (!PQconsumeInput(c) || PQstatus(c) != CONNECTION_OK)
		goto lost;
	while ((n = PQnotifies(c)) != NULL)
		PQfreemem(n);
	if (ping && orc_pg_query(NULL, c, "SELECT 1", 0, NULL) < 0)
		goto lost;
	return 0;
lost:
	orc_log(ORC_LOG_ERROR, "leader: lost the connection holding the controller lock",
		"error", PQerrorMessage(c), NULL);
	return ORC_EUNAVAIL;
}
