/*
 * Service state beyond liveness (service.c has / and /health):
 *
 *   GET /ready      readiness: the database answers AND an orchard-controller
 *                   holds the leader lock (the advisory lock of
 *                   controller/leader.h, seen in pg_locks). 200, or 503 with
 *                   the reason. Needs no tenant, so it works whether or not
 *                   nginx authenticates it.
 *   GET /resources  capacity in Orchard's shape (status "ok", totals,
 *                   available, sandbox_pods), from the database (live
 *                   sandboxes and what they were given) and this host
 *                   (online cpus, physical memory), plus the caller's tenant
 *                   with its quotas and usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api.h"
#include "err.h"
#include "json.h"

/* controller/leader.h: CTL_LEADER_LOCK. A bigint advisory lock shows in
 * pg_locks as classid = high 32 bits, objid = low 32 bits, objsubid = 1. */
#define CONTROLLER_LOCK 0x6f72636861726401ULL

int api_ready_get(struct api_req *r)
{
	char hi[24], lo[24];
	const char *params[2] = { hi, lo };
	json_object *o, *checks;
	PGresult *res = NULL;
	PGconn *db = NULL;
	int err;

	snprintf(hi, sizeof(hi), "%llu", (unsigned long long)(CONTROLLER_LOCK >> 32));
	snprintf(lo, sizeof(lo), "%llu", (unsigned long long)(CONTROLLER_LOCK & 0xffffffffULL));
	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		return api_reply_error(r, ORC_EUNAVAIL, "not ready: the database is unreachable");
	err = orc_pg_query(&res, db,
		"SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
		" AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
		" AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1)", 2, params);
	orc_pg_pool_release(&api_server.db, db);
	if (err < 0)
		return api_reply_error(r, ORC_EUNAVAIL, "not ready: the database does not answer");
	api_own_pg(r, res);
	if (strcmp(PQgetvalue(res, 0, 0), "t"))
		return api_reply_error(r, ORC_EUNAVAIL, "not ready: no orchard-controller holds the "
				       "leader lock (is one running?)");
	o = api_own_json(r, json_object_new_object());
	checks = json_object_new_object();
	json_object_object_add(o, "status", json_object_new_string("ready"));
	json_object_object_add(checks, "database", json_object_new_string("ok"));
	json_object_object_add(checks, "controller", json_object_new_string("ok"));
	json_object_object_add(o, "checks", checks);
	return api_reply_json(r, 200, o);
}

static int64_t col_i64(PGresult *res, int col)
{
	return PQgetisnull(res, 0, col) ? 0 : strtoll(PQgetvalue(res, 0, col), NULL, 10);
}

static json_object *nullable(PGresult *res, int col)
{
	return PQgetisnull(res, 0, col) ? NULL : json_object_new_int64(col_i64(res, col));
}

static json_object *capacity(int64_t cpu_millis, int64_t memory_bytes)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "cpu", json_object_new_double((double)cpu_millis / 1000.0));
	json_object_object_add(o, "cpu_millis", json_object_new_int64(cpu_millis));
	json_object_object_add(o, "memory_bytes", json_object_new_int64(memory_bytes));
	return o;
}

enum {
	R_LIVE, R_CPU, R_MEM, R_PENDING, R_READY, R_FAILED, R_DELETING,
	R_TENANT, R_MAX_SB, R_MAX_CPU, R_MAX_MEM, R_T_LIVE, R_T_CPU, R_T_MEM,
};

int api_resources_get(struct api_req *r)
{
	char tenant[24];
	const char *params[1] = { tenant };
	json_object *o, *totals, *by_state, *t, *usage;
	PGresult *res = NULL;
	PGconn *db = NULL;
	int64_t host_cpu, host_mem, cpu, mem;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_PHYS_PAGES);
	long page = sysconf(_SC_PAGESIZE);
	int err;

	host_cpu = (ncpu > 0 ? ncpu : 1) * 1000;
	host_mem = pages > 0 && page > 0 ? (int64_t)pages * page : 0;
	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		return api_reply_error(r, err, "database unavailable");
	err = orc_pg_query(&res, db,
		"WITH s AS (SELECT tenant_id, state, cpu_millis, memory_bytes FROM sandboxes"
		" WHERE state <> 'deleted'),"
		" live AS (SELECT * FROM s WHERE state IN ('pending', 'ready'))"
		" SELECT (SELECT count(*) FROM live), (SELECT sum(cpu_millis) FROM live),"
		" (SELECT sum(memory_bytes) FROM live),"
		" (SELECT count(*) FROM s WHERE state = 'pending'),"
		" (SELECT count(*) FROM s WHERE state = 'ready'),"
		" (SELECT count(*) FROM s WHERE state = 'failed'),"
		" (SELECT count(*) FROM s WHERE state = 'deleting'),"
		" t.name, t.max_sandboxes, t.max_cpu_millis, t.max_memory_bytes,"
		" (SELECT count(*) FROM live WHERE tenant_id = t.id),"
		" (SELECT sum(cpu_millis) FROM live WHERE tenant_id = t.id),"
		" (SELECT sum(memory_bytes) FROM live WHERE tenant_id = t.id)"
		" FROM tenants t WHERE t.id = $1", 1, params);
	orc_pg_pool_release(&api_server.db, db);
	if (err < 0)
		return api_reply_error(r, err, "cannot read the resources");
	api_own_pg(r, res);
	if (PQntuples(res) != 1)
		return api_reply_error(r, ORC_ENOTFOUND, "tenant not found");

	cpu = col_i64(res, R_CPU);
	mem = col_i64(res, R_MEM);
	o = api_own_json(r, json_object_new_object());
	json_object_object_add(o, "status", json_object_new_string("ok"));
	totals = capacity(host_cpu, host_mem);
	json_object_object_add(totals, "nodes", json_object_new_int(1));
	json_object_object_add(o, "totals", totals);
	json_object_object_add(o, "allocated", capacity(cpu, mem));
	json_object_object_add(o, "available", capacity(host_cpu > cpu ? host_cpu - cpu : 0,
						       host_mem > mem ? host_mem - mem : 0));
	json_object_object_add(o, "sandbox_pods", json_object_new_int64(col_i64(res, R_LIVE)));
	by_state = json_object_new_object();
	json_object_object_add(by_state, "pending", json_object_new_int64(col_i64(res, R_PENDING)));
	json_object_object_add(by_state, "ready", json_object_new_int64(col_i64(res, R_READY)));
	json_object_object_add(by_state, "failed", json_object_new_int64(col_i64(res, R_FAILED)));
	json_object_object_add(by_state, "deleting", json_object_new_int64(col_i64(res, R_DELETING)));
	json_object_object_add(o, "sandboxes", by_state);

	t = json_object_new_object();
	usage = json_object_new_object();
	json_object_object_add(t, "name", json_object_new_string(PQgetvalue(res, 0, R_TENANT)));
	json_object_object_add(t, "max_sandboxes", nullable(res, R_MAX_SB));
	json_object_object_add(t, "max_cpu_millis", nullable(res, R_MAX_CPU));
	json_object_object_add(t, "max_memory_bytes", nullable(res, R_MAX_MEM));
	json_object_object_add(usage, "sandboxes", json_object_new_int64(col_i64(res, R_T_LIVE)));
	json_object_object_add(usage, "cpu_millis", json_object_new_int64(col_i64(res, R_T_CPU)));
	json_object_object_add(usage, "memory_bytes", json_object_new_int64(col_i64(res, R_T_MEM)));
	json_object_object_add(t, "usage", usage);
	json_object_object_add(o, "tenant", t);
	return api_reply_json(r, 200, o);
}
