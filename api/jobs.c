/*
 * Job routes: GET /jobs/{id} and GET /jobs/{id}/wait?timeout=300.
 * A job is visible only to its tenant. The wait is event-driven
 * (orchard_job notifications from whichever process finished it) and
 * answers 200 with the job, finished or not, when the timeout passes.
 */
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "err.h"
#include "strutil.h"

#define JOB_WAIT_DEFAULT_S 300
#define JOB_WAIT_MAX_S 3600

int api_job_fetch(PGresult **out, int64_t tenant_id, const char *job_id)
{
	char tenant[24], sql[1024];
	const char *params[2] = { job_id, tenant };
	PGresult *res = NULL;
	int err;

	snprintf(tenant, sizeof(tenant), "%lld", (long long)tenant_id);
	snprintf(sql, sizeof(sql), "SELECT %s FROM jobs j WHERE j.id = $1 AND j.tenant_id = $2",
		 api_job_cols);
	if ((err = orc_pg_pool_query_one(&res, &api_server.db, sql, 2, params)) < 0)
		return err;
	*out = res;
	return 0;
}

int api_job_finished(PGresult *res)
{
	const char *s = PQgetvalue(res, 0, API_JOB_COL_STATUS);

	return !strcmp(s, "succeeded") || !strcmp(s, "failed");
}

int api_job_wait_until(PGresult **out, int64_t tenant_id, const char *job_id, int64_t deadline_ms)
{
	struct api_waiter w;
	PGresult *res;
	int err;

	api_waiter_init(&w, API_CHAN_JOB, job_id);
	for (;;) {
		if ((err = api_job_fetch(&res, tenant_id, job_id)) < 0)
			return err;
		if (api_job_finished(res) || orc_mono_ms() >= deadline_ms) {
			*out = res;
			return 0;
		}
		PQclear(res);
		api_waiter_wait(&w, deadline_ms);
	}
}

static int reply_job(struct api_req *r, int err, PGresult *res)
{
	if (err == ORC_ENOTFOUND)
		return api_reply_error(r, err, "job %s not found", r->id);
	if (err < 0)
		return api_reply_error(r, err, "cannot read job %s", r->id);
	api_own_pg(r, res);
	return api_reply_json(r, 200, api_own_json(r, api_job_view(res, 0)));
}

int api_job_get(struct api_req *r)
{
	PGresult *res = NULL;
	int err = api_job_fetch(&res, r->tenant_id, r->id);

	return reply_job(r, err, res);
}

int api_job_wait(struct api_req *r)
{
	PGresult *res = NULL;
	int64_t timeout;
	int err;

	if ((err = api_query_timeout(&timeout, r, JOB_WAIT_DEFAULT_S, JOB_WAIT_MAX_S)) < 0)
		return err;
	err = api_job_wait_until(&res, r->tenant_id, r->id, orc_mono_ms() + timeout * 1000);
	return reply_job(r, err, res);
}
