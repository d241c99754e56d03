/*
 * POST /jobs/{id}/cancel.
 *
 *   queued   -> failed at once with error "cancelled" (it never runs: the
 *               runner claims only queued jobs). A job waiting for its
 *               turn behind another job of its sandbox is queued too; the
 *               jobs after it are woken (orchard_lane) and go on.
 *   running  -> the job is marked (cancel_requested_at) and the sandbox's
 *               agent is asked to kill it (POST /exec/cancel {"job_id"});
 *               the runner then stores the killed command's result with
 *               error "cancelled". The answer is the job once it finished,
 *               or as it is after CANCEL_WAIT_S.
 *   finished -> 409.
 *
 * An agent without /exec/cancel answers 404: then the mark is taken back
 * and the answer is 409 ("cannot cancel a running job on this agent").
 * One that does not know the job (404 "no such job") is asked again a few
 * times, since the job's /exec may still be on its way; then 409 too.
 * Every cancellation is an 'exec.cancel' event.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agent_client.h"
#include "api.h"
#include "err.h"
#include "json.h"
#include "log.h"
#include "strutil.h"

#define CANCEL_ERROR "cancelled"
#define AGENT_TIMEOUT_MS 10000
#define CANCEL_WAIT_S 10
#define UNKNOWN_RETRIES 3
#define UNKNOWN_RETRY_MS 300

/* queued -> failed; 1 when it was queued. */
static int cancel_queued(PGconn *db, struct api_req *r, const char *tenant)
{
	const char *params[5] = { r->id, tenant, CANCEL_ERROR, r->key_id, r->request_id };
	PGresult *res = NULL;
	int err, n;

	err = orc_pg_query(&res, db,
		"WITH j AS (UPDATE jobs SET status = 'failed', error = $3, failure = 'canceled',"
		" completed_at = clock_timestamp()"
		" WHERE id = $1 AND tenant_id = $2 AND status = 'queued' RETURNING id, sandbox_id, tenant_id),"
		" e AS (INSERT INTO events (sandbox_id, tenant_id, job_id, kind, data, api_key_id, request_id)"
		" SELECT j.sandbox_id, j.tenant_id, j.id, 'exec.cancel', '{\"was\": \"queued\"}',"
		" $4::bigint, nullif($5, '') FROM j)"
		" SELECT id FROM j", 5, params);
	if (err < 0)
		return err;
	n = PQntuples(res);
	PQclear(res);
	return n == 1;
}

/*
 * Mark a running job; *out gets status, agent address and token. The
 * status is "running" only when the mark was set.
 */
static int mark_running(PGresult **out, PGconn *db, struct api_req *r, const char *tenant)
{
	const char *params[2] = { r->id, tenant };

	return orc_pg_query(out, db,
		"WITH m AS (UPDATE jobs SET cancel_requested_at = now() WHERE id = $1 AND tenant_id = $2"
		" AND status = 'running' RETURNING id)"
		" SELECT CASE WHEN m.id IS NULL THEN j.status ELSE 'running' END,"
		" coalesce(s.agent_address, ''), s.agent_token"
		" FROM jobs j JOIN sandboxes s ON s.id = j.sandbox_id LEFT JOIN m ON m.id = j.id"
		" WHERE j.id = $1 AND j.tenant_id = $2", 2, params);
}

/* The agent took the cancellation: record it. */
static void cancel_event(struct api_req *r)
{
	const char *params[3] = { r->id, r->key_id, r->request_id };
	PGconn *db = NULL;

	if (orc_pg_pool_acquire(&api_server.db, &db) < 0)
		return;
	orc_pg_query(NULL, db, "INSERT INTO events (sandbox_id, tenant_id, job_id, kind, data,"
		     " api_key_id, request_id) SELECT sandbox_id, tenant_id, id, 'exec.cancel',"
		     " '{\"was\": \"running\"}', $2::bigint, nullif($3, '') FROM jobs WHERE id = $1",
		     3, params);
	orc_pg_pool_release(&api_server.db, db);
}

static void unmark(const char *job_id)
{
	const char *params[1] = { job_id };
	PGconn *db = NULL;

	if (orc_pg_pool_acquire(&api_server.db, &db) < 0)
		return;
	orc_pg_query(NULL, db, "UPDATE jobs SET cancel_requested_at = NULL WHERE id = $1"
		     " AND status = 'running'", 1, params);
	orc_pg_pool_release(&api_server.db, db);
}

/*
 * Ask the agent to kill the job: its HTTP status in *status; *unknown_job
 * is set when the agent has /exec/cancel but does not know the job (404
 * "no such job") as opposed to not having the route at all.
 */
static int ask_agent(long *status, int *unknown_job, const char *address, const char *token,
		     struct api_req *r)
{
	struct orc_buf resp = ORC_BUF_INIT;
	struct orc_agent_req req;
	json_object *body = json_object_new_object(), *answer = NULL, *e = NULL;
	int err;

	json_object_object_add(body, "job_id", json_object_new_string(r->id));
	memset(&req, 0, sizeof(req));
	req.address = address;
	req.token = token;
	req.method = "POST";
	req.path = "/exec/cancel";
	req.body = orc_json_str(body, &req.body_len);
	req.timeout_ms = AGENT_TIMEOUT_MS;
	req.request_id = r->request_id[0] ? r->request_id : NULL;
	orc_buf_init(&resp, 64 * 1024);
	err = orc_agent_call(&resp, status, &req);
	*unknown_job = err == 0 && *status == 404 &&
		orc_json_parse_object(&answer, orc_buf_cstr(&resp), resp.len, NULL, 0) == 0 &&
		json_object_object_get_ex(answer, "error", &e) && e &&
		!strcmp(json_object_get_string(e), "no such job");
	json_object_put(answer);
	orc_buf_release(&resp);
	json_object_put(body);
	return err;
}

static int reply_job(struct api_req *r, int64_t deadline_ms)
{
	PGresult *res = NULL;
	int err = api_job_wait_until(&res, r->tenant_id, r->id, deadline_ms);

	if (err < 0)
		return api_reply_error(r, err, "cannot read job %s", r->id);
	api_own_pg(r, res);
	return api_reply_json(r, 200, api_own_json(r, api_job_view(res, 0)));
}

static int reply_finished(struct api_req *r, const char *status)
{
	return api_reply_error(r, ORC_ECONFLICT, "job %s already finished (status %s); only a queued "
			       "or running job can be cancelled", r->id, status);
}

int api_job_cancel(struct api_req *r)
{
	char tenant[24];
	PGresult *res = NULL;
	PGconn *db = NULL;
	const char *status;
	long http = 0;
	int err, attempt, unknown_job = 0;

	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		return api_reply_error(r, err, "database unavailable");
	if ((err = cancel_queued(db, r, tenant)) == 0)
		err = mark_running(&res, db, r, tenant);
	orc_pg_pool_release(&api_server.db, db); /* never held across the agent call */
	if (err < 0)
		return api_reply_error(r, err, "cannot cancel job %s", r->id);
	if (err == 1)
		return reply_job(r, 0);
	api_own_pg(r, res);
	if (PQntuples(res) != 1)
		return api_reply_error(r, ORC_ENOTFOUND, "job %s not found", r->id);
	status = PQgetvalue(res, 0, 0);
	if (strcmp(status, "running"))
		return reply_finished(r, status);

	/* The runner marks a job running just before its /exec reaches the
	 * agent: a job the agent does not know yet is asked for again. */
	for (attempt = 0;; attempt++) {
		err = ask_agent(&http, &unknown_job, PQgetvalue(res, 0, 1), PQgetvalue(res, 0, 2), r);
		if (!unknown_job || attempt == UNKNOWN_RETRIES)
			break;
		usleep(UNKNOWN_RETRY_MS * 1000);
	}
	if (err == 0 && http >= 200 && http < 300) {
		cancel_event(r);
		return reply_job(r, orc_mono_ms() + CANCEL_WAIT_S * 1000);
	}
	unmark(r->id);
	if (err == 0 && (http == 404 || http == 409)) {
		PGresult *now = NULL;
		/* it may have finished meanwhile: then that is the answer */
		if (api_job_fetch(&now, r->tenant_id, r->id) == 0) {
			api_own_pg(r, now);
			if (api_job_finished(now))
				return reply_finished(r, PQgetvalue(now, 0, API_JOB_COL_STATUS));
		}
		if (unknown_job)
			return api_reply_error(r, ORC_ECONFLICT, "job %s is not running on the sandbox's "
					       "agent (it may be finishing); try again", r->id);
		return api_reply_error(r, ORC_ECONFLICT, "cannot cancel a running job on this agent");
	}
	orc_log(ORC_LOG_WARN, "cancel: agent call failed", "job_id", r->id, NULL);
	if (err < 0)
		return api_reply_error(r, API_EAGENT, "cannot reach the sandbox's agent to cancel job %s",
				       r->id);
	return api_reply_error(r, API_EAGENT, "the sandbox's agent answered HTTP %ld to the "
			       "cancellation of job %s", http, r->id);
}
