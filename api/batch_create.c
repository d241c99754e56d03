/*
 * POST /sandboxes/batch {count, ...the create spec of POST /sandboxes...}:
 * count sandboxes of one spec in one request and one transaction
 * (docs/controller.md, "Batch create").
 *
 * The spec is parsed as a single create's (sandbox_create.c), except that
 * sandbox_id cannot be given (ids are generated). The tenant's quotas
 * apply to the batch as a whole: all count sandboxes fit, or none is
 * created (429 naming the quota). The answer (201) comes at once, with the
 * batch id and the sandboxes' ids, all "pending"; GET
 * /sandboxes/batch/{id}/wait (batch_wait.c) follows them.
 *
 * One Idempotency-Key covers the batch (scope "batch", bound to the body
 * by idempotency.c): a retry answers the same batch and creates nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "create.h"
#include "err.h"
#include "json.h"
#include "log.h"
#include "strutil.h"
#include "xalloc.h"

#define BATCH_MAX 1000          /* docs/openapi.yaml, BatchCreate.count */
#define BATCH_ATTEMPTS 4        /* generated ids that collide: try again */

struct batch_req {
	struct api_create_req spec;
	int64_t count;
	const char *idempotency_key;   /* the batch's, not its sandboxes' */
};

static int parse_batch(struct batch_req *b, struct api_req *r, json_object *body)
{
	int err;

	if ((err = orc_json_get_int(body, "count", &b->count, 1, BATCH_MAX, API_ERRBUF(r))) < 0)
		return err;
	if (err == 1)
		return api_fail(r, ORC_EINVALID, "field 'count' is required: the number of "
				"sandboxes, 1 to %d", BATCH_MAX);
	if ((err = api_create_parse(&b->spec, r, body)) < 0)
		return err;
	if (b->spec.sandbox_id)
		return api_fail(r, ORC_EINVALID, "field 'sandbox_id' cannot be given in a batch: "
				"its sandboxes' ids are generated");
	b->idempotency_key = b->spec.idempotency_key;
	b->spec.idempotency_key = NULL;
	return 0;
}

/* The tenant's batch of that id or (id NULL) Idempotency-Key: its
 * sandboxes (api_sandbox_cols, then the batch's id and count), by id.
 * ORC_ENOTFOUND. */
static int batch_read(PGresult **out, PGconn *db, int64_t tenant_id, const char *id, const char *key)
{
	const char *args[2] = { id, key };
	char *sql;
	int err;

	sql = xasprintf("SELECT %s, b.id, b.count FROM sandbox_batches b"
			" JOIN sandboxes s ON s.batch_id = b.id JOIN tenants t ON t.id = s.tenant_id"
			" WHERE b.tenant_id = $1::bigint AND (b.id = $2 OR b.idempotency_key = $3)"
			" ORDER BY s.id", api_sandbox_cols);
	err = api_sandbox_rows(out, db, tenant_id, sql, 2, args);
	free(sql);
	return err;
}

/* One attempt: the quota check, the batch row and its sandboxes, in one
 * transaction. ORC_ECONFLICT when a generated id or the key was taken. */
static int batch_insert(long *retry_out, struct api_req *r, PGconn *db, const struct batch_req *b,
			const char *batch_id)
{
	char tenant[24], count[24], (*idbuf)[9] = xcalloc((size_t)b->count, sizeof(*idbuf));
	const char **ids = xcalloc((size_t)b->count, sizeof(*ids));
	const char *params[4] = { batch_id, tenant, count, b->idempotency_key };
	const struct api_create_req *c = &b->spec;
	PGresult *res = NULL;
	int64_t i;
	int err;

	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	snprintf(count, sizeof(count), "%lld", (long long)b->count);
	for (i = 0; i < b->count; i++) {
		orc_random_hex(idbuf[i], 4);
		ids[i] = idbuf[i];
	}
	if ((err = orc_pg_begin(db)) < 0)
		goto done;
	if ((err = api_quota_check(retry_out, db, r, (int)b->count, c->cpu_millis,
				   c->memory_bytes)) < 0 ||
	    (err = orc_pg_query(NULL, db, "INSERT INTO sandbox_batches (id, tenant_id, count,"
				" idempotency_key) VALUES ($1, $2::bigint, $3::int, $4)", 4, params)) < 0 ||
	    (err = api_create_insert(&res, db, r, c, ids, (int)b->count, batch_id)) < 0 ||
	    (err = orc_pg_commit(db)) < 0)
		orc_pg_rollback(db);
	PQclear(res);
done:
	free(ids);
	free(idbuf);
	return err;
}

static json_object *batch_view(PGresult *res)
{
	json_object *o = json_object_new_object(), *ids = json_object_new_array();
	json_object *list = json_object_new_array();
	int i, n = PQntuples(res), ncols = PQnfields(res);

	json_object_object_add(o, "batch_id", json_object_new_string(PQgetvalue(res, 0, ncols - 2)));
	json_object_object_add(o, "count", json_object_new_int64(strtoll(PQgetvalue(res, 0, ncols - 1),
									 NULL, 10)));
	for (i = 0; i < n; i++) {
		json_object *view = api_sandbox_view(res, i);
		json_object *id = NULL;
		json_object_object_get_ex(view, "sandbox_id", &id);
		json_object_array_add(ids, json_object_get(id));
		json_object_array_add(list, view);
	}
	json_object_object_add(o, "sandbox_ids", ids);
	json_object_object_add(o, "sandboxes", list);
	return o;
}

int api_batch_create(struct api_req *r)
{
	struct batch_req b;
	json_object *body;
	PGresult *res = NULL;
	PGconn *db = NULL;
	char batch_id[17];
	long retry = 0;
	int err, attempt;

	memset(&b, 0, sizeof(b));
	if ((err = api_req_json_body(&body, r)) < 0)
		return err;
	if ((err = parse_batch(&b, r, body)) < 0)
		return api_reply_failed(r, err);
	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		return api_reply_error(r, err, "database unavailable");
	if (b.idempotency_key && (err = api_idempotency_bind(r, db, "batch", b.idempotency_key)) < 0) {
		orc_pg_pool_release(&api_server.db, db);
		return err;
	}
	if (b.idempotency_key &&
	    (err = batch_read(&res, db, r->tenant_id, NULL, b.idempotency_key)) != ORC_ENOTFOUND) {
		if (err == 0)
			api_idempotency_replayed(r);
		goto done;
	}
	if ((err = api_create_precheck(db, &b.spec, r)) < 0)
		goto done;
	for (attempt = 0; attempt < BATCH_ATTEMPTS; attempt++) {
		orc_random_hex(batch_id, 8);
		if ((err = batch_insert(&retry, r, db, &b, batch_id)) != ORC_ECONFLICT)
			break;
		/* A concurrent request with our Idempotency-Key won the race? */
		if (b.idempotency_key &&
		    (err = batch_read(&res, db, r->tenant_id, NULL, b.idempotency_key)) == 0) {
			api_idempotency_replayed(r);
			goto done;
		}
		err = ORC_ECONFLICT;
	}
	if (err == 0)
		err = batch_read(&res, db, r->tenant_id, batch_id, NULL);
done:
	orc_pg_pool_release(&api_server.db, db);
	if (err == ORC_EQUOTA)
		return api_reply_quota(r, retry);
	if (err == ORC_EINVALID)
		return api_reply_failed(r, err);
	if (err < 0)
		return api_reply_error(r, err, "cannot create the batch");
	api_own_pg(r, res);
	orc_log(ORC_LOG_INFO, "sandbox batch created", "batch_id", PQgetvalue(res, 0, PQnfields(res) - 2),
		NULL);
	return api_reply_json(r, 201, api_own_json(r, batch_view(res)));
}
