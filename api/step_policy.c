/*
 * Per-step checkpoints (docs/checkpoints.md, issue 21): a sandbox's policy
 * and the barrier that keeps a step checkpoint consistent.
 *
 *   POST  /sandboxes        {..., checkpoints?: "none"|"every_step",
 *                            checkpoint_keep?, checkpoint_ttl_seconds?}
 *   PATCH /sandboxes/{id}   {checkpoints?, checkpoint_keep?, checkpoint_ttl_seconds?}
 *
 * The checkpoint itself is written by the database in the transaction
 * that records the step's end (sql/migrations/022_rollout_steps.sql) and
 * taken by the controller like any pending checkpoint, so the step answers
 * without waiting for the copy. The copy must still happen before the
 * next step changes the files: api_step_barrier(), called before a step
 * reaches the agent, waits until the sandbox's pending step checkpoints
 * are captured: ready, or (btrfs) announced as snapshotted by the
 * controller before it counts their bytes. The copy cost thus lands on the
 * next step, and only when the client is faster than the copy.
 *
 * Retention defaults (applied on create and PATCH when not given):
 *   ORCHARD_STEP_CHECKPOINT_KEEP         step checkpoints kept per sandbox (100)
 *   ORCHARD_STEP_CHECKPOINT_TTL_SECONDS  their lifetime; 0: until deleted (0)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "checkpoint.h"
#include "err.h"
#include "json.h"
#include "log.h"
#include "strutil.h"
#include "xalloc.h"

#define KEEP_DEFAULT 100
#define KEEP_MAX 100000
#define TTL_MAX_S (365 * 86400)
#define BARRIER_WAIT_S 120

static int64_t env_i64(const char *name, int64_t dflt, int64_t min, int64_t max)
{
	const char *v = getenv(name);
	int64_t n;

	if (!v || !*v || orc_parse_i64(&n, v, min, max) < 0)
		return dflt;
	return n;
}

int api_step_mode_parse(const char **out, json_object *body, const char *field, struct api_req *r)
{
	const char *mode = NULL;
	int err;

	if ((err = orc_json_get_str(body, field, &mode, API_ERRBUF(r))) < 0)
		return err;
	if (err == 1)
		mode = NULL;
	if (mode && strcmp(mode, "none") && strcmp(mode, "every_step"))
		return api_fail(r, ORC_EINVALID, "field '%s' must be \"none\" or \"every_step\"",
				field);
	*out = mode;
	return 0;
}

int api_step_policy_parse(struct api_step_policy *p, json_object *body, struct api_req *r)
{
	int err;

	memset(p, 0, sizeof(*p));
	if ((err = api_step_mode_parse(&p->mode, body, "checkpoints", r)) < 0)
		return err;
	if ((err = orc_json_get_int(body, "checkpoint_keep", &p->keep, 1, KEEP_MAX,
				    API_ERRBUF(r))) < 0)
		return err;
	if ((err = orc_json_get_int(body, "checkpoint_ttl_seconds", &p->ttl, 1, TTL_MAX_S,
				    API_ERRBUF(r))) < 0)
		return err;
	p->given = p->mode || p->keep || p->ttl;
	return 0;
}

static const char policy_sql[] =
	"UPDATE sandboxes SET checkpoints = COALESCE($3, checkpoints),"
	" checkpoint_keep = COALESCE($4::int, checkpoint_keep, $6::int),"
	" checkpoint_ttl_seconds = CASE WHEN $5::int IS NOT NULL THEN $5::int"
	"  WHEN checkpoint_keep IS NULL THEN nullif($7::int, 0) ELSE checkpoint_ttl_seconds END"
	" WHERE id = $1 AND tenant_id = $2::bigint";

/* Params of policy_sql; the buffers are the caller's. */
static void policy_params(const char **params, char bufs[5][24], const char *sandbox_id,
			  int64_t tenant_id, const struct api_step_policy *p)
{
	snprintf(bufs[0], 24, "%lld", (long long)tenant_id);
	snprintf(bufs[1], 24, "%lld", (long long)p->keep);
	snprintf(bufs[2], 24, "%lld", (long long)p->ttl);
	snprintf(bufs[3], 24, "%lld", (long long)env_i64("ORCHARD_STEP_CHECKPOINT_KEEP", KEEP_DEFAULT,
							   1, KEEP_MAX));
	snprintf(bufs[4], 24, "%lld", (long long)env_i64("ORCHARD_STEP_CHECKPOINT_TTL_SECONDS", 0,
							   0, TTL_MAX_S));
	params[0] = sandbox_id;
	params[1] = bufs[0];
	params[2] = p->mode;
	params[3] = p->keep ? bufs[1] : NULL;
	params[4] = p->ttl ? bufs[2] : NULL;
	params[5] = bufs[3];
	params[6] = bufs[4];
}

int api_step_policy_store(PGconn *db, const char *sandbox_id, int64_t tenant_id,
			  const struct api_step_policy *p)
{
	const char *params[7];
	char bufs[5][24];

	policy_params(params, bufs, sandbox_id, tenant_id, p);
	return orc_pg_query(NULL, db, policy_sql, 7, params);
}

int api_sandbox_patch(struct api_req *r)
{
	struct api_step_policy p;
	json_object *body, *o;
	const char *params[7];
	char bufs[5][24], *sql;
	PGresult *res = NULL;
	int err;

	if ((err = api_req_json_body(&body, r)) < 0)
		return err;
	json_object_object_foreach(body, k, v) {
		(void)v;
		if (strcmp(k, "checkpoints") && strcmp(k, "checkpoint_keep") &&
		    strcmp(k, "checkpoint_ttl_seconds"))
			return api_reply_error(r, ORC_EINVALID, "field '%.64s' cannot be changed; PATCH "
					       "takes checkpoints, checkpoint_keep and "
					       "checkpoint_ttl_seconds", k);
	}
	if ((err = api_step_policy_parse(&p, body, r)) < 0)
		return api_reply_failed(r, err);
	policy_params(params, bufs, r->id, r->tenant_id, &p);
	sql = api_own_mem(r, xasprintf("%s AND state IN ('pending', 'ready') RETURNING id,"
				       " COALESCE(checkpoints, (SELECT default_checkpoints FROM tenants t"
				       " WHERE t.id = tenant_id), 'none'), checkpoint_keep,"
				       " checkpoint_ttl_seconds", policy_sql));
	err = orc_pg_pool_query_one(&res, &api_server.db, sql, 7, params);
	if (err == ORC_ENOTFOUND)
		return api_reply_error(r, err, "sandbox %s not found (or no longer running)", r->id);
	if (err < 0)
		return api_reply_error(r, err, "cannot change sandbox %s", r->id);
	api_own_pg(r, res);
	o = api_own_json(r, json_object_new_object());
	json_object_object_add(o, "sandbox_id", json_object_new_string(PQgetvalue(res, 0, 0)));
	json_object_object_add(o, "checkpoints", json_object_new_string(PQgetvalue(res, 0, 1)));
	json_object_object_add(o, "checkpoint_keep", PQgetisnull(res, 0, 2) ? NULL :
			       json_object_new_int64(strtoll(PQgetvalue(res, 0, 2), NULL, 10)));
	json_object_object_add(o, "checkpoint_ttl_seconds", PQgetisnull(res, 0, 3) ? NULL :
			       json_object_new_int64(strtoll(PQgetvalue(res, 0, 3), NULL, 10)));
	return api_reply_json(r, 200, o);
}

/*
 * Checkpoints whose state the controller has captured for good (NOTIFY
 * orchard_checkpoint_taken: a btrfs snapshot, controller/rec_checkpoint.c)
 * while their row may still be pending (bytes being counted): the last
 * TAKEN_RING of them. The barrier lets the next step go as soon as its
 * sandbox's pending step checkpoints are all in here; an id that fell out
 * (or a wake-up lost to a listener reconnect) only means waiting for the
 * row to be ready, as without it.
 */
#define TAKEN_RING 256

static struct {
	pthread_mutex_t lock;
	char id[TAKEN_RING][64];
	unsigned next;
} taken = { .lock = PTHREAD_MUTEX_INITIALIZER };

void api_step_taken(const char *id)
{
	if (!id || !orc_is_dns_label(id))
		return;
	pthread_mutex_lock(&taken.lock);
	snprintf(taken.id[taken.next++ % TAKEN_RING], sizeof(taken.id[0]), "%s", id);
	pthread_mutex_unlock(&taken.lock);
	api_notify_local(API_CHAN_CHECKPOINT, id);
}

static int was_taken(const char *id)
{
	int yes = 0;

	pthread_mutex_lock(&taken.lock);
	for (size_t i = 0; i < TAKEN_RING && !yes; i++)
		yes = !strcmp(taken.id[i], id);
	pthread_mutex_unlock(&taken.lock);
	return yes;
}

/* The first of the comma-separated ids that was not taken, into out; 0
 * when all were. */
static int first_untaken(char *out, size_t outlen, const char *ids)
{
	const char *end;

	for (; *ids; ids = *end ? end + 1 : end) {
		end = strchr(ids, ',');
		if (!end)
			end = ids + strlen(ids);
		snprintf(out, outlen, "%.*s", (int)(end - ids), ids);
		if (!was_taken(out))
			return 1;
	}
	return 0;
}

void api_step_barrier(struct api_req *r, const char *sandbox_id)
{
	char tenant[24], id[64], armed[64] = "";
	const char *params[2] = { sandbox_id, tenant };
	int64_t deadline = orc_mono_ms() + BARRIER_WAIT_S * 1000;
	struct api_waiter w;
	PGresult *res = NULL;
	int wait;

	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	while (orc_mono_ms() < deadline) {
		if (orc_pg_pool_query_one(&res, &api_server.db, "SELECT string_agg(id, ','"
					  " ORDER BY created_at) FROM checkpoints"
					  " WHERE sandbox_id = $1 AND tenant_id = $2::bigint"
					  " AND state = 'pending' AND kind = 'step'", 2, params) < 0)
			return;   /* the step will find out */
		/* Wait for the first one not captured yet: woken when it is,
		 * or when its row changes. */
		wait = !PQgetisnull(res, 0, 0) &&
		       first_untaken(id, sizeof(id), PQgetvalue(res, 0, 0));
		PQclear(res);
		res = NULL;
		if (!wait)
			return;
		if (strcmp(armed, id)) {
			/* armed before it is looked at again: no lost wake-up */
			api_waiter_init(&w, API_CHAN_CHECKPOINT, id);
			snprintf(armed, sizeof(armed), "%s", id);
			continue;
		}
		api_waiter_wait(&w, deadline);
	}
	orc_log(ORC_LOG_WARN, "a step checkpoint is still pending; the step goes ahead",
		"sandbox_id", sandbox_id, "request_id", r->request_id, NULL);
}
