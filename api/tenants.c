/*
 * Admin routes for tenants and their quotas (admin keys only; the router
 * answers 403 to others):
 *
 *   GET   /tenants          every tenant, by name, with its usage
 *   POST  /tenants          {name, quota fields?} -> 201
 *   GET   /tenants/{name}   one tenant, with an ETag over its settings
 *   PATCH /tenants/{name}   change quotas; a field set to null removes that quota;
 *                           If-Match: only while the ETag still holds (412)
 *
 * Besides the quotas, default_checkpoints ("none", "every_step" or null) is
 * the step-checkpoint policy of the tenant's sandboxes created without
 * "checkpoints" (docs/checkpoints.md); it is read when each step ends, so a
 * change reaches those sandboxes at their next step.
 *
 * The quota fields are the quotas[] below, each a tenants column of its
 * name (quota.c and exec_limit.c say what each limits). Sandbox quotas are
 * enforced when sandboxes are created (quota.c), exec limits when execs are
 * accepted and started (exec_limit.c; null there: the server default); lowering one
 * never touches sandboxes that already exist. Unknown fields are 422 here
 * (these routes are ours, and a misspelt quota must not pass silently).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "buf.h"
#include "checkpoint.h"
#include "err.h"
#include "json.h"
#include "pg_json.h"
#include "sha256.h"
#include "strutil.h"
#include "xalloc.h"

#define TENANT_COLS \
	"t.id, t.name, t.max_sandboxes, t.max_cpu_millis, t.max_memory_bytes, t.max_total_cpu_millis, " \
	"t.max_total_memory_bytes, t.max_queued, t.max_creates_per_minute, t.max_execs_per_sandbox, " \
	"t.max_execs, t.max_queued_execs_per_sandbox, t.max_queued_execs, t.weight, " \
	"to_char(t.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), " \
	"(SELECT count(*) FROM sandboxes s WHERE s.tenant_id = t.id AND s.state IN ('pending', 'ready')), " \
	"(SELECT coalesce(sum(s.cpu_millis), 0) FROM sandboxes s WHERE s.tenant_id = t.id" \
	" AND s.state IN ('pending', 'ready')), " \
	"(SELECT coalesce(sum(s.memory_bytes), 0) FROM sandboxes s WHERE s.tenant_id = t.id" \
	" AND s.state IN ('pending', 'ready')), " \
	"t.default_checkpoints"

enum { T_ID, T_NAME, T_QUOTAS, T_CREATED = T_QUOTAS + 12, T_LIVE, T_CPU, T_MEM, T_CHECKPOINTS };

/* The quota fields, in the order of their tenants columns (TENANT_COLS);
 * the weight in the admission queue's fair share is one too, never null. */
static const struct {
	const char *field;
	int64_t min, max;
	const char *type;            /* of the column */
	const char *dflt;            /* when not given at creation; NULL: may be null */
} quotas[] = {
	{ "max_sandboxes", 0, 1000000, "int", NULL },
	{ "max_cpu_millis", 1, INT32_MAX, "int", NULL },
	{ "max_memory_bytes", 1, INT64_MAX, "bigint", NULL },
	{ "max_total_cpu_millis", 1, INT64_MAX, "bigint", NULL },
	{ "max_total_memory_bytes", 1, INT64_MAX, "bigint", NULL },
	{ "max_queued", 0, 1000000, "int", NULL },
	{ "max_creates_per_minute", 0, 1000000, "int", NULL },
	{ "max_execs_per_sandbox", 1, 1000000, "int", NULL },
	{ "max_execs", 1, 1000000, "int", NULL },
	{ "max_queued_execs_per_sandbox", 0, 1000000, "int", NULL },
	{ "max_queued_execs", 0, 1000000, "int", NULL },
	{ "weight", 1, 1000, "int", "1" },
};
#define QUOTA_FIELDS "max_sandboxes, max_cpu_millis, max_memory_bytes, max_total_cpu_millis, " \
	"max_total_memory_bytes, max_queued, max_creates_per_minute, max_execs_per_sandbox, max_execs, " \
	"max_queued_execs_per_sandbox, max_queued_execs, weight"
#define NQUOTAS (sizeof(quotas) / sizeof(*quotas))
_Static_assert(NQUOTAS == T_CREATED - T_QUOTAS, "TENANT_COLS lists every quota");

/* INSERT: $1 the name, $2.. the quotas, then default_checkpoints. */
static char *insert_sql(void)
{
	struct orc_buf cols = ORC_BUF_INIT, vals = ORC_BUF_INIT;
	char *sql;
	size_t i;

	for (i = 0; i < NQUOTAS; i++) {
		orc_buf_addf(&cols, ", %s", quotas[i].field);
		orc_buf_addf(&vals, ", coalesce($%zu::%s, %s)", i + 2, quotas[i].type,
			     quotas[i].dflt ? quotas[i].dflt : "NULL");
	}
	sql = xasprintf("INSERT INTO tenants (name%s, default_checkpoints) VALUES ($1%s, $%zu)",
			cols.ptr, vals.ptr, NQUOTAS + 2);
	orc_buf_release(&cols);
	orc_buf_release(&vals);
	return sql;
}

/* UPDATE of the tenant named $1: quota i is set to $(3+2i) when $(2+2i),
 * default_checkpoints to the last parameter when the one before is true. */
static char *update_sql(void)
{
	struct orc_buf set = ORC_BUF_INIT;
	char *sql;
	size_t i;

	for (i = 0; i < NQUOTAS; i++)
		orc_buf_addf(&set, "%s %s = CASE WHEN $%zu::boolean THEN $%zu::%s ELSE %s END",
			     i ? "," : "", quotas[i].field, 2 + 2 * i, 3 + 2 * i, quotas[i].type,
			     quotas[i].field);
	orc_buf_addf(&set, ", default_checkpoints = CASE WHEN $%zu::boolean THEN $%zu"
		     " ELSE default_checkpoints END", 2 + 2 * NQUOTAS, 3 + 2 * NQUOTAS);
	sql = xasprintf("UPDATE tenants SET%s WHERE name = $1 AND deleted_at IS NULL RETURNING id",
			set.ptr);
	orc_buf_release(&set);
	return sql;
}

struct quota_patch {
	int given[NQUOTAS];            /* the field is in the body */
	char value[NQUOTAS][24];       /* "" = null: no quota */
	int checkpoints_given;         /* default_checkpoints is in the body */
	const char *checkpoints;       /* its value; NULL: null */
};

static json_object *tenant_view(PGresult *res, int row)
{
	json_object *o = json_object_new_object(), *usage = json_object_new_object();
	size_t i;

	json_object_object_add(o, "id", api_col_int(res, row, T_ID));
	json_object_object_add(o, "name", json_object_new_string(PQgetvalue(res, row, T_NAME)));
	for (i = 0; i < NQUOTAS; i++)
		json_object_object_add(o, quotas[i].field, api_col_int(res, row, T_QUOTAS + (int)i));
	json_object_object_add(o, "default_checkpoints", PQgetisnull(res, row, T_CHECKPOINTS) ? NULL :
			       json_object_new_string(PQgetvalue(res, row, T_CHECKPOINTS)));
	json_object_object_add(o, "created_at", json_object_new_string(PQgetvalue(res, row, T_CREATED)));
	json_object_object_add(usage, "sandboxes", api_col_int(res, row, T_LIVE));
	json_object_object_add(usage, "cpu_millis", api_col_int(res, row, T_CPU));
	json_object_object_add(usage, "memory_bytes", api_col_int(res, row, T_MEM));
	json_object_object_add(o, "usage", usage);
	return o;
}

/* Read the quota fields of body; reject any field not in allowed. */
static int parse_quotas(struct quota_patch *p, json_object *body, const char *const *allowed,
			struct api_req *r)
{
	size_t i;
	int err;

	memset(p, 0, sizeof(*p));
	json_object_object_foreach(body, k, v) {
		int known = 0;
		(void)v;
		for (i = 0; allowed[i]; i++)
			known |= !strcmp(k, allowed[i]);
		for (i = 0; i < NQUOTAS; i++)
			known |= !strcmp(k, quotas[i].field);
		if (!known)
			return api_fail(r, ORC_EINVALID, "unknown field '%.64s' (quota fields: "
					QUOTA_FIELDS "; and default_checkpoints)", k);
	}
	for (i = 0; i < NQUOTAS; i++) {
		int64_t n = 0;
		json_object *val = NULL;
		p->given[i] = json_object_object_get_ex(body, quotas[i].field, &val);
		if (p->given[i] && !val && quotas[i].dflt)
			return api_fail(r, ORC_EINVALID, "field '%s' cannot be null (%lld..%lld)",
					quotas[i].field, (long long)quotas[i].min,
					(long long)quotas[i].max);
		if ((err = orc_json_get_int(body, quotas[i].field, &n, quotas[i].min, quotas[i].max,
					    API_ERRBUF(r))) < 0)
			return err;
		if (err == 0)
			snprintf(p->value[i], sizeof(p->value[i]), "%lld", (long long)n);
	}
	p->checkpoints_given = json_object_object_get_ex(body, "default_checkpoints", NULL);
	return api_step_mode_parse(&p->checkpoints, body, "default_checkpoints", r);
}

/* A POST /tenants body: a DNS-label name and the quotas; 0, or ORC_EINVALID (api_fail). */
static int parse_tenant_create(const char **name, struct quota_patch *p, json_object *body,
			       struct api_req *r)
{
	static const char *const allowed[] = { "name", "default_checkpoints", NULL };
	int err;

	if ((err = orc_json_get_str(body, "name", name, API_ERRBUF(r))) < 0)
		return err;
	if (err == 1)
		return api_fail(r, ORC_EINVALID, "field 'name' is required");
	if (!orc_is_dns_label(*name))
		return api_fail(r, ORC_EINVALID, "field 'name' must be a DNS label: 1-63 "
				"characters of [a-z0-9-], starting and ending with a letter or "
				"digit");
	return parse_quotas(p, body, allowed, r);
}

/* A PATCH /tenants/{name} body: at least one quota field; 0, or ORC_EINVALID (api_fail). */
static int parse_tenant_patch(struct quota_patch *p, json_object *body, struct api_req *r)
{
	static const char *const allowed[] = { "default_checkpoints", NULL };
	size_t i;
	int err, any;

	if ((err = parse_quotas(p, body, allowed, r)) < 0)
		return err;
	any = p->checkpoints_given;
	for (i = 0; i < NQUOTAS; i++)
		any |= p->given[i];
	if (!any)
		return api_fail(r, ORC_EINVALID, "nothing to change: give one of " QUOTA_FIELDS
				", default_checkpoints (null removes a quota)");
	return 0;
}

/*
 * The tenant's ETag: a hash of its view without the usage, so it changes
 * when its settings do and not when its sandboxes come and go (out: the
 * quoted tag, 20 bytes).
 */
static void tenant_etag(char *out, size_t n, json_object *view)
{
	json_object *usage = NULL;
	struct orc_sha256 h;
	const char *s;
	size_t len = 0;
	char hex[65];

	json_object_object_get_ex(view, "usage", &usage);
	json_object_get(usage);
	json_object_object_del(view, "usage");
	s = orc_json_str(view, &len);
	orc_sha256_init(&h);
	orc_sha256_update(&h, s, len);
	orc_sha256_hex(&h, hex);
	json_object_object_add(view, "usage", usage);
	snprintf(out, n, "\"%.16s\"", hex);
}

/* The tenant's row on db (FOR UPDATE: locked until the transaction ends). */
static int fetch_tenant(PGresult **out, PGconn *db, const char *name, int for_update)
{
	const char *params[1] = { name };

	return orc_pg_query_one(out, db, for_update ?
				"SELECT " TENANT_COLS " FROM tenants t WHERE t.name = $1 AND t.deleted_at IS NULL"
				" FOR UPDATE OF t" :
				"SELECT " TENANT_COLS " FROM tenants t WHERE t.name = $1 AND t.deleted_at IS NULL",
				1, params);
}

static int reply_tenant(struct api_req *r, int status, const char *name)
{
	PGresult *res = NULL;
	PGconn *db = NULL;
	json_object *view;
	char etag[24];
	int err;

	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		return api_reply_error(r, err, "database unavailable");
	err = fetch_tenant(&res, db, name, 0);
	orc_pg_pool_release(&api_server.db, db);
	if (err == ORC_ENOTFOUND)
		return api_reply_error(r, err, "tenant \"%s\" not found", name);
	if (err < 0)
		return api_reply_error(r, err, "cannot read tenant \"%s\"", name);
	api_own_pg(r, res);
	view = api_own_json(r, tenant_view(res, 0));
	tenant_etag(etag, sizeof(etag), view);
	api_req_add_header(r, "ETag", "%s", etag);
	if (status == 201)
		api_req_add_header(r, "Location", "/v1/tenants/%s", name);
	return api_reply_json(r, status, view);
}

int api_tenant_get(struct api_req *r)
{
	return reply_tenant(r, 200, r->id);
}

/* Under If-Match: lock the tenant's row in a transaction on db and check
 * its tag; 0 (the transaction open), or an error replied. */
static int check_if_match(struct api_req *r, PGconn *db, const char *if_match)
{
	PGresult *res = NULL;
	json_object *view;
	char etag[24];
	int err;

	if ((err = orc_pg_begin(db)) < 0)
		return api_reply_error(r, err, "cannot change tenant \"%s\"", r->id);
	if ((err = fetch_tenant(&res, db, r->id, 1)) < 0) {
		orc_pg_rollback(db);
		if (err == ORC_ENOTFOUND)
			return api_reply_error(r, err, "tenant \"%s\" not found", r->id);
		return api_reply_error(r, err, "cannot read tenant \"%s\"", r->id);
	}
	view = tenant_view(res, 0);
	tenant_etag(etag, sizeof(etag), view);
	json_object_put(view);
	PQclear(res);
	if (orc_etag_listed(if_match, etag, 0))
		return 0;
	orc_pg_rollback(db);
	api_req_add_header(r, "ETag", "%s", etag);
	return api_reply_error(r, API_EPRECOND, "tenant \"%s\" changed since you read it: If-Match %.100s,"
			       " its ETag is now %s; read it again and retry", r->id, if_match, etag);
}

int api_tenant_list(struct api_req *r)
{
	json_object *o, *arr;
	PGresult *res = NULL;
	PGconn *db = NULL;
	int err, i;

	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		return api_reply_error(r, err, "database unavailable");
	err = orc_pg_query(&res, db, "SELECT " TENANT_COLS " FROM tenants t WHERE t.deleted_at IS NULL"
			   " ORDER BY t.name", 0, NULL);
	orc_pg_pool_release(&api_server.db, db);
	if (err < 0)
		return api_reply_error(r, err, "cannot list tenants");
	api_own_pg(r, res);
	o = api_own_json(r, json_object_new_object());
	arr = json_object_new_array();
	for (i = 0; i < PQntuples(res); i++)
		json_object_array_add(arr, tenant_view(res, i));
	json_object_object_add(o, "tenants", arr);
	return api_reply_json(r, 200, o);
}

int api_tenant_create(struct api_req *r)
{
	struct quota_patch p;
	json_object *body;
	const char *name = NULL, *params[2 + NQUOTAS];
	PGconn *db = NULL;
	char *sql;
	size_t i;
	int err;

	if ((err = api_req_json_body(&body, r)) < 0)
		return err;
	if ((err = parse_tenant_create(&name, &p, body, r)) < 0)
		return api_reply_failed(r, err);
	params[0] = name;
	for (i = 0; i < NQUOTAS; i++)
		params[i + 1] = p.value[i][0] ? p.value[i] : NULL;
	params[1 + NQUOTAS] = p.checkpoints;
	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		return api_reply_error(r, err, "database unavailable");
	sql = insert_sql();
	err = orc_pg_query(NULL, db, sql, 2 + (int)NQUOTAS, params);
	free(sql);
	orc_pg_pool_release(&api_server.db, db);
	if (err == ORC_ECONFLICT)
		return api_reply_error(r, err, "tenant \"%s\" already exists (or was deleted: names are "
				       "not reused)", name);
	if (err < 0)
		return api_reply_error(r, err, "cannot create tenant \"%s\"", name);
	return reply_tenant(r, 201, name);
}

int api_tenant_patch(struct api_req *r)
{
	const char *if_match = api_req_param(r, "HTTP_IF_MATCH");   /* "" as none */
	struct quota_patch p;
	json_object *body;
	const char *params[3 + 2 * NQUOTAS];
	PGresult *res = NULL;
	PGconn *db = NULL;
	char *sql;
	size_t i;
	int err;

	if (if_match && !*if_match)
		if_match = NULL;
	if ((err = api_req_json_body(&body, r)) < 0)
		return err;
	if ((err = parse_tenant_patch(&p, body, r)) < 0)
		return api_reply_failed(r, err);
	params[0] = r->id;
	for (i = 0; i < NQUOTAS; i++) {
		params[1 + 2 * i] = p.given[i] ? "true" : "false";
		params[2 + 2 * i] = p.value[i][0] ? p.value[i] : NULL;
	}
	params[1 + 2 * NQUOTAS] = p.checkpoints_given ? "true" : "false";
	params[2 + 2 * NQUOTAS] = p.checkpoints;
	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		return api_reply_error(r, err, "database unavailable");
	if (if_match && (err = check_if_match(r, db, if_match)) < 0) {
		orc_pg_pool_release(&api_server.db, db);
		return err;
	}
	sql = update_sql();
	err = orc_pg_query(&res, db, sql, 3 + 2 * (int)NQUOTAS, params);
	free(sql);
	if (if_match && err == 0)
		err = orc_pg_commit(db);
	else if (if_match)
		orc_pg_rollback(db);
	orc_pg_pool_release(&api_server.db, db);
	if (err < 0)
		return api_reply_error(r, err, "cannot change tenant \"%s\"", r->id);
	api_own_pg(r, res);
	if (PQntuples(res) != 1)
		return api_reply_error(r, ORC_ENOTFOUND, "tenant \"%s\" not found", r->id);
	return reply_tenant(r, 200, r->id);
}
