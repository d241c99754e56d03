/*
 * Failure classes of jobs (sql/migrations/023_failure_class.sql,
 * docs/architecture.md "Failure classes"): what ended a failed job, for a
 * trainer that masks infrastructure failures out of its rewards.
 *
 * From the agent's answer: a resource limit the sandbox hit while the job
 * ran (the agent compares its cgroup's OOM-kill and refused-fork counters
 * before and after, agent/cglimits.c) wins over the timeout and the
 * signal it caused; a timeout is ours; any other signal is "killed"; a
 * plain non-zero exit is no class. When the call itself broke off, the
 * sandbox decides: if the controller marks it failed within
 * LOST_WAIT_MS the sandbox was lost (deleted: the job went with it, as
 * if canceled), else the agent failed on its own.
 */
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "err.h"
#include "strutil.h"

#define LOST_WAIT_MS (15 * 1000)

const char *api_job_failure(const char *status, int timed_out, const char *signal,
			    int oom_killed, int pids_limited)
{
	if (strcmp(status, "failed"))
		return NULL;
	if (oom_killed)
		return "oom_killed";
	if (pids_limited)
		return "pids_limit";
	if (timed_out)
		return "timeout";
	if (signal[0] && strcmp(signal, "0"))
		return "killed";
	return NULL;
}

/* The job's sandbox id and state (0), or an error. */
static int sandbox_state(PGresult **out, const char *job_id)
{
	const char *params[1] = { job_id };

	return orc_pg_pool_query_one(out, &api_server.db,
		"SELECT s.id, s.state FROM jobs j JOIN sandboxes s ON s.id = j.sandbox_id"
		" WHERE j.id = $1", 1, params);
}

const char *api_job_lost_or_agent(const char *job_id)
{
	int64_t deadline = orc_mono_ms() + LOST_WAIT_MS;
	struct api_waiter w;
	PGresult *res = NULL;
	char sandbox_id[128];
	char state[16] = "ready";

	if (sandbox_state(&res, job_id) < 0)
		return "agent_error";
	snprintf(sandbox_id, sizeof(sandbox_id), "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	api_waiter_init(&w, API_CHAN_SANDBOX, sandbox_id);
	for (;;) {
		if (sandbox_state(&res, job_id) < 0)
			break;
		snprintf(state, sizeof(state), "%s", PQgetvalue(res, 0, 1));
		PQclear(res);
		if (strcmp(state, "ready") || orc_mono_ms() >= deadline)
			break;
		api_waiter_wait(&w, deadline);
	}
	if (!strcmp(state, "ready"))
		return "agent_error";
	return !strcmp(state, "failed") ? "sandbox_lost" : "canceled";
}
