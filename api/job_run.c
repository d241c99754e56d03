/*
 * Running one accepted job: claim it (queued -> running, only while the
 * sandbox is ready and every job of it accepted before has ended), call the
 * agent's POST /exec with no database connection held, store the outcome
 * and its 'exec.finish' event in one statement. Every outcome ends the job:
 * an unreachable or misbehaving agent is a failed job with the reason in
 * "error" (the HTTP answer is still the job object: that is the job's
 * result, not the request's).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent_client.h"
#include "api.h"
#include "err.h"
#include "json.h"
#include "log.h"
#include "strutil.h"
#include "xalloc.h"

#define AGENT_SLACK_S 10
/* A result that meets an unavailable database (a restart, a failover) is
 * retried this long: given up, the row would stay running behind this live
 * process's renewed lease for ever. A claim that meets one is tried again
 * by the lane (lanes.c) at its next wake-up or re-check. */
#define DB_RETRY_MS (120 * 1000)
#define DB_RETRY_PAUSE_US (250 * 1000)

struct job_outcome {
	const char *status;
	char exit_code[24];             /* "" = NULL */
	char signal[24];
	const char *out, *err;
	size_t out_len, err_len;
	char *err_note;                 /* err with the timeout note, owned */
	char out_bytes[24], err_bytes[24];
	int out_trunc, err_trunc, timed_out;
	char error[512];                /* "" = NULL */
	const char *failure;            /* class (job_failure.c); NULL: none */
	int broken;                     /* the agent call broke off: agent or sandbox? */
};

/*
 * Store the outcome over the 'running' row, with its 'exec.finish' event
 * and the sandbox's last activity, in one statement that also answers with
 * the finished job (api_job_cols): the caller waiting for it needs no
 * second read. *out (if not NULL) gets that row, or NULL when the row was
 * no longer running (reaped meanwhile: the caller reads what it became).
 */
static int store(PGresult **out, const char *job_id, const struct job_outcome *o,
		 const char *request_id)
{
	const char *params[15];
	int lengths[15] = { 0 }, formats[15] = { 0 };
	json_object *ev = json_object_new_object();
	PGresult *res = NULL;
	PGconn *db = NULL;
	char sql[2048];
	int err;

	json_object_object_add(ev, "status", json_object_new_string(o->status));
	json_object_object_add(ev, "exit_code", o->exit_code[0] ? json_object_new_int64(strtoll(o->exit_code, NULL, 10)) : NULL);
	json_object_object_add(ev, "timed_out", json_object_new_boolean(o->timed_out));
	if (o->error[0])
		json_object_object_add(ev, "error", json_object_new_string(o->error));
	params[0] = job_id;
	params[1] = o->status;
	params[2] = o->exit_code[0] ? o->exit_code : NULL;
	params[3] = o->signal[0] ? o->signal : NULL;
	params[4] = o->out ? o->out : "";
	lengths[4] = (int)o->out_len;
	formats[4] = 1;
	params[5] = o->err ? o->err : "";
	lengths[5] = (int)o->err_len;
	formats[5] = 1;
	params[6] = o->out_bytes[0] ? o->out_bytes : "0";
	params[7] = o->err_bytes[0] ? o->err_bytes : "0";
	params[8] = o->out_trunc ? "true" : "false";
	params[9] = o->err_trunc ? "true" : "false";
	params[10] = o->timed_out ? "true" : "false";
	params[11] = o->error[0] ? o->error : NULL;
	params[12] = orc_json_str(ev, NULL);
	params[13] = request_id;
	params[14] = o->failure;
	snprintf(sql, sizeof(sql),
		"WITH j AS (UPDATE jobs SET status = $2, exit_code = $3::int, signal = $4::int,"
		" stdout = $5::bytea, stderr = $6::bytea, stdout_bytes = $7::bigint,"
		" stderr_bytes = $8::bigint, stdout_truncated = $9::boolean,"
		" stderr_truncated = $10::boolean, timed_out = $11::boolean,"
		" error = CASE WHEN cancel_requested_at IS NOT NULL AND $2 = 'failed'"
		" THEN 'cancelled' ELSE $12 END,"
		" failure = CASE WHEN $2 <> 'failed' THEN NULL"
		" WHEN cancel_requested_at IS NOT NULL THEN 'canceled'"
		" WHEN failure = 'sandbox_lost' THEN failure ELSE $15 END,"
		" completed_at = clock_timestamp() WHERE id = $1 AND status = 'running'"
		" RETURNING *),"
		" e AS (INSERT INTO events (sandbox_id, tenant_id, job_id, kind, data, request_id)"
		" SELECT j.sandbox_id, j.tenant_id, j.id, 'exec.finish', $13::jsonb, $14 FROM j),"
		" s AS (UPDATE sandboxes SET last_activity_at = now()"
		" WHERE id = (SELECT sandbox_id FROM j)),"
		/* the output is in the row now (job_output.c) */
		" d AS (DELETE FROM job_output WHERE job_id = (SELECT id FROM j))"
		" SELECT %s FROM j", api_job_cols);
	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		goto done;
	err = orc_pg_query_bin(&res, db, sql, 15, params, lengths, formats);
	orc_pg_pool_release(&api_server.db, db);
	if (err == 0 && out && PQntuples(res) == 1) {
		*out = res;
		res = NULL;
	}
done:
	if (err < 0)
		orc_log(ORC_LOG_ERROR, "cannot store the job result", "job_id", job_id, NULL);
	PQclear(res);
	json_object_put(ev);
	return err;
}

void api_job_abandon(const char *job_id, const char *why)
{
	const char *params[2] = { job_id, why };
	PGconn *db = NULL;

	if (orc_pg_pool_acquire(&api_server.db, &db) < 0)
		return;
	/* its sandbox failed (lost), is being deleted (canceled with it) or
	 * cannot take it otherwise (infra) */
	orc_pg_query(NULL, db, "UPDATE jobs j SET status = 'failed', error = $2,"
		     " failure = coalesce(j.failure, CASE s.state WHEN 'failed' THEN 'sandbox_lost'"
		     " WHEN 'deleting' THEN 'canceled' WHEN 'deleted' THEN 'canceled'"
		     " ELSE 'infra_error' END),"
		     " completed_at = clock_timestamp() FROM sandboxes s"
		     " WHERE j.id = $1 AND j.status = 'queued' AND s.id = j.sandbox_id", 2, params);
	orc_pg_pool_release(&api_server.db, db);
}

/*
 * One claim statement; locked: under the tenant's exec lock
 * (exec_limit.c), for a job accepted under exec limits (jobs.queue_order
 * set), which also needs a free slot and no job of the tenant waiting
 * ahead of it. Unlocked, such a job is never claimed: the verdict is
 * "limited" and the caller claims it again under the lock.
 */
static const char claim_sql[] =
	"WITH lim AS (" API_EXEC_LIMIT_SQL("(SELECT tenant_id FROM jobs WHERE id = $1)", "$5", "$6",
					   "$7", "$8") "),"
	" c AS (UPDATE jobs j SET status = 'running', started_at = clock_timestamp(),"
	" runner = $2, lease_until = now() + $3::int * interval '1 second'"
	" FROM sandboxes s, lim WHERE j.id = $1 AND j.status = 'queued' AND s.id = j.sandbox_id"
	" AND s.state = 'ready' AND s.agent_address IS NOT NULL"
	" AND (NOT j.serial OR NOT EXISTS (SELECT 1 FROM jobs o WHERE o.sandbox_id = j.sandbox_id"
	" AND o.id <> j.id AND o.serial"
	" AND (o.status = 'running' OR (o.status = 'queued' AND o.seq < j.seq))))"
	" AND (j.queue_order IS NULL OR ($4::boolean"
	" AND (lim.sb IS NULL OR (SELECT count(*) FROM jobs r WHERE r.sandbox_id = j.sandbox_id"
	" AND r.status = 'running') < lim.sb)"
	" AND (lim.tn IS NULL OR (SELECT count(*) FROM jobs r WHERE r.tenant_id = j.tenant_id"
	" AND r.status = 'running') < lim.tn)"
	" AND NOT EXISTS (SELECT 1 FROM jobs o JOIN sandboxes os ON os.id = o.sandbox_id"
	" WHERE o.tenant_id = j.tenant_id AND o.status = 'queued' AND NOT o.serial"
	" AND o.queue_order < j.queue_order"
	" AND (o.sandbox_id = j.sandbox_id OR (" API_EXEC_SLOT_FREE_SQL("os") ")))))"
	" RETURNING s.agent_address, s.agent_token, j.command, j.cwd, j.env, j.login_shell,"
	" j.stdin, j.timeout_seconds, s.env AS sandbox_env, s.workdir, j.max_output_bytes,"
	" j.cwd_strict),"
	" q AS (SELECT j.status, j.queue_order, s.state, s.agent_address FROM jobs j"
	" JOIN sandboxes s ON s.id = j.sandbox_id WHERE j.id = $1)"
	" SELECT c.*, CASE WHEN c.agent_address IS NOT NULL THEN 'run'"
	" WHEN q.status IS DISTINCT FROM 'queued' THEN 'gone'"
	" WHEN q.state <> 'ready' OR q.agent_address IS NULL THEN 'unready'"
	" WHEN q.queue_order IS NOT NULL AND NOT $4::boolean THEN 'limited' ELSE 'wait' END"
	" FROM (SELECT 1) one LEFT JOIN q ON true LEFT JOIN c ON true";

static int claim_once(PGresult **out, PGconn *db, const char *job_id, int locked)
{
	char lease[24];
	const char *params[8] = { job_id, api_server.runner, lease, locked ? "true" : "false" };

	snprintf(lease, sizeof(lease), "%d", LEASE_S);
	api_exec_limit_params(params + 4);
	return orc_pg_query(out, db, claim_sql, 8, params);
}

/* The claim of a job accepted under exec limits, in the tenant's lock. */
static int claim_locked(PGresult **out, PGconn *db, const char *job_id)
{
	int err;

	if ((err = api_exec_limit_lock_job(db, job_id)) < 0)
		return err;
	if ((err = claim_once(out, db, job_id, 1)) < 0 || (err = orc_pg_commit(db)) < 0) {
		orc_pg_rollback(db);
		PQclear(*out);
		*out = NULL;
	}
	return err;
}

/*
 * queued -> running while the sandbox is ready and the job's turn has come.
 * A concurrent job's turn comes at once, unless it was accepted under exec
 * limits (exec_limit.c): then when a slot is free and nothing of the tenant
 * waits ahead of it. A serial job's
 * (sql/migrations/019_job_concurrency.sql) comes when no other serial job
 * of its sandbox is running and none accepted before it (smaller seq,
 * sql/migrations/007_job_order.sql) is still queued, whichever replica
 * holds them. No lock is needed against a racing claim of another serial
 * job of the sandbox: seq order is commit order, so a claim whose snapshot
 * shows every earlier serial job ended cannot overlap any of them, and a
 * later serial job's claim sees this one queued or running until it ended. One statement
 * also says why a job was not claimed. The statement accepting a wait: true
 * job (exec.c) claims it itself when its turn has come already, and answers
 * in this statement's layout for api_job_run_claimed.
 *
 * 0 with *out (the agent's address and token and the job's fields);
 * API_EAGAIN: not its turn yet, or the database is unavailable; try again
 * later. ORC_ENOTFOUND: it is no longer queued (cancelled, its runner
 * reaped, run); API_ENOTREADY: its sandbox will not run it.
 */
static int claim(PGresult **out, const char *job_id)
{
	PGresult *res = NULL;
	PGconn *db = NULL;
	const char *verdict;
	int err;

	if (orc_pg_pool_acquire(&api_server.db, &db) < 0)
		return API_EAGAIN;
	err = claim_once(&res, db, job_id, 0);
	if (err == 0 && PQntuples(res) == 1 && !strcmp(PQgetvalue(res, 0, API_CLAIM_VERDICT), "limited")) {
		PQclear(res);
		res = NULL;
		err = claim_locked(&res, db, job_id);
	}
	orc_pg_pool_release(&api_server.db, db);
	if (err < 0) {
		if (err != ORC_EUNAVAIL)
			orc_log(ORC_LOG_WARN, "cannot claim the job; trying again later", "job_id", job_id, NULL);
		return API_EAGAIN;
	}
	verdict = PQntuples(res) == 1 ? PQgetvalue(res, 0, API_CLAIM_VERDICT) : "gone";
	if (!strcmp(verdict, "run")) {
		*out = res;
		return 0;
	}
	err = !strcmp(verdict, "wait") ? API_EAGAIN : !strcmp(verdict, "unready") ? API_ENOTREADY :
		ORC_ENOTFOUND;
	PQclear(res);
	return err;
}

/* A claimed job, read from its row in claim()'s layout; the strings point
 * into that row (NULL where the column is). */
struct claimed_job {
	const char *address, *token, *command, *cwd, *env, *stdin_bytea, *sandbox_env, *workdir;
	int64_t timeout;
	size_t max_output;
	int login_shell, cwd_strict;
};

static const char *claim_col(PGresult *job, int col)
{
	return PQgetisnull(job, 0, col) ? NULL : PQgetvalue(job, 0, col);
}

/* Fill *out from row 0 of job: a missing or bad timeout is 300 s, a
 * missing or bad output cap the default (API_OUTPUT_DEFAULT). */
static void claimed_job_read(struct claimed_job *out, PGresult *job)
{
	int64_t cap;

	out->address = PQgetvalue(job, 0, API_CLAIM_ADDRESS);
	out->token = PQgetvalue(job, 0, API_CLAIM_TOKEN);
	out->command = PQgetvalue(job, 0, API_CLAIM_COMMAND);
	out->cwd = claim_col(job, API_CLAIM_CWD);
	out->env = PQgetvalue(job, 0, API_CLAIM_ENV);
	out->stdin_bytea = claim_col(job, API_CLAIM_STDIN);
	out->sandbox_env = PQgetvalue(job, 0, API_CLAIM_SANDBOX_ENV);
	out->workdir = claim_col(job, API_CLAIM_WORKDIR);
	if (orc_parse_i64(&out->timeout, PQgetvalue(job, 0, API_CLAIM_TIMEOUT), 1, 86400) < 0)
		out->timeout = 300;
	out->max_output = API_OUTPUT_DEFAULT;
	if (!PQgetisnull(job, 0, API_CLAIM_MAX_OUTPUT) &&
	    orc_parse_i64(&cap, PQgetvalue(job, 0, API_CLAIM_MAX_OUTPUT), 1, API_OUTPUT_MAX) == 0)
		out->max_output = (size_t)cap;
	out->login_shell = PQgetvalue(job, 0, API_CLAIM_LOGIN_SHELL)[0] == 't';
	out->cwd_strict = PQgetvalue(job, 0, API_CLAIM_CWD_STRICT)[0] == 't';
}

static char *agent_body(const struct claimed_job *job, const char *job_id)
{
	json_object *o = json_object_new_object();
	unsigned char *in = NULL;
	size_t in_len = 0;
	char *s;
	json_object *env = json_tokener_parse(job->sandbox_env), *job_env;

	/* The sandbox's env and workdir are defaults under the job's own. */
	if (!env || !json_object_is_type(env, json_type_object)) {
		json_object_put(env);
		env = json_object_new_object();
	}
	job_env = json_tokener_parse(job->env);
	if (job_env && json_object_is_type(job_env, json_type_object)) {
		json_object_object_foreach(job_env, k, v)
			json_object_object_add(env, k, json_object_get(v));
	}
	json_object_put(job_env);
	/* the agent knows the job by it for POST /exec/cancel */
	json_object_object_add(o, "job_id", json_object_new_string(job_id));
	json_object_object_add(o, "command", json_tokener_parse(job->command));
	if (job->cwd)
		json_object_object_add(o, "cwd", json_object_new_string(job->cwd));
	else if (job->workdir)
		json_object_object_add(o, "cwd", json_object_new_string(job->workdir));
	/* Orchard runs a command whose cwd is missing in / instead */
	if (!job->cwd_strict)
		json_object_object_add(o, "cwd_fallback", json_object_new_string("/"));
	json_object_object_add(o, "env", env);
	json_object_object_add(o, "login_shell", json_object_new_boolean(job->login_shell));
	json_object_object_add(o, "timeout_seconds", json_object_new_int64(job->timeout));
	json_object_object_add(o, "max_output_bytes", json_object_new_int64((int64_t)job->max_output));
	json_object_object_add(o, "stream", json_object_new_boolean(1));
	if (job->stdin_bytea &&
	    (in = PQunescapeBytea((const unsigned char *)job->stdin_bytea, &in_len))) {
		json_object_object_add(o, "stdin", json_object_new_string_len((const char *)in, (int)in_len));
		PQfreemem(in);
	}
	s = xstrdup(orc_json_str(o, NULL));
	json_object_put(o);
	return s;
}

static void field_int(char *out, size_t n, json_object *resp, const char *key)
{
	json_object *v;

	out[0] = '\0';
	if (json_object_object_get_ex(resp, key, &v) && v &&
	    (json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)))
		snprintf(out, n, "%lld", (long long)json_object_get_int64(v));
}

static int field_bool(json_object *resp, const char *key)
{
	json_object *v;

	return json_object_object_get_ex(resp, key, &v) && v && json_object_get_boolean(v);
}

static void field_text(const char **s, size_t *n, json_object *resp, const char *key)
{
	json_object *v;

	*s = "";
	*n = 0;
	if (json_object_object_get_ex(resp, key, &v) && v && json_object_is_type(v, json_type_string)) {
		*s = json_object_get_string(v);
		*n = (size_t)json_object_get_string_len(v);
	}
}

/* Fill o from the agent's answer (docs/agent-protocol.md). */
static void outcome_from_agent(struct job_outcome *o, json_object *resp, int64_t timeout)
{
	field_int(o->exit_code, sizeof(o->exit_code), resp, "exit_code");
	field_int(o->signal, sizeof(o->signal), resp, "signal");
	field_text(&o->out, &o->out_len, resp, "stdout");
	field_text(&o->err, &o->err_len, resp, "stderr");
	field_int(o->out_bytes, sizeof(o->out_bytes), resp, "stdout_bytes");
	field_int(o->err_bytes, sizeof(o->err_bytes), resp, "stderr_bytes");
	o->out_trunc = field_bool(resp, "stdout_truncated");
	o->err_trunc = field_bool(resp, "stderr_truncated");
	o->timed_out = field_bool(resp, "timed_out");
	if (!o->out_bytes[0])
		snprintf(o->out_bytes, sizeof(o->out_bytes), "%zu", o->out_len);
	if (!o->err_bytes[0])
		snprintf(o->err_bytes, sizeof(o->err_bytes), "%zu", o->err_len);
	/* Orchard's exit_code of a command killed by signal N is -N (Python's
	 * returncode); ours stays in "signal" too */
	if (o->signal[0] && strcmp(o->signal, "0"))
		snprintf(o->exit_code, sizeof(o->exit_code), "%lld", -strtoll(o->signal, NULL, 10));
	if (o->timed_out) {
		snprintf(o->error, sizeof(o->error), "Command timed out after %llds", (long long)timeout);
		/* Orchard's note at the end of stderr, after the command's own
		 * bytes (stderr_bytes counts those only) */
		o->err_note = xasprintf("%.*s\nCommand timed out after %llds and was killed",
					(int)o->err_len, o->err, (long long)timeout);
		o->err = o->err_note;
		o->err_len = strlen(o->err_note);
	} else if (!o->exit_code[0]) {
		snprintf(o->error, sizeof(o->error), "the agent reported no exit code");
	}
	o->status = !o->timed_out && !strcmp(o->exit_code, "0") ? "succeeded" : "failed";
	o->failure = api_job_failure(o->status, o->timed_out, o->signal,
				     field_bool(resp, "oom_killed"), field_bool(resp, "pids_limited"));
}

/*
 * The agent's answer to /exec with "stream": true: output lines passed to
 * sink (if any) as they come and stored for attached readers every
 * API_JOB_OUTPUT_FLUSH_MS (job_stream.c, job_output.c), the exit line the
 * result. Every job is run this way, so
 * that any job can be followed while it runs.
 */
static void call_stream(struct job_outcome *o, json_object **resp, struct orc_agent_req *req,
			int64_t timeout, size_t cap, const struct api_job_sink *sink, const char *job_id)
{
	struct api_job_stream js;
	long status = 0;
	int err;

	api_job_stream_init(&js, sink, cap, job_id);
	req->tick = api_job_stream_tick;
	req->tick_arg = &js;
	err = orc_agent_stream(&status, req, api_job_stream_feed, &js);
	req->tick = NULL;
	*resp = api_job_stream_result(&js);
	o->broken = err < 0;
	o->failure = "agent_error";
	if (err == ORC_EUNAVAIL) {
		snprintf(o->error, sizeof(o->error), "agent unreachable: cannot connect to the sandbox's agent");
	} else if (err == ORC_ETIMEOUT) {
		snprintf(o->error, sizeof(o->error), "agent did not answer within %llds",
			 (long long)(timeout + AGENT_SLACK_S));
	} else if (err < 0 || status != 200 || !*resp) {
		snprintf(o->error, sizeof(o->error), "%.400s (HTTP %ld)", js.error[0] ? js.error :
			 "agent call failed", status);
	} else {
		outcome_from_agent(o, *resp, timeout);
	}
	api_job_stream_release(&js);
}

/*
 * Run a claimed job (job: its row in claim()'s layout, which the accepting
 * statement of exec.c also answers in): with sink, streaming its output
 * lines there; *out (if not NULL) as store() leaves it. Declared in api.h.
 */
int api_job_run_claimed(PGresult **out, PGresult *job, const char *job_id, const char *request_id,
			const struct api_job_sink *sink)
{
	struct claimed_job cj;
	struct job_outcome o;
	struct orc_agent_req req;
	json_object *resp = NULL;
	char *body = NULL;
	int64_t timeout, t0, since;
	int err;

	memset(&o, 0, sizeof(o));
	o.status = "failed";
	claimed_job_read(&cj, job);
	timeout = cj.timeout;
	body = agent_body(&cj, job_id);
	memset(&req, 0, sizeof(req));
	req.address = cj.address;
	req.token = cj.token;
	req.method = "POST";
	req.path = "/exec";
	req.body = body;
	req.body_len = strlen(body);
	req.timeout_ms = (timeout + AGENT_SLACK_S) * 1000;
	req.request_id = request_id;
	t0 = orc_mono_ms();
	call_stream(&o, &resp, &req, timeout, cj.max_output, sink, job_id);
	if (o.broken)
		o.failure = api_job_lost_or_agent(job_id);
	api_metrics_exec(o.status, orc_mono_ms() - t0);
	if (o.error[0] && !o.timed_out)
		orc_log(ORC_LOG_WARN, "exec failed", "job_id", job_id, "agent", req.address,
			"error", o.error, NULL);
	orc_log(ORC_LOG_DEBUG, "job finished", "job_id", job_id, "state", o.status,
		ORC_LOG_INT("duration_ms", orc_mono_ms() - t0), NULL);
	since = orc_mono_ms();
	while ((err = store(out, job_id, &o, request_id)) == ORC_EUNAVAIL &&
	       orc_mono_ms() - since < DB_RETRY_MS)
		usleep(DB_RETRY_PAUSE_US);
	json_object_put(resp);
	free(o.err_note);
	free(body);
	return err;
}

/* Claim the job and run it. */
static int run(PGresult **out, const char *job_id, const char *request_id,
	       const struct api_job_sink *sink)
{
	PGresult *job = NULL;
	int err;

	if ((err = claim(&job, job_id)) < 0) {
		if (err == API_ENOTREADY)
			api_job_abandon(job_id, "the sandbox is not ready (it failed or is being deleted)");
		return err;
	}
	err = api_job_run_claimed(out, job, job_id, request_id, sink);
	PQclear(job);
	return err;
}

int api_job_run(PGresult **out, const char *job_id, const char *request_id)
{
	return run(out, job_id, request_id, NULL);
}

int api_job_run_stream(PGresult **out, const char *job_id, const char *request_id,
		       const struct api_job_sink *sink)
{
	return run(out, job_id, request_id, sink);
}
