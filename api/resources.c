/*
 * Service state beyond liveness (service.c has / and /health):
 *
 *   GET /ready      readiness: the database answers AND an orchard-controller
 *                   holds the leader lock (the advisory lock of
 *                   controller/leader.h, seen in pg_locks). 200, or 503 with
 *                   the reason. Public: nginx does not authenticate it (a
 *                   load balancer's probe has no key), and it needs no tenant.
 *   GET /resources  capacity in Orchard's shape (status "ok", nodes,
 *                   total_capacity, total_allocatable, total_requested,
 *                   available, sandbox_pods as a list of pods), from the
 *                   database (live sandboxes and what they were given) and
 *                   this host (online cpus, physical memory), plus ours:
 *                   totals, allocated, sandboxes by state and the caller's
 *                   tenant with its quotas, usage (each tenant-wide quota
 *                   against its use in `quotas`), weight and queued
 *                   sandboxes, and admission: the capacity the controller
 *                   admits into and the queue depth; execs: its exec
 *                   limits in effect (exec_limit.c) and its execs running
 *                   and queued, max_execs and max_queued_execs also in
 *                   `quotas`. sandbox_pods lists
 *                   only the caller's own sandboxes (tenants never see each
 *                   other's), at most POD_LIST_MAX of them.
 */
#include <limits.h>
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

#define POD_LIST_MAX 1000

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

/* Orchard's {cpu (cores), memory_bytes}. */
static json_object *orchard_capacity(int64_t cpu_millis, int64_t memory_bytes)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "cpu", json_object_new_double((double)cpu_millis / 1000.0));
	json_object_object_add(o, "memory_bytes", json_object_new_int64(memory_bytes));
	return o;
}

/* Orchard's nodes: this host, whose capacity is all allocatable. */
static json_object *host_nodes(int64_t cpu_millis, int64_t memory_bytes)
{
	json_object *nodes = json_object_new_array(), *n = json_object_new_object();
	char host[HOST_NAME_MAX + 1];

	if (gethostname(host, sizeof(host)) < 0)
		snprintf(host, sizeof(host), "localhost");
	host[HOST_NAME_MAX] = '\0';
	json_object_object_add(n, "name", json_object_new_string(host));
	json_object_object_add(n, "capacity", orchard_capacity(cpu_millis, memory_bytes));
	json_object_object_add(n, "allocatable", orchard_capacity(cpu_millis, memory_bytes));
	json_object_array_add(nodes, n);
	return nodes;
}

enum { P_ID, P_POD, P_NAMESPACE, P_STATE, P_CPU, P_MEM };

/* Orchard's sandbox_pods: the caller's live sandboxes, oldest first; sets
 * *truncated when there are more than POD_LIST_MAX. */
static int tenant_pods(json_object **out, int *truncated, struct api_req *r, const char *tenant)
{
	char limit[16];
	const char *params[2] = { tenant, limit };
	json_object *list, *p;
	PGresult *res = NULL;
	PGconn *db = NULL;
	int i, n, err;

	snprintf(limit, sizeof(limit), "%d", POD_LIST_MAX + 1);
	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		return err;
	err = orc_pg_query(&res, db,
		"SELECT s.id, coalesce(s.driver_handle, ''), t.name, s.state, s.cpu_millis,"
		" s.memory_bytes FROM sandboxes s JOIN tenants t ON t.id = s.tenant_id"
		" WHERE s.tenant_id = $1::bigint AND s.state IN ('pending', 'ready')"
		" ORDER BY s.created_at, s.id LIMIT $2::int", 2, params);
	orc_pg_pool_release(&api_server.db, db);
	if (err < 0)
		return err;
	api_own_pg(r, res);
	n = PQntuples(res);
	*truncated = n > POD_LIST_MAX;
	list = json_object_new_array();
	for (i = 0; i < n && i < POD_LIST_MAX; i++) {
		p = json_object_new_object();
		json_object_object_add(p, "name", json_object_new_string(
			*PQgetvalue(res, i, P_POD) ? PQgetvalue(res, i, P_POD) : PQgetvalue(res, i, P_ID)));
		json_object_object_add(p, "namespace", json_object_new_string(PQgetvalue(res, i, P_NAMESPACE)));
		json_object_object_add(p, "phase", json_object_new_string(
			strcmp(PQgetvalue(res, i, P_STATE), "ready") ? "Pending" : "Running"));
		json_object_object_add(p, "cpu_request", json_object_new_double(
			(double)strtoll(PQgetvalue(res, i, P_CPU), NULL, 10) / 1000.0));
		json_object_object_add(p, "memory_request_bytes", json_object_new_int64(
			strtoll(PQgetvalue(res, i, P_MEM), NULL, 10)));
		json_object_object_add(p, "sandbox_id", json_object_new_string(PQgetvalue(res, i, P_ID)));
		json_object_object_add(p, "status", json_object_new_string(PQgetvalue(res, i, P_STATE)));
		json_object_array_add(list, p);
	}
	*out = list;
	return 0;
}

enum {
	R_LIVE, R_CPU, R_MEM, R_PENDING, R_READY, R_FAILED, R_DELETING,
	R_TENANT, R_MAX_SB, R_MAX_CPU, R_MAX_MEM, R_T_LIVE, R_T_CPU, R_T_MEM,
	R_QUEUED, R_T_QUEUED, R_WEIGHT, R_CAP_CPU, R_CAP_MEM, R_CAP_NODE_CPU, R_CAP_NODE_MEM,
	R_ADM_CPU, R_ADM_MEM, R_MAX_TOTAL_CPU, R_MAX_TOTAL_MEM, R_MAX_QUEUED, R_MAX_RATE, R_T_RECENT,
};

/* The tenant-wide quotas (quota.c) with what the tenant uses of each. */
static const struct {
	const char *name;
	int limit, used;
} tenant_quotas[] = {
	{ "max_sandboxes", R_MAX_SB, R_T_LIVE },
	{ "max_total_cpu_millis", R_MAX_TOTAL_CPU, R_T_CPU },
	{ "max_total_memory_bytes", R_MAX_TOTAL_MEM, R_T_MEM },
	{ "max_queued", R_MAX_QUEUED, R_T_QUEUED },
	{ "max_creates_per_minute", R_MAX_RATE, R_T_RECENT },
};

/* {quota: {limit (null: none), used}} of the caller's tenant. */
static json_object *quota_usage(PGresult *res)
{
	json_object *o = json_object_new_object(), *q;
	size_t i;

	for (i = 0; i < sizeof(tenant_quotas) / sizeof(*tenant_quotas); i++) {
		q = json_object_new_object();
		json_object_object_add(q, "limit", nullable(res, tenant_quotas[i].limit));
		json_object_object_add(q, "used", json_object_new_int64(col_i64(res, tenant_quotas[i].used)));
		json_object_object_add(o, tenant_quotas[i].name, q);
	}
	return o;
}

/* Ours: what the controller admits into (docs/controller.md, Admission);
 * capacity is null until a controller of this driver has reported it. */
static json_object *admission(PGresult *res)
{
	json_object *a = json_object_new_object(), *node = NULL, *cap = NULL;

	if (!PQgetisnull(res, 0, R_CAP_CPU)) {
		cap = capacity(col_i64(res, R_CAP_CPU), col_i64(res, R_CAP_MEM));
		node = capacity(col_i64(res, R_CAP_NODE_CPU), col_i64(res, R_CAP_NODE_MEM));
	}
	json_object_object_add(a, "driver", json_object_new_string(api_server.driver));
	json_object_object_add(a, "capacity", cap);
	json_object_object_add(a, "largest_node", node);
	json_object_object_add(a, "admitted", capacity(col_i64(res, R_ADM_CPU), col_i64(res, R_ADM_MEM)));
	json_object_object_add(a, "queued", json_object_new_int64(col_i64(res, R_QUEUED)));
	return a;
}

enum { X_SB, X_TN, X_QSB, X_QTN, X_RUNNING, X_QUEUED };

/* The tenant's exec limits in effect (null: none) and its open execs,
 * in t.execs and as two more quotas[]. */
static int exec_usage(json_object *t, json_object *quotas, const char *tenant)
{
	const char *params[5] = { tenant };
	json_object *o, *q;
	PGresult *res = NULL;
	int err;

	api_exec_limit_params(params + 1);
	if ((err = orc_pg_pool_query_one(&res, &api_server.db,
			"WITH lim AS (" API_EXEC_LIMIT_SQL("$1::bigint", "$2", "$3", "$4", "$5") ")"
			" SELECT lim.sb, lim.tn, lim.qsb, lim.qtn,"
			" count(*) FILTER (WHERE j.status = 'running'), count(*) FILTER (WHERE j.status = 'queued')"
			" FROM lim LEFT JOIN jobs j ON j.tenant_id = lim.id AND j.status IN ('queued', 'running')"
			" GROUP BY lim.sb, lim.tn, lim.qsb, lim.qtn", 5, params)) < 0)
		return err;
	o = json_object_new_object();
	json_object_object_add(o, "running", json_object_new_int64(col_i64(res, X_RUNNING)));
	json_object_object_add(o, "queued", json_object_new_int64(col_i64(res, X_QUEUED)));
	json_object_object_add(o, "max_execs_per_sandbox", nullable(res, X_SB));
	json_object_object_add(o, "max_execs", nullable(res, X_TN));
	json_object_object_add(o, "max_queued_execs_per_sandbox", nullable(res, X_QSB));
	json_object_object_add(o, "max_queued_execs", nullable(res, X_QTN));
	json_object_object_add(t, "execs", o);
	q = json_object_new_object();
	json_object_object_add(q, "limit", nullable(res, X_TN));
	json_object_object_add(q, "used", json_object_new_int64(col_i64(res, X_RUNNING)));
	json_object_object_add(quotas, "max_execs", q);
	q = json_object_new_object();
	json_object_object_add(q, "limit", nullable(res, X_QTN));
	json_object_object_add(q, "used", json_object_new_int64(col_i64(res, X_QUEUED)));
	json_object_object_add(quotas, "max_queued_execs", q);
	PQclear(res);
	return 0;
}

int api_resources_get(struct api_req *r)
{
	char tenant[24];
	const char *params[2] = { tenant, api_server.driver };
	json_object *o, *totals, *by_state, *t, *usage, *quotas, *pods = NULL;
	PGresult *res = NULL;
	int64_t host_cpu, host_mem, cpu, mem;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_PHYS_PAGES);
	long page = sysconf(_SC_PAGESIZE);
	int truncated = 0, err;

	host_cpu = (ncpu > 0 ? ncpu : 1) * 1000;
	host_mem = pages > 0 && page > 0 ? (int64_t)pages * page : 0;
	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	err = orc_pg_pool_query_one(&res, &api_server.db,
		"WITH s AS (SELECT tenant_id, state, cpu_millis, memory_bytes, admitted_at FROM sandboxes"
		" WHERE state <> 'deleted'),"
		" q AS (SELECT * FROM s WHERE state = 'pending' AND admitted_at IS NULL),"
		" adm AS (SELECT * FROM s WHERE admitted_at IS NOT NULL AND state IN ('pending', 'ready', 'deleting')),"
		" cap AS (SELECT * FROM driver_capacity WHERE driver = $2),"
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
		" (SELECT sum(memory_bytes) FROM live WHERE tenant_id = t.id),"
		" (SELECT count(*) FROM q), (SELECT count(*) FROM q WHERE tenant_id = t.id), t.weight,"
		" (SELECT cpu_millis FROM cap), (SELECT memory_bytes FROM cap),"
		" (SELECT node_cpu_millis FROM cap), (SELECT node_memory_bytes FROM cap),"
		" (SELECT sum(cpu_millis) FROM adm), (SELECT sum(memory_bytes) FROM adm),"
		" t.max_total_cpu_millis, t.max_total_memory_bytes, t.max_queued, t.max_creates_per_minute,"
		" (SELECT count(*) FROM sandboxes r WHERE r.tenant_id = t.id"
		" AND r.created_at > now() - interval '60 seconds')"
		" FROM tenants t WHERE t.id = $1", 2, params);
	if (err == ORC_ENOTFOUND)
		return api_reply_error(r, err, "tenant not found");
	if (err < 0)
		return api_reply_error(r, err, "cannot read the resources");
	api_own_pg(r, res);
	if ((err = tenant_pods(&pods, &truncated, r, tenant)) < 0)
		return api_reply_error(r, err, "cannot read the resources");

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
	json_object_object_add(o, "nodes", host_nodes(host_cpu, host_mem));
	json_object_object_add(o, "total_capacity", orchard_capacity(host_cpu, host_mem));
	json_object_object_add(o, "total_allocatable", orchard_capacity(host_cpu, host_mem));
	json_object_object_add(o, "total_requested", orchard_capacity(cpu, mem));
	json_object_object_add(o, "sandbox_pods", pods);
	json_object_object_add(o, "sandbox_pods_truncated", json_object_new_boolean(truncated));
	json_object_object_add(o, "live_sandboxes", json_object_new_int64(col_i64(res, R_LIVE)));
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
	json_object_object_add(t, "max_total_cpu_millis", nullable(res, R_MAX_TOTAL_CPU));
	json_object_object_add(t, "max_total_memory_bytes", nullable(res, R_MAX_TOTAL_MEM));
	json_object_object_add(t, "max_queued", nullable(res, R_MAX_QUEUED));
	json_object_object_add(t, "max_creates_per_minute", nullable(res, R_MAX_RATE));
	json_object_object_add(usage, "sandboxes", json_object_new_int64(col_i64(res, R_T_LIVE)));
	json_object_object_add(usage, "cpu_millis", json_object_new_int64(col_i64(res, R_T_CPU)));
	json_object_object_add(usage, "memory_bytes", json_object_new_int64(col_i64(res, R_T_MEM)));
	json_object_object_add(usage, "queued", json_object_new_int64(col_i64(res, R_T_QUEUED)));
	json_object_object_add(usage, "creates_last_minute", json_object_new_int64(col_i64(res, R_T_RECENT)));
	json_object_object_add(t, "usage", usage);
	json_object_object_add(t, "weight", json_object_new_int64(col_i64(res, R_WEIGHT)));
	json_object_object_add(t, "queued", json_object_new_int64(col_i64(res, R_T_QUEUED)));
	quotas = quota_usage(res);
	json_object_object_add(t, "quotas", quotas);
	if ((err = exec_usage(t, quotas, tenant)) < 0)
		return api_reply_error(r, err, "cannot read the resources");
	json_object_object_add(o, "tenant", t);
	json_object_object_add(o, "admission", admission(res));
	return api_reply_json(r, 200, o);
}
