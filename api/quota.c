/*
 * Tenant quotas, checked when a sandbox is created (sandbox_create.c):
 *
 *   tenants.max_sandboxes     live sandboxes (pending or ready) at once
 *   tenants.max_cpu_millis    cpu of one sandbox
 *   tenants.max_memory_bytes  memory of one sandbox
 *
 * NULL means unlimited. The check runs inside the creating transaction and
 * first locks the tenant's row, so two concurrent creates cannot both take
 * the last slot: the second one counts after the first has committed (READ
 * COMMITTED takes a new snapshot per statement). FOR NO KEY UPDATE does not
 * block the foreign-key checks of inserts that reference the tenant.
 */
#include <stdio.h>
#include <stdlib.h>

#include "api.h"
#include "err.h"

static int count_live(long long *out, PGconn *db, const char *const *params)
{
	PGresult *res = NULL;
	int err;

	if ((err = orc_pg_query(&res, db, "SELECT count(*) FROM sandboxes WHERE tenant_id = $1"
				" AND state IN ('pending', 'ready')", 1, params)) < 0)
		return err;
	*out = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	PQclear(res);
	return 0;
}

int api_quota_check(PGconn *db, int64_t tenant_id, int n, int64_t cpu_millis, int64_t memory_bytes,
		    char *msg, size_t msglen)
{
	char tenant[24];
	const char *params[1] = { tenant };
	PGresult *res = NULL;
	long long max_sb, max_cpu, max_mem, live;
	int err;

	snprintf(tenant, sizeof(tenant), "%lld", (long long)tenant_id);
	if ((err = orc_pg_query(&res, db, "SELECT name, max_sandboxes, max_cpu_millis, max_memory_bytes"
				" FROM tenants WHERE id = $1 FOR NO KEY UPDATE", 1, params)) < 0)
		return err;
	if (PQntuples(res) != 1) {
		PQclear(res);
		return ORC_ENOTFOUND;
	}
	if (!PQgetisnull(res, 0, 2)) {
		max_cpu = strtoll(PQgetvalue(res, 0, 2), NULL, 10);
		if (cpu_millis > max_cpu) {
			snprintf(msg, msglen, "quota exceeded: max_cpu_millis of tenant \"%s\" is %lld per "
				 "sandbox; this sandbox asks for %lld", PQgetvalue(res, 0, 0), max_cpu,
				 (long long)cpu_millis);
			err = ORC_EQUOTA;
			goto done;
		}
	}
	if (!PQgetisnull(res, 0, 3)) {
		max_mem = strtoll(PQgetvalue(res, 0, 3), NULL, 10);
		if (memory_bytes > max_mem) {
			snprintf(msg, msglen, "quota exceeded: max_memory_bytes of tenant \"%s\" is %lld "
				 "per sandbox; this sandbox asks for %lld", PQgetvalue(res, 0, 0), max_mem,
				 (long long)memory_bytes);
			err = ORC_EQUOTA;
			goto done;
		}
	}
	if (PQgetisnull(res, 0, 1))
		goto done;
	max_sb = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
	if ((err = count_live(&live, db, params)) < 0)
		goto done;
	if (live + n > max_sb) {
		snprintf(msg, msglen, "quota exceeded: max_sandboxes of tenant \"%s\" is %lld and it has "
			 "%lld live sandboxes (pending or ready); %d more do not fit, delete some first",
			 PQgetvalue(res, 0, 0), max_sb, live, n);
		err = ORC_EQUOTA;
	}
done:
	PQclear(res);
	return err;
}
