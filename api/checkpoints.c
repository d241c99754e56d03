/*
 * Checkpoints of a sandbox's writable state (docs/checkpoints.md):
 *
 *   POST   /sandboxes/{id}/checkpoints  {name?, labels?, ttl_seconds?}
 *   GET    /checkpoints?sandbox_id=&label=k=v&limit=&cursor=
 *   GET    /checkpoints/{id}
 *   DELETE /checkpoints/{id}
 *
 * The api writes the desired row ('pending') together with the quota
 * check; the controller freezes the sandbox, copies its state and marks
 * the row 'ready' (or 'failed'), and the create waits for that through
 * NOTIFY orchard_checkpoint. A delete is 'deleting' until the controller
 * has removed the copy. Another tenant's checkpoint is 404 everywhere.
 */
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "checkpoint.h"
#include "err.h"
#include "json.h"
#include "log.h"
#include "strutil.h"
#include "validate.h"
#include "xalloc.h"

#define NAME_MAX_LEN 128
#define TTL_MAX_S (365 * 86400)
#define CREATE_WAIT_S 600
#define LIST_DEFAULT 100
#define LIST_MAX 1000

#define ISO(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"

/* Checkpoint queries alias checkpoints as c. */
const char api_checkpoint_cols[] =
	"c.id, c.sandbox_id, c.name, c.labels, c.state, c.state_message, c.bytes, "
	ISO("c.created_at") ", " ISO("c.ready_at") ", " ISO("c.expires_at") ", c.kind, c.step, "
	"c.image, (SELECT count(*) FROM sandboxes f WHERE f.forked_from = c.id), c.traj_step";

enum {
	C_ID, C_SANDBOX, C_NAME, C_LABELS, C_STATE, C_MESSAGE, C_BYTES, C_CREATED, C_READY,
	C_EXPIRES, C_KIND, C_STEP, C_IMAGE, C_FORKS, C_TRAJ_STEP,
};

static json_object *text_or_null(PGresult *res, int row, int col)
{
	if (PQgetisnull(res, row, col))
		return NULL;
	return orc_json_new_text(PQgetvalue(res, row, col), (size_t)PQgetlength(res, row, col));
}

static json_object *int_or_null(PGresult *res, int row, int col)
{
	int64_t v;

	if (PQgetisnull(res, row, col) || orc_parse_i64(&v, PQgetvalue(res, row, col), INT64_MIN,
							INT64_MAX) < 0)
		return NULL;
	return json_object_new_int64(v);
}

json_object *api_checkpoint_view(PGresult *res, int row)
{
	json_object *o = json_object_new_object(), *labels = NULL;
	const char *l = PQgetvalue(res, row, C_LABELS);

	json_object_object_add(o, "id", text_or_null(res, row, C_ID));
	json_object_object_add(o, "checkpoint_id", text_or_null(res, row, C_ID));
	json_object_object_add(o, "sandbox_id", text_or_null(res, row, C_SANDBOX));
	json_object_object_add(o, "name", text_or_null(res, row, C_NAME));
	if (orc_json_parse(&labels, l, strlen(l), NULL, 0) < 0)
		labels = json_object_new_object();
	json_object_object_add(o, "labels", labels);
	json_object_object_add(o, "state", text_or_null(res, row, C_STATE));
	json_object_object_add(o, "state_message", text_or_null(res, row, C_MESSAGE));
	json_object_object_add(o, "bytes", int_or_null(res, row, C_BYTES));
	json_object_object_add(o, "created_at", text_or_null(res, row, C_CREATED));
	json_object_object_add(o, "ready_at", text_or_null(res, row, C_READY));
	json_object_object_add(o, "expires_at", text_or_null(res, row, C_EXPIRES));
	json_object_object_add(o, "kind", text_or_null(res, row, C_KIND));
	json_object_object_add(o, "step", int_or_null(res, row, C_STEP));
	json_object_object_add(o, "image", text_or_null(res, row, C_IMAGE));
	json_object_object_add(o, "forks", int_or_null(res, row, C_FORKS));
	json_object_object_add(o, "trajectory_step", int_or_null(res, row, C_TRAJ_STEP));
	return o;
}

int api_checkpoint_supported(struct api_req *r)
{
	if (!strcmp(api_server.driver, "local") || !strcmp(api_server.driver, "kubernetes"))
		return 0;
	return api_reply_error(r, ORC_EINVALID, "checkpoints, forks and pause/resume are not supported "
			       "by this driver (%s) yet; see docs/checkpoints.md", api_server.driver);
}

int api_checkpoint_fetch(PGresult **out, int64_t tenant_id, const char *id)
{
	char tenant[24], sql[1024];
	const char *params[2] = { id, tenant };
	PGresult *res = NULL;
	int err;

	snprintf(tenant, sizeof(tenant), "%lld", (long long)tenant_id);
	snprintf(sql, sizeof(sql), "SELECT %s FROM checkpoints c WHERE c.id = $1 AND c.tenant_id = $2"
		 " AND c.state NOT IN ('deleting', 'deleted')", api_checkpoint_cols);
	if ((err = orc_pg_pool_query_one(&res, &api_server.db, sql, 2, params)) < 0)
		return err;
	*out = res;
	return 0;
}

/*
 * Inside the caller's transaction: lock the row of r's tenant and check that
 * one more checkpoint fits max_checkpoints and max_checkpoint_bytes.
 */
int api_checkpoint_quota(PGconn *db, struct api_req *r)
{
	char tenant[24];
	const char *params[1] = { tenant };
	PGresult *res = NULL;
	int64_t max, used;
	int err;

	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	if ((err = orc_pg_query_one(&res, db,
		"SELECT t.name, t.max_checkpoints, t.max_checkpoint_bytes,"
		" (SELECT count(*) FROM checkpoints c WHERE c.tenant_id = t.id"
		"  AND c.state IN ('pending', 'ready')),"
		" (SELECT COALESCE(sum(bytes), 0) FROM checkpoints c WHERE c.tenant_id = t.id"
		"  AND c.state IN ('pending', 'ready'))"
		" FROM tenants t WHERE t.id = $1 FOR NO KEY UPDATE OF t", 1, params)) < 0)
		return err;
	if (!PQgetisnull(res, 0, 1) && orc_parse_i64(&max, PQgetvalue(res, 0, 1), 0, INT64_MAX) == 0 &&
	    orc_parse_i64(&used, PQgetvalue(res, 0, 3), 0, INT64_MAX) == 0 && used >= max) {
		err = api_fail(r, ORC_EQUOTA, "quota exceeded: max_checkpoints of tenant \"%s\" is "
			       "%lld and it has %lld checkpoints; delete one first",
			       PQgetvalue(res, 0, 0), (long long)max, (long long)used);
		goto done;
	}
	if (!PQgetisnull(res, 0, 2) && orc_parse_i64(&max, PQgetvalue(res, 0, 2), 0, INT64_MAX) == 0 &&
	    orc_parse_i64(&used, PQgetvalue(res, 0, 4), 0, INT64_MAX) == 0 && used >= max)
		err = api_fail(r, ORC_EQUOTA, "quota exceeded: max_checkpoint_bytes of tenant "
			       "\"%s\" is %lld and its checkpoints hold %lld bytes; delete one first",
			       PQgetvalue(res, 0, 0), (long long)max, (long long)used);
done:
	PQclear(res);
	return err;
}

struct ckpt_req {
	const char *name;
	json_object *labels;
	int64_t ttl;              /* 0: never expires */
};

static int parse_create(struct ckpt_req *c, json_object *body, struct api_req *r)
{
	int err;

	memset(c, 0, sizeof(*c));
	if ((err = orc_json_get_str(body, "name", &c->name, API_ERRBUF(r))) < 0)
		return err;
	if (err == 1)
		c->name = NULL;
	if (c->name && (strlen(c->name) > NAME_MAX_LEN || !orc_utf8_valid(c->name, strlen(c->name))))
		return api_fail(r, ORC_EINVALID, "field 'name' must be at most %d characters of "
				"UTF-8", NAME_MAX_LEN);
	if ((err = orc_json_get_object(body, "labels", &c->labels, API_ERRBUF(r))) < 0 ||
	    (c->labels && (err = api_check_labels(c->labels, r)) < 0))
		return err;
	if ((err = orc_json_get_int(body, "ttl_seconds", &c->ttl, 1, TTL_MAX_S, API_ERRBUF(r))) < 0)
		return err;
	return 0;
}

int api_checkpoint_begin(PGresult **out, struct api_req *r, const char *sandbox_id, const char *name,
			 json_object *labels, int64_t ttl, const char *kind)
{
	char tenant[24], ttl_s[24], id[16];
	const char *params[10];
	PGresult *res = NULL;
	PGconn *db = NULL;
	char *sql;
	int err;

	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	snprintf(ttl_s, sizeof(ttl_s), "%lld", (long long)ttl);
	memcpy(id, "ck", 2);
	orc_random_hex(id + 2, 6);
	params[0] = id;
	params[1] = sandbox_id;
	params[2] = tenant;
	params[3] = name;
	params[4] = labels ? orc_json_str(labels, NULL) : "{}";
	params[5] = ttl ? ttl_s : NULL;
	params[6] = kind;
	params[7] = r->key_id;
	params[8] = r->request_id;
	params[9] = api_server.driver;
	sql = xasprintf(
		"WITH c AS (INSERT INTO checkpoints (id, tenant_id, sandbox_id, driver, name, labels,"
		" image, cpu, memory, cpu_millis, memory_bytes, block_network, env, workdir,"
		" sandbox_labels, kind, step, created_by_key, request_id, expires_at)"
		" SELECT $1, s.tenant_id, s.id, $10, $4, $5::jsonb, s.image, s.cpu, s.memory,"
		" s.cpu_millis, s.memory_bytes, s.block_network, s.env, s.workdir, s.labels, $7,"
		" (SELECT count(*) FROM events e WHERE e.sandbox_id = s.id), $8::bigint,"
		" nullif($9, ''), now() + make_interval(secs => $6::int)"
		" FROM sandboxes s WHERE s.id = $2 AND s.tenant_id = $3::bigint AND s.state = 'ready'"
		" RETURNING *),"
		" e AS (INSERT INTO events (sandbox_id, tenant_id, kind, data, api_key_id, request_id)"
		" SELECT c.sandbox_id, c.tenant_id, 'sandbox.checkpoint',"
		" jsonb_build_object('checkpoint_id', c.id, 'kind', c.kind), $8::bigint, nullif($9, '')"
		" FROM c)"
		" SELECT %s FROM c", api_checkpoint_cols);
	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		goto done;
	if ((err = orc_pg_begin(db)) < 0)
		goto done;
	if ((err = api_checkpoint_quota(db, r)) < 0 ||
	    (err = orc_pg_query(&res, db, sql, 10, params)) < 0) {
		orc_pg_rollback(db);
		goto done;
	}
	if (PQntuples(res) != 1) {
		orc_pg_rollback(db);
		PQclear(res);
		res = NULL;
		err = API_ENOTREADY;
		goto done;
	}
	if ((err = orc_pg_commit(db)) < 0) {
		PQclear(res);
		res = NULL;
		goto done;
	}
	*out = res;
done:
	if (db)
		orc_pg_pool_release(&api_server.db, db);
	free(sql);
	return err;
}

int api_checkpoint_wait(PGresult **out, int64_t tenant_id, const char *id, int64_t deadline_ms)
{
	struct api_waiter w;
	PGresult *res = NULL;
	int err;

	api_waiter_init(&w, API_CHAN_CHECKPOINT, id);
	for (;;) {
		if ((err = api_checkpoint_fetch(&res, tenant_id, id)) < 0)
			return err;
		if (strcmp(PQgetvalue(res, 0, C_STATE), "pending") || orc_mono_ms() >= deadline_ms) {
			*out = res;
			return 0;
		}
		PQclear(res);
		api_waiter_wait(&w, deadline_ms);
	}
}

int api_checkpoint_reply_begin_error(struct api_req *r, int err, const char *sandbox_id)
{
	if (err == ORC_EQUOTA)
		return api_reply_failed(r, err);
	if (err == API_ENOTREADY) {
		/* Tell "not ours" from "not ready". */
		char *address = NULL, *token = NULL;
		int e = api_agent_lookup(&address, &token, NULL, r->tenant_id, sandbox_id);
		free(address);
		free(token);
		if (e == ORC_ENOTFOUND)
			return api_reply_error(r, e, "sandbox %s not found", sandbox_id);
		return api_reply_error(r, API_ENOTREADY, "sandbox %s is not ready (or is paused "
				       "mid-change); only a ready sandbox can be checkpointed", sandbox_id);
	}
	return api_reply_error(r, err, "cannot checkpoint sandbox %s", sandbox_id);
}

/* A finished (or still pending at the deadline) checkpoint as the answer. */
int api_checkpoint_reply_done(struct api_req *r, PGresult *res)
{
	const char *state = PQgetvalue(res, 0, C_STATE);

	if (!strcmp(state, "failed"))
		return api_reply_error(r, ORC_ECONFLICT, "checkpoint %s of sandbox %s failed: %s",
				       PQgetvalue(res, 0, C_ID), PQgetvalue(res, 0, C_SANDBOX),
				       PQgetvalue(res, 0, C_MESSAGE));
	if (!strcmp(state, "pending"))
		return api_reply_error(r, ORC_ETIMEOUT, "checkpoint %s is still being taken; "
				       "GET /v1/checkpoints/%s later", PQgetvalue(res, 0, C_ID),
				       PQgetvalue(res, 0, C_ID));
	return api_reply_json(r, 200, api_own_json(r, api_checkpoint_view(res, 0)));
}

int api_checkpoint_create(struct api_req *r)
{
	struct ckpt_req c;
	json_object *body;
	PGresult *res = NULL, *done = NULL;
	char *id;
	int err;

	if ((err = api_checkpoint_supported(r)) < 0)
		return err;
	if ((err = api_req_json_body(&body, r)) < 0)
		return err;
	if ((err = parse_create(&c, body, r)) < 0)
		return api_reply_failed(r, err);
	if ((err = api_checkpoint_begin(&res, r, r->id, c.name, c.labels, c.ttl, "manual")) < 0)
		return api_checkpoint_reply_begin_error(r, err, r->id);
	id = api_own_mem(r, xstrdup(PQgetvalue(res, 0, C_ID)));
	PQclear(res);
	orc_log(ORC_LOG_INFO, "checkpoint requested", "checkpoint_id", id, "sandbox_id", r->id, NULL);
	if ((err = api_checkpoint_wait(&done, r->tenant_id, id, orc_mono_ms() + CREATE_WAIT_S * 1000)) < 0)
		return api_reply_error(r, err, "cannot read checkpoint %s", id);
	api_own_pg(r, done);
	return api_checkpoint_reply_done(r, done);
}

int api_checkpoint_get(struct api_req *r)
{
	PGresult *res;
	int err;

	if ((err = api_checkpoint_fetch(&res, r->tenant_id, r->id)) < 0) {
		if (err == ORC_ENOTFOUND)
			return api_reply_error(r, err, "checkpoint %s not found", r->id);
		return api_reply_error(r, err, "cannot read checkpoint %s", r->id);
	}
	api_own_pg(r, res);
	return api_reply_json(r, 200, api_own_json(r, api_checkpoint_view(res, 0)));
}

int api_checkpoint_delete(struct api_req *r)
{
	char tenant[24];
	const char *params[2] = { r->id, tenant };
	PGresult *res = NULL;
	json_object *o;
	int err;

	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	err = orc_pg_pool_query_one(&res, &api_server.db,
		"UPDATE checkpoints SET state = 'deleting', deleted_at = now()"
		" WHERE id = $1 AND tenant_id = $2 AND state NOT IN ('deleting', 'deleted') RETURNING id",
		2, params);
	if (err == ORC_ENOTFOUND)
		return api_reply_error(r, err, "checkpoint %s not found", r->id);
	if (err < 0)
		return api_reply_error(r, err, "cannot delete checkpoint %s", r->id);
	api_own_pg(r, res);
	o = api_own_json(r, json_object_new_object());
	json_object_object_add(o, "status", json_object_new_string("deleted"));
	json_object_object_add(o, "checkpoint_id", json_object_new_string(r->id));
	return api_reply_json(r, 200, o);
}

int api_checkpoint_list(struct api_req *r)
{
	char tenant[24], limit[24], sql[2048];
	const char *params[6], *v;
	struct api_cursor cursor;
	json_object *o, *arr, *labels = NULL;
	PGresult *res = NULL;
	PGconn *db = NULL;
	int64_t lim = LIST_DEFAULT;
	int err, i, n;

	memset(&cursor, 0, sizeof(cursor));
	params[1] = NULL;
	if ((v = api_req_query(r, "sandbox_id")) && *v) {
		if (!api_valid_id(v))
			return api_reply_error(r, ORC_EINVALID, "query parameter 'sandbox_id' is not a "
					       "sandbox id");
		params[1] = v;
	}
	if ((v = api_req_query(r, "limit")) && orc_parse_i64(&lim, v, 1, LIST_MAX) < 0)
		return api_reply_error(r, ORC_EINVALID, "query parameter 'limit' must be an integer "
				       "from 1 to %d", LIST_MAX);
	if ((v = api_req_query(r, "cursor")) && *v && api_cursor_parse(&cursor, v) < 0)
		return api_reply_error(r, ORC_EINVALID, "query parameter 'cursor' is not a cursor "
				       "this server returned");
	for (i = 0; i < r->nquery; i++) {
		json_object *pair, *value;
		const char *eq;
		char *key;
		if (strcmp(r->query[i].key, "label"))
			continue;
		v = r->query[i].value;
		if (!(eq = strchr(v, '=')))
			return api_reply_error(r, ORC_EINVALID, "query parameter 'label' must be key=value");
		key = api_own_mem(r, xstrndup(v, (size_t)(eq - v)));
		value = json_object_new_string(eq + 1);
		pair = json_object_new_object();
		json_object_object_add(pair, key, value);
		if (!labels)
			labels = api_own_json(r, json_object_new_array());
		json_object_array_add(labels, pair);
		if ((err = api_check_label(key, value, r)) < 0)
			return api_reply_error(r, err, "query parameter 'label': %s", r->error);
	}
	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	snprintf(limit, sizeof(limit), "%lld", (long long)lim + 1);
	params[0] = tenant;
	params[2] = labels ? orc_json_str(labels, NULL) : NULL;
	params[3] = cursor.us[0] ? cursor.us : NULL;
	params[4] = cursor.id;
	params[5] = limit;
	snprintf(sql, sizeof(sql),
		 "SELECT %s, " API_CURSOR_US("c.created_at") " FROM checkpoints c"
		 " WHERE c.tenant_id = $1 AND c.state NOT IN ('deleting', 'deleted')"
		 " AND ($2::text IS NULL OR c.sandbox_id = $2)"
		 " AND ($3::jsonb IS NULL OR NOT EXISTS (SELECT 1 FROM jsonb_array_elements($3::jsonb) f"
		 " WHERE NOT c.labels @> f))"
		 " AND ($4::bigint IS NULL OR (c.created_at, c.id) >"
		 " ('epoch'::timestamptz + $4::bigint * interval '1 microsecond', $5::text))"
		 " ORDER BY c.created_at, c.id LIMIT $6::int", api_checkpoint_cols);
	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		return api_reply_error(r, err, "database unavailable");
	err = orc_pg_query(&res, db, sql, 6, params);
	orc_pg_pool_release(&api_server.db, db);
	if (err < 0)
		return api_reply_error(r, err, "cannot list checkpoints");
	api_own_pg(r, res);
	o = api_own_json(r, json_object_new_object());
	arr = json_object_new_array();
	json_object_object_add(o, "checkpoints", arr);
	n = PQntuples(res);
	for (i = 0; i < n && i < lim; i++)
		json_object_array_add(arr, api_checkpoint_view(res, i));
	if (n > lim) {
		int last = (int)lim - 1, ncols = PQnfields(res);
		char *next = xasprintf("%s_%s", PQgetvalue(res, last, ncols - 1), PQgetvalue(res, last, 0));
		json_object_object_add(o, "next_cursor", json_object_new_string(next));
		free(next);
	} else {
		json_object_object_add(o, "next_cursor", NULL);
	}
	return api_reply_json(r, 200, o);
}
