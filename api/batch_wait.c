/*
 * GET /sandboxes/batch/{id}/wait?ready=N&timeout=S: wait until N sandboxes
 * of the caller's batch (batch_create.c) are ready (default: all of them),
 * until that can no longer happen (too many failed or were deleted), or
 * until S seconds pass (default 3600, at most 3600; 0 looks once).
 *
 * Always 200 with the counts by status and each sandbox's id and status;
 * "satisfied" says whether N are ready, "timed_out" whether the wait ran
 * out first. Another tenant's batch is 404.
 *
 * The wait is event-driven: it sleeps on the notifications of the
 * batch's first pending sandbox (queued sandboxes are admitted in order,
 * so that one is usually the next to change) and re-reads the batch at
 * least every RECHECK_MS, for the others.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "err.h"
#include "json.h"
#include "strutil.h"
#include "xalloc.h"

#define WAIT_DEFAULT_S 3600
#define WAIT_MAX_S 3600
#define RECHECK_MS 1000

enum { B_COUNT, B_ID, B_STATE };

struct batch_state {
	int64_t count, ready, pending, failed, gone;
	char first_pending[64];       /* "" when none */
};

/* The tenant's batch: count, then one row per sandbox (id, state). */
static int batch_fetch(PGresult **out, struct api_req *r)
{
	const char *args[1] = { r->id };

	return api_sandbox_rows(out, NULL, r->tenant_id, "SELECT b.count, s.id, s.state"
				" FROM sandbox_batches b JOIN sandboxes s ON s.batch_id = b.id"
				" WHERE b.tenant_id = $1::bigint AND b.id = $2"
				" ORDER BY s.created_at, s.id", 1, args);
}

static void batch_count(struct batch_state *st, PGresult *res)
{
	int i, n = PQntuples(res);

	memset(st, 0, sizeof(*st));
	st->count = strtoll(PQgetvalue(res, 0, B_COUNT), NULL, 10);
	for (i = 0; i < n; i++) {
		const char *state = PQgetvalue(res, i, B_STATE);
		if (!strcmp(state, "ready")) {
			st->ready++;
		} else if (!strcmp(state, "pending")) {
			if (!st->pending++)
				snprintf(st->first_pending, sizeof(st->first_pending), "%s",
					 PQgetvalue(res, i, B_ID));
		} else if (!strcmp(state, "failed")) {
			st->failed++;
		} else {
			st->gone++;
		}
	}
}

static int reply_batch(struct api_req *r, PGresult *res, const struct batch_state *st, int64_t want,
		       int timed_out)
{
	json_object *o = api_own_json(r, json_object_new_object()), *list = json_object_new_array();
	int i, n = PQntuples(res);

	json_object_object_add(o, "batch_id", json_object_new_string(r->id));
	json_object_object_add(o, "count", json_object_new_int64(st->count));
	json_object_object_add(o, "want_ready", json_object_new_int64(want));
	json_object_object_add(o, "ready", json_object_new_int64(st->ready));
	json_object_object_add(o, "pending", json_object_new_int64(st->pending));
	json_object_object_add(o, "failed", json_object_new_int64(st->failed));
	json_object_object_add(o, "deleted", json_object_new_int64(st->gone));
	json_object_object_add(o, "satisfied", json_object_new_boolean(st->ready >= want));
	json_object_object_add(o, "timed_out", json_object_new_boolean(timed_out));
	for (i = 0; i < n; i++) {
		json_object *s = json_object_new_object();
		json_object_object_add(s, "sandbox_id", json_object_new_string(PQgetvalue(res, i, B_ID)));
		json_object_object_add(s, "status", json_object_new_string(
			api_sandbox_status(PQgetvalue(res, i, B_STATE))));
		json_object_array_add(list, s);
	}
	json_object_object_add(o, "sandboxes", list);
	return api_reply_json(r, 200, o);
}

int api_batch_wait(struct api_req *r)
{
	struct batch_state st;
	struct api_waiter w;
	PGresult *res = NULL;
	char watched[64] = "";
	const char *v;
	int64_t timeout, deadline, want = 0, wake;
	int err;

	if ((err = api_query_timeout(&timeout, r, WAIT_DEFAULT_S, WAIT_MAX_S)) < 0)
		return err;
	if ((v = api_req_query(r, "ready")) && *v && orc_parse_i64(&want, v, 1, INT32_MAX) < 0)
		return api_reply_error(r, ORC_EINVALID, "query parameter 'ready' must be a positive "
				       "integer, at most the batch's count");
	deadline = orc_mono_ms() + timeout * 1000;
	for (;;) {
		if (watched[0])
			api_waiter_init(&w, API_CHAN_SANDBOX, watched);
		if ((err = batch_fetch(&res, r)) < 0)
			return api_reply_error(r, err, err == ORC_ENOTFOUND ? "batch %s not found" :
					       "cannot read batch %s", r->id);
		batch_count(&st, res);
		if (!want)
			want = st.count;
		if (want > st.count) {
			PQclear(res);
			return api_reply_error(r, ORC_EINVALID, "query parameter 'ready' is %lld; batch %s "
					       "has %lld sandboxes", (long long)want, r->id,
					       (long long)st.count);
		}
		/* done, or it can no longer be */
		if (st.ready >= want || st.ready + st.pending < want || orc_mono_ms() >= deadline) {
			api_own_pg(r, res);
			return reply_batch(r, res, &st, want, st.ready < want && st.ready + st.pending >= want);
		}
		PQclear(res);
		if (strcmp(watched, st.first_pending)) {
			/* watch the new first pending one from before the next read */
			snprintf(watched, sizeof(watched), "%s", st.first_pending);
			continue;
		}
		wake = orc_mono_ms() + RECHECK_MS;
		api_waiter_wait(&w, wake < deadline ? wake : deadline);
	}
}
