/*
 * Forks (docs/checkpoints.md):
 *
 *   POST /checkpoints/{id}/fork  {count: 1..256, labels?, env?, ttl_seconds?,
 *                                 idle_timeout_seconds?, disk?}
 *   POST /sandboxes/{id}/fork    the same body: checkpoint now, then fork;
 *                                with "step": t, fork from the checkpoint of
 *                                step t instead (checkpoint_step.c)
 *
 * count new sandboxes, each a pending row like a create (the controller
 * launches it and restores the checkpoint's state into it before it
 * starts), with forked_from naming the checkpoint. Their spec is the
 * checkpoint's (image, cpu, memory, network, workdir, env merged with the
 * request's env, labels and disk limit unless the request gives its own). All rows are
 * one statement in one transaction with the quota check: a fork is all or
 * nothing. One Idempotency-Key covers the batch: a retry answers the
 * sandboxes of the first request.
 */
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "checkpoint.h"
#include "create.h"
#include "err.h"
#include "json.h"
#include "log.h"
#include "pgarray.h"
#include "strutil.h"
#include "validate.h"
#include "xalloc.h"

#define FORK_MAX 256
#define FORK_ATTEMPTS 4
#define CREATE_WAIT_S 600

struct fork_req {
	int64_t count;
	json_object *labels;
	json_object *env;
	int64_t ttl, idle;        /* 0: the controller's default / none */
	int64_t step;             /* -1: now */
	char disk[32];            /* "": the checkpoint's */
	int64_t disk_bytes;
	const char *idempotency_key;
	char *batch_key;          /* "fork:<key>:" (malloc'd) or NULL */
};

static int parse_fork(struct fork_req *f, struct api_req *r, json_object *body)
{
	int err;

	memset(f, 0, sizeof(*f));
	f->count = 1;
	f->step = -1;
	if ((err = orc_json_get_int(body, "step", &f->step, 0, INT64_MAX, API_ERRBUF(r))) < 0)
		return err;
	if ((err = orc_json_get_int(body, "count", &f->count, 1, FORK_MAX, API_ERRBUF(r))) < 0)
		return err;
	if ((err = orc_json_get_object(body, "labels", &f->labels, API_ERRBUF(r))) < 0 ||
	    (f->labels && (err = api_check_labels(f->labels, r)) < 0))
		return err;
	if ((err = orc_json_get_object(body, "env", &f->env, API_ERRBUF(r))) < 0 ||
	    (f->env && (err = api_check_env(f->env, "env", r)) < 0))
		return err;
	if ((err = orc_json_get_int(body, "ttl_seconds", &f->ttl, 1, 30 * 86400, API_ERRBUF(r))) < 0)
		return err;
	if ((err = orc_json_get_int(body, "idle_timeout_seconds", &f->idle, 1, 30 * 86400,
				    API_ERRBUF(r))) < 0)
		return err;
	if ((err = api_disk_parse(f->disk, sizeof(f->disk), &f->disk_bytes, body, NULL, r)) < 0)
		return err;
	f->idempotency_key = api_req_param(r, "HTTP_IDEMPOTENCY_KEY");
	if (f->idempotency_key && !*f->idempotency_key)
		f->idempotency_key = NULL;
	if (f->idempotency_key && !api_check_idempotency_key(f->idempotency_key))
		return api_fail(r, API_EBADREQ, "Idempotency-Key must be 1-255 printable ASCII "
				"characters");
	if (f->idempotency_key)
		f->batch_key = api_own_mem(r, xasprintf("fork:%s:", f->idempotency_key));
	return 0;
}

/* The sandboxes of an earlier fork with the same Idempotency-Key. */
static int find_batch(PGresult **out, struct api_req *r, const char *batch_key)
{
	const char *args[1] = { batch_key };
	char sql[1024];

	snprintf(sql, sizeof(sql), "SELECT %s FROM sandboxes s JOIN tenants t ON t.id = s.tenant_id"
		 " WHERE s.tenant_id = $1 AND left(s.idempotency_key, length($2)) = $2"
		 " ORDER BY s.idempotency_key COLLATE \"C\", s.id", api_sandbox_cols);
	return api_sandbox_rows(out, NULL, r->tenant_id, sql, 1, args);
}

/*
 * The tenant's quotas (quota.c) for count more sandboxes of the
 * checkpoint's size, all or none. A checkpoint that is not the tenant's
 * is left to the insert, which then writes nothing (ORC_ENOTFOUND).
 */
static int quota_count(long *retry_out, PGconn *db, struct api_req *r, const char *ckpt,
		       int64_t count)
{
	char tenant[24];
	const char *params[2] = { ckpt, tenant };
	PGresult *res = NULL;
	int err;

	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	if ((err = orc_pg_query(&res, db, "SELECT cpu_millis, memory_bytes FROM checkpoints"
				" WHERE id = $1 AND tenant_id = $2::bigint", 2, params)) < 0)
		return err;
	if (PQntuples(res) == 1)
		err = api_quota_check(retry_out, db, r, (int)count,
				      strtoll(PQgetvalue(res, 0, 0), NULL, 10),
				      strtoll(PQgetvalue(res, 0, 1), NULL, 10));
	PQclear(res);
	return err;
}

static const char fork_sql_fmt[] =
	"WITH n AS (SELECT v.id, v.token, v.ord FROM unnest($2::text[], $3::text[])"
	"  WITH ORDINALITY AS v(id, token, ord)),"
	" c AS (SELECT * FROM checkpoints WHERE id = $1 AND tenant_id = $4::bigint"
	"  AND state = 'ready' FOR SHARE),"
	" s AS (INSERT INTO sandboxes (id, tenant_id, image, cpu, memory, cpu_millis, memory_bytes,"
	"  block_network, labels, env, workdir, ttl_seconds, idle_timeout_seconds, agent_token,"
	"  created_by_key, idempotency_key, driver, forked_from, disk, disk_bytes)"
	"  SELECT n.id, c.tenant_id, c.image, c.cpu, c.memory, c.cpu_millis, c.memory_bytes,"
	"  c.block_network, COALESCE($5::jsonb, c.sandbox_labels), c.env || COALESCE($6::jsonb, '{}'),"
	"  c.workdir, $7::int, $8::int, n.token, $9::bigint, $10 || n.ord, c.driver, c.id,"
	"  COALESCE($12, c.disk), COALESCE($13::bigint, c.disk_bytes)"
	"  FROM c, n ORDER BY n.ord RETURNING *),"
	" e AS (INSERT INTO events (sandbox_id, tenant_id, kind, data, api_key_id, request_id)"
	"  SELECT s.id, s.tenant_id, 'sandbox.create', jsonb_build_object('image', s.image,"
	"  'forked_from', s.forked_from, 'labels', s.labels), $9::bigint, nullif($11, '') FROM s)"
	" SELECT %s FROM s JOIN tenants t ON t.id = s.tenant_id ORDER BY s.idempotency_key, s.id";

static int fork_insert(PGresult **out, long *retry_out, PGconn *db, struct api_req *r, const char *ckpt,
		       const struct fork_req *f)
{
	struct orc_pg_array ids = ORC_PG_ARRAY_INIT, tokens = ORC_PG_ARRAY_INIT;
	char tenant[24], ttl[24], idle[24], disk_b[24], id[9], token[65];
	const char *params[13];
	PGresult *res = NULL;
	char *sql = xasprintf(fork_sql_fmt, api_sandbox_cols);
	int64_t i;
	int err;

	for (i = 0; i < f->count; i++) {
		orc_random_hex(id, 4);
		orc_random_hex(token, 32);
		orc_pg_array_add(&ids, id);
		orc_pg_array_add(&tokens, token);
	}
	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	snprintf(ttl, sizeof(ttl), "%lld", (long long)f->ttl);
	snprintf(idle, sizeof(idle), "%lld", (long long)f->idle);
	params[0] = ckpt;
	params[1] = orc_pg_array_cstr(&ids);
	params[2] = orc_pg_array_cstr(&tokens);
	params[3] = tenant;
	params[4] = f->labels ? orc_json_str(f->labels, NULL) : NULL;
	params[5] = f->env ? orc_json_str(f->env, NULL) : NULL;
	params[6] = f->ttl ? ttl : NULL;
	params[7] = f->idle ? idle : NULL;
	params[8] = r->key_id;
	params[9] = f->batch_key;
	params[10] = r->request_id;
	snprintf(disk_b, sizeof(disk_b), "%lld", (long long)f->disk_bytes);
	params[11] = f->disk_bytes ? f->disk : NULL;
	params[12] = f->disk_bytes ? disk_b : NULL;
	if ((err = orc_pg_begin(db)) < 0)
		goto done;
	if ((err = quota_count(retry_out, db, r, ckpt, f->count)) < 0 ||
	    (err = orc_pg_query(&res, db, sql, 13, params)) < 0)
		goto fail;
	if (PQntuples(res) != f->count) {
		err = ORC_ENOTFOUND;
		goto fail;
	}
	if ((err = orc_pg_commit(db)) < 0)
		goto fail_nr;
	*out = res;
	res = NULL;
	goto done;
fail:
	orc_pg_rollback(db);
fail_nr:
	PQclear(res);
done:
	orc_pg_array_release(&ids);
	orc_pg_array_release(&tokens);
	free(sql);
	return err;
}

static int reply_forks(struct api_req *r, const char *ckpt, PGresult *res)
{
	json_object *o = api_own_json(r, json_object_new_object());
	json_object *arr = json_object_new_array(), *ids = json_object_new_array();
	int i, n = PQntuples(res);

	for (i = 0; i < n; i++) {
		json_object_array_add(arr, api_sandbox_view(res, i));
		json_object_array_add(ids, json_object_new_string(PQgetvalue(res, i, API_SANDBOX_COL_ID)));
	}
	json_object_object_add(o, "checkpoint_id", json_object_new_string(ckpt));
	json_object_object_add(o, "sandbox_ids", ids);
	json_object_object_add(o, "sandboxes", arr);
	return api_reply_json(r, 200, o);
}

/* Fork f from the ready checkpoint ckpt and answer. */
static int fork_from(struct api_req *r, const char *ckpt, const struct fork_req *f)
{
	PGresult *res = NULL;
	PGconn *db = NULL;
	long retry = 0;
	int err, attempt;

	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		return api_reply_error(r, err, "database unavailable");
	for (attempt = 0; attempt < FORK_ATTEMPTS; attempt++) {
		err = fork_insert(&res, &retry, db, r, ckpt, f);
		if (err != ORC_ECONFLICT)
			break;
		/* A concurrent retry with our key won, or a generated id was taken. */
		if (f->batch_key && find_batch(&res, r, f->batch_key) == 0) {
			err = 0;
			break;
		}
	}
	orc_pg_pool_release(&api_server.db, db);
	if (err == ORC_EQUOTA)
		return api_reply_quota(r, retry);
	if (err == ORC_ENOTFOUND)
		return api_reply_error(r, err, "checkpoint %s not found (or not ready)", ckpt);
	if (err < 0)
		return api_reply_error(r, err, "cannot fork checkpoint %s", ckpt);
	api_own_pg(r, res);
	orc_log(ORC_LOG_INFO, "forked", "checkpoint_id", ckpt, "sandbox_id", PQgetvalue(res, 0, 0), NULL);
	return reply_forks(r, ckpt, res);
}

static int parse_body(struct fork_req *f, struct api_req *r)
{
	json_object *body;
	int err;

	if ((err = api_req_json_body(&body, r)) < 0)
		return err;
	if ((err = parse_fork(f, r, body)) < 0)
		return api_reply_failed(r, err);
	return 0;
}

/* An earlier request with the same Idempotency-Key: answer it again. */
static int replayed(struct api_req *r, const struct fork_req *f)
{
	PGresult *res = NULL;
	const char *ckpt;

	if (f->batch_key && api_idempotency_bind(r, NULL, "fork", f->idempotency_key) < 0)
		return 1;   /* another body (422), replied */
	if (!f->batch_key || find_batch(&res, r, f->batch_key) < 0)
		return 0;
	api_own_pg(r, res);
	api_idempotency_replayed(r);
	ckpt = PQgetvalue(res, 0, PQfnumber(res, "forked_from"));
	reply_forks(r, ckpt ? ckpt : "", res);
	return 1;
}

int api_checkpoint_fork(struct api_req *r)
{
	struct fork_req f;
	PGresult *res;
	int err;

	if ((err = api_checkpoint_supported(r)) < 0 || (err = parse_body(&f, r)) < 0)
		return err;
	if (f.step >= 0)
		return api_reply_error(r, ORC_EINVALID, "field 'step' belongs to POST "
				       "/v1/sandboxes/{id}/fork; a checkpoint is one state");
	if (replayed(r, &f))
		return 0;
	if ((err = api_checkpoint_fetch(&res, r->tenant_id, r->id)) < 0) {
		if (err == ORC_ENOTFOUND)
			return api_reply_error(r, err, "checkpoint %s not found", r->id);
		return api_reply_error(r, err, "cannot read checkpoint %s", r->id);
	}
	api_own_pg(r, res);
	if (strcmp(PQgetvalue(res, 0, PQfnumber(res, "state")), "ready"))
		return api_reply_error(r, ORC_ECONFLICT, "checkpoint %s is %s, not ready: only a ready "
				       "checkpoint can be forked", r->id,
				       PQgetvalue(res, 0, PQfnumber(res, "state")));
	return fork_from(r, r->id, &f);
}

int api_sandbox_fork(struct api_req *r)
{
	struct fork_req f;
	PGresult *res = NULL, *done = NULL;
	char *id;
	int err;

	if ((err = api_checkpoint_supported(r)) < 0 || (err = parse_body(&f, r)) < 0)
		return err;
	if (replayed(r, &f))
		return 0;
	if (f.step >= 0) {
		if ((err = api_checkpoint_at_step(&id, r, r->id, f.step)) < 0)
			return err;
		return fork_from(r, id, &f);
	}
	if ((err = api_checkpoint_begin(&res, r, r->id, NULL, NULL, 0, "fork")) < 0)
		return api_checkpoint_reply_begin_error(r, err, r->id);
	id = api_own_mem(r, xstrdup(PQgetvalue(res, 0, 0)));
	PQclear(res);
	if ((err = api_checkpoint_wait(&done, r->tenant_id, id, orc_mono_ms() + CREATE_WAIT_S * 1000)) < 0)
		return api_reply_error(r, err, "cannot read checkpoint %s", id);
	api_own_pg(r, done);
	if (strcmp(PQgetvalue(done, 0, PQfnumber(done, "state")), "ready"))
		return api_checkpoint_reply_done(r, done);
	return fork_from(r, id, &f);
}
