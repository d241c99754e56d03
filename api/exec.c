/*
 * POST /sandboxes/{id}/exec: accept a command as a job.
 *
 * The job row and its 'exec.accept' event are written in one statement,
 * only if the sandbox is the caller's and ready (failed: 409; pending: the
 * request waits for it up to PENDING_WAIT_S, as Orchard does); the same
 * statement numbers the job in its sandbox's acceptance order (jobs.seq
 * from sandboxes.job_seq, sql/migrations/007_job_order.sql).
 *
 * Jobs of one sandbox run concurrently, as in Orchard: a job starts as soon
 * as it is accepted. "serial": true opts into strict order
 * (sql/migrations/019_job_concurrency.sql): the job queues in the sandbox's
 * lane (lanes.c) and starts when every serial job of the sandbox accepted
 * before it has ended, on any replica:
 *   wait: false  -> {"job_id", "status": "queued"}; a worker runs it.
 *   wait: true   -> this thread runs it when its turn comes and answers with
 *                   the finished job (from the statement storing it); if its
 *                   turn does not come within timeout_seconds + 30 s, a
 *                   worker takes it over and the answer is the unfinished
 *                   job (status queued/running). When its turn has come
 *                   already (always, for a concurrent job), the accepting
 *                   statement claims it too and it runs at once, without a
 *                   lane.
 * Idempotency-Key: a retry gets the first job (waited on like the first
 * call), and the command never runs twice.
 *
 * Under exec limits (exec_limit.c) a job is accepted in the tenant's exec
 * lock instead: queued while no slot is free (in the database, so it runs
 * once whatever api process dies), a 429 naming the bound when the queue
 * is full. A wait: true job that queues waits as a serial one does.
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

#define STDIN_MAX (8u << 20)
#define WAIT_SLACK_S 30
#define PENDING_WAIT_S 15 /* Orchard's agent_ready_wait_seconds */

struct exec_req {
	json_object *command;
	const char *cwd;
	json_object *env;
	int64_t timeout;
	int login_shell;
	int wait;
	int stream;               /* NDJSON output as it comes (implies wait) */
	const char *stdin_data;   /* NULL: none */
	size_t stdin_len;
	const char *idempotency_key;
	int serial;               /* strict order among the sandbox's serial jobs */
	int cwd_strict;           /* a missing cwd fails instead of falling back to / */
	int64_t max_output;       /* per stream; 0: the server default */
};

static int parse_exec(struct exec_req *x, struct api_req *r, json_object *body)
{
	json_object *v;
	const char *accept;
	int err;

	memset(x, 0, sizeof(*x));
	x->timeout = 300;
	if (!json_object_object_get_ex(body, "command", &x->command) || !x->command)
		return api_fail(r, ORC_EINVALID, "field 'command' is required (a string, or an "
				"array of strings)");
	if ((err = api_check_command(x->command, r)) < 0)
		return err;
	/* null means 300; Orchard treats 0 the same way */
	if ((err = orc_json_get_int(body, "timeout_seconds", &x->timeout, 0, 86400, API_ERRBUF(r))) < 0)
		return err;
	if (x->timeout == 0)
		x->timeout = 300;
	if (json_object_object_get_ex(body, "cwd", &v) && v) {
		if ((err = api_check_path(v, "cwd", r)) < 0)
			return err;
		x->cwd = json_object_get_string(v);
	}
	if ((err = orc_json_get_object(body, "env", &x->env, API_ERRBUF(r))) < 0 ||
	    (x->env && (err = api_check_env(x->env, "env", r)) < 0))
		return err;
	if ((err = orc_json_get_bool(body, "login_shell", &x->login_shell, API_ERRBUF(r))) < 0)
		return err;
	if ((err = orc_json_get_bool(body, "wait", &x->wait, API_ERRBUF(r))) < 0)
		return err;
	if ((err = orc_json_get_bool(body, "stream", &x->stream, API_ERRBUF(r))) < 0)
		return err;
	if ((err = orc_json_get_bool(body, "serial", &x->serial, API_ERRBUF(r))) < 0 ||
	    (err = orc_json_get_bool(body, "cwd_strict", &x->cwd_strict, API_ERRBUF(r))) < 0)
		return err;
	if ((err = orc_json_get_int(body, "max_output_bytes", &x->max_output, 1, API_OUTPUT_MAX,
				    API_ERRBUF(r))) < 0)
		return err;
	if ((accept = api_req_param(r, "HTTP_ACCEPT")) && strstr(accept, "application/x-ndjson"))
		x->stream = 1;
	if (x->stream)
		x->wait = 1;
	if ((err = orc_json_get_bytes(body, "stdin", &x->stdin_data, &x->stdin_len, API_ERRBUF(r))) < 0)
		return err;
	if (x->stdin_data && x->stdin_len > STDIN_MAX)
		return api_fail(r, ORC_EINVALID, "field 'stdin' is larger than %u bytes", STDIN_MAX);
	x->idempotency_key = api_req_param(r, "HTTP_IDEMPOTENCY_KEY");
	if (x->idempotency_key && !*x->idempotency_key)
		x->idempotency_key = NULL;
	if (x->idempotency_key && !api_check_idempotency_key(x->idempotency_key))
		return api_fail(r, API_EBADREQ, "Idempotency-Key must be 1-255 printable ASCII "
				"characters");
	return 0;
}

/* A random UUID (version 4): a DNS label, like Orchard's job ids. */
static void new_job_id(char out[37])
{
	unsigned char b[16];

	orc_random_bytes(b, sizeof(b));
	b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
	b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
	snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
		 b[13], b[14], b[15]);
}

static char *event_data(const struct exec_req *x)
{
	json_object *o = json_object_new_object();
	char *s;

	json_object_object_add(o, "command", json_object_get(x->command));
	if (x->cwd)
		json_object_object_add(o, "cwd", json_object_new_string(x->cwd));
	json_object_object_add(o, "timeout_seconds", json_object_new_int64(x->timeout));
	json_object_object_add(o, "login_shell", json_object_new_boolean(x->login_shell));
	json_object_object_add(o, "wait", json_object_new_boolean(x->wait));
	if (x->stdin_data)
		json_object_object_add(o, "stdin_bytes", json_object_new_int64((int64_t)x->stdin_len));
	if (x->serial)
		json_object_object_add(o, "serial", json_object_new_boolean(1));
	if (x->cwd_strict)
		json_object_object_add(o, "cwd_strict", json_object_new_boolean(1));
	if (x->max_output)
		json_object_object_add(o, "max_output_bytes", json_object_new_int64(x->max_output));
	s = xstrdup(orc_json_str(o, NULL));
	json_object_put(o);
	return s;
}

/* The accepting statement's own columns, after claim()'s. */
enum { ACC_STATE = API_CLAIM_NCOLS, ACC_MESSAGE, ACC_INSERTED, ACC_SEQ, ACC_LIMITED };

#define NEED_LOCK 1 /* insert_job: exec limits apply; accept under the lock */

/*
 * Insert the job if the sandbox is the caller's and ready; *seq_out gets
 * its place in the sandbox's order. Returns 0, ORC_ENOTFOUND,
 * API_ENOTREADY (with the sandbox state in *state_out), or the database error
 * (ORC_ECONFLICT: the Idempotency-Key is taken).
 *
 * Incrementing sandboxes.job_seq locks the sandbox row until this statement
 * commits, so jobs of one sandbox commit in seq order (job_run.c relies on
 * it); a failed statement takes its number back.
 *
 * With claim set (wait: true), the same statement also claims the job when
 * its turn has come already, which is the common case of one caller per
 * sandbox: one commit instead of two. *claimed_out then gets the job in
 * claim()'s layout (job_run.c) for api_job_run_claimed; else it stays NULL
 * and the job waits in its lane as usual. A concurrent job's turn has
 * always come. A serial job's has come when no serial job of
 * the sandbox is queued or running in this statement's snapshot and that
 * snapshot already holds every earlier job: the job_seq it read (s) is one
 * below the one the increment took (n). The increment may have waited for
 * another accept's lock, and that job, committed after the snapshot, would
 * be invisible to it; then the seqs differ and the lane's claim decides.
 * Jobs that end after the snapshot only make the test stricter.
 */
static int insert_job(PGresult **claimed_out, int64_t *seq_out, PGconn *db, struct api_req *r,
		      const struct exec_req *x, const char *job_id, int claim, int locked,
		      struct api_sandbox_state *state_out)
{
	char tenant[24], timeout[24], lease[24], max_output[24], *data = event_data(x);
	const char *params[24];
	int lengths[24] = { 0 }, formats[24] = { 0 };
	PGresult *res = NULL;
	int err;

	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	snprintf(timeout, sizeof(timeout), "%lld", (long long)x->timeout);
	params[0] = r->id;
	params[1] = tenant;
	params[2] = job_id;
	params[3] = orc_json_str(x->command, NULL);
	params[4] = x->cwd;
	params[5] = x->env ? orc_json_str(x->env, NULL) : "{}";
	params[6] = x->login_shell ? "true" : "false";
	params[7] = x->stdin_data;
	lengths[7] = (int)x->stdin_len;
	formats[7] = 1;
	params[8] = timeout;
	params[9] = api_server.runner;
	params[10] = r->key_id;
	params[11] = x->idempotency_key;
	params[12] = data;
	params[13] = r->request_id;
	snprintf(lease, sizeof(lease), "%d", LEASE_S);
	params[14] = lease;
	params[15] = claim ? "true" : "false";
	params[16] = x->serial ? "true" : "false";
	snprintf(max_output, sizeof(max_output), "%lld", (long long)x->max_output);
	params[17] = x->max_output ? max_output : NULL;
	params[18] = x->cwd_strict ? "true" : "false";
	params[19] = locked ? "true" : "false";
	api_exec_limit_params(params + 20);
	err = orc_pg_query_bin(&res, db,
		"WITH lim AS (" API_EXEC_LIMIT_SQL("$2::bigint", "$21", "$22", "$23", "$24") "),"
		/* a paused sandbox (sandbox_pause.c) reads as state 'paused' */
		" s AS (SELECT id, tenant_id, CASE WHEN state = 'ready' AND (paused OR pause_desired)"
		" THEN 'paused' ELSE state END AS state, state_message, job_seq FROM sandboxes"
		" WHERE id = $1 AND tenant_id = $2 AND state NOT IN ('deleting', 'deleted')),"
		" n AS (UPDATE sandboxes SET job_seq = job_seq + 1 WHERE id = $1 AND tenant_id = $2"
		" AND state = 'ready' AND NOT paused AND NOT pause_desired"
		/* under exec limits, only under the tenant's lock (exec_limit.c) */
		" AND ($20::boolean OR (SELECT num_nonnulls(sb, tn, qsb, qtn) FROM lim) = 0)"
		" RETURNING id, tenant_id, job_seq, agent_address, agent_token, env, workdir),"
		" t AS (SELECT n.*, $16::boolean AND n.agent_address IS NOT NULL"
		" AND (NOT $17::boolean OR (n.job_seq = (SELECT s.job_seq + 1 FROM s)"
		" AND NOT EXISTS (SELECT 1 FROM jobs o WHERE o.sandbox_id = $1 AND o.serial"
		" AND o.status IN ('queued', 'running')))) AS turn, clock_timestamp() AS at FROM n),"
		" j AS (INSERT INTO jobs (id, sandbox_id, tenant_id, command, cwd, env, login_shell,"
		" stdin, timeout_seconds, runner, lease_until, created_by_key, idempotency_key, seq,"
		" status, created_at, started_at, serial, max_output_bytes, cwd_strict, queue_order)"
		" SELECT $3, t.id, t.tenant_id, $4::jsonb, $5, $6::jsonb, $7::boolean, $8::bytea,"
		" $9::int, $10, now() + $15::int * interval '1 second', $11::bigint, $12, t.job_seq,"
		" CASE WHEN t.turn THEN 'running' ELSE 'queued' END,"
		/* one clock reading: a job claimed here starts as it is created */
		" t.at, CASE WHEN t.turn THEN t.at END, $17::boolean, $18::bigint, $19::boolean,"
		" CASE WHEN $20::boolean THEN nextval('jobs_queue_order_seq') END"
		" FROM t RETURNING id, sandbox_id, tenant_id, seq, status, command, cwd, env,"
		" login_shell, stdin, timeout_seconds, max_output_bytes, cwd_strict),"
		" e AS (INSERT INTO events (sandbox_id, tenant_id, job_id, kind, data, api_key_id,"
		" request_id) SELECT j.sandbox_id, j.tenant_id, j.id, 'exec.accept', $13::jsonb,"
		" $11::bigint, nullif($14, '') FROM j)"
		/* claim()'s layout (API_CLAIM_*), then ours (ACC_*) */
		" SELECT t.agent_address, t.agent_token, j.command, j.cwd, j.env, j.login_shell,"
		" j.stdin, j.timeout_seconds, t.env AS sandbox_env, t.workdir, j.max_output_bytes,"
		" j.cwd_strict, CASE WHEN j.status = 'running' THEN 'run' ELSE 'wait' END,"
		" s.state, coalesce(s.state_message, ''), j.id IS NOT NULL, j.seq,"
		" NOT $20::boolean AND coalesce((SELECT num_nonnulls(sb, tn, qsb, qtn) > 0 FROM lim), false)"
		" FROM s LEFT JOIN j ON true LEFT JOIN t ON true",
		24, params, lengths, formats);
	free(data);
	if (err < 0)
		return err;
	if (PQntuples(res) != 1)
		err = ORC_ENOTFOUND;
	else if (strcmp(PQgetvalue(res, 0, ACC_INSERTED), "t") && !strcmp(PQgetvalue(res, 0, ACC_STATE), "ready")
		 && !strcmp(PQgetvalue(res, 0, ACC_LIMITED), "t"))
		err = NEED_LOCK;
	else if (strcmp(PQgetvalue(res, 0, ACC_INSERTED), "t")) {
		api_sandbox_state_set(state_out, PQgetvalue(res, 0, ACC_STATE),
				      PQgetvalue(res, 0, ACC_MESSAGE));
		err = API_ENOTREADY;
	} else if (orc_parse_i64(seq_out, PQgetvalue(res, 0, ACC_SEQ), 1, INT64_MAX) < 0) {
		err = ORC_ERROR;
	} else if (!strcmp(PQgetvalue(res, 0, API_CLAIM_VERDICT), "run")) {
		*claimed_out = res;
		return 0;
	}
	PQclear(res);
	return err;
}

/*
 * insert_job, but a sandbox that is still pending is waited for (its
 * orchard_sandbox notifications) up to PENDING_WAIT_S, as Orchard does, so
 * an exec right after create(wait_ready=False) works. *db is released
 * while waiting; NULL when it could not be had again (the error says so).
 */
static int insert_job_when_ready(PGresult **claimed_out, int64_t *seq_out, PGconn **db,
				 struct api_req *r, const struct exec_req *x, const char *job_id,
				 struct api_sandbox_state *state_out)
{
	int64_t until = orc_mono_ms() + PENDING_WAIT_S * 1000;
	struct api_waiter w;
	int err;

	api_waiter_init(&w, API_CHAN_SANDBOX, r->id);
	for (;;) {
		err = insert_job(claimed_out, seq_out, *db, r, x, job_id, x->wait, 0, state_out);
		if (err != API_ENOTREADY || strcmp(state_out->state, "pending") || orc_mono_ms() >= until)
			return err;
		orc_pg_pool_release(&api_server.db, *db);
		*db = NULL;
		api_waiter_wait(&w, until);
		if ((err = orc_pg_pool_acquire(&api_server.db, db)) < 0)
			return err;
	}
}

/*
 * insert_job under exec limits (exec_limit.c), in the tenant's exec lock:
 * claimed at once only when a slot is free and nothing of the tenant waits
 * ahead of it (wait: false too, for a worker to run: a job that was free to
 * start never counts as queued against the bounds), else queued. ORC_EQUOTA (r->error names
 * the bound) when it would wait and a queue bound is reached: nothing is written.
 */
static int insert_limited(PGresult **claimed_out, int64_t *seq_out, PGconn *db, struct api_req *r,
			  const struct exec_req *x, const char *job_id,
			  struct api_sandbox_state *state_out)
{
	PGresult *claimed = NULL;
	int run_now = 0, err;

	if ((err = api_exec_limit_lock(db, r->tenant_id)) < 0)
		return err;
	if ((err = api_exec_limit_admit(&run_now, db, r)) < 0 ||
	    (err = insert_job(&claimed, seq_out, db, r, x, job_id, run_now, 1, state_out)) < 0 ||
	    (err = orc_pg_commit(db)) < 0) {
		orc_pg_rollback(db);
		PQclear(claimed);
		return err;
	}
	*claimed_out = claimed;
	return 0;
}

static int reply_job_row(struct api_req *r, PGresult *res)
{
	api_own_pg(r, res);
	return api_reply_json(r, 200, api_own_json(r, api_job_view(res, 0)));
}

static int reply_queued(struct api_req *r, const char *job_id, const char *status)
{
	json_object *o = api_own_json(r, json_object_new_object());

	json_object_object_add(o, "job_id", json_object_new_string(job_id));
	json_object_object_add(o, "status", json_object_new_string(status));
	return api_reply_json(r, 200, o);
}

/* A retry with a known Idempotency-Key: answer like the first call did. */
static int replay(struct api_req *r, const struct exec_req *x, PGconn **db)
{
	char tenant[24], sql[1024];
	const char *params[2] = { tenant, x->idempotency_key };
	PGresult *res = NULL, *done = NULL;
	int err;

	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	snprintf(sql, sizeof(sql), "SELECT %s FROM jobs j WHERE j.tenant_id = $1"
		 " AND j.idempotency_key = $2", api_job_cols);
	if ((err = orc_pg_query_one(&res, *db, sql, 2, params)) < 0)
		return err;
	orc_pg_pool_release(&api_server.db, *db);
	*db = NULL;
	api_own_pg(r, res);
	if (strcmp(PQgetvalue(res, 0, API_JOB_COL_SANDBOX), r->id))
		return api_reply_error(r, ORC_ECONFLICT, "Idempotency-Key was already used for a job "
				       "in another sandbox");
	api_idempotency_replayed(r);
	if (!x->wait)
		return reply_queued(r, PQgetvalue(res, 0, API_JOB_COL_ID),
				    PQgetvalue(res, 0, API_JOB_COL_STATUS));
	if ((err = api_job_wait_until(&done, r->tenant_id, PQgetvalue(res, 0, API_JOB_COL_ID),
				      orc_mono_ms() + (x->timeout + WAIT_SLACK_S) * 1000)) < 0)
		return api_reply_error(r, err, "cannot read job %s", PQgetvalue(res, 0, API_JOB_COL_ID));
	return reply_job_row(r, done);
}

/*
 * Run a wait: true job on this thread: at once if accepting it claimed it,
 * else when its turn comes in its lane. *out: the row this thread stored,
 * or NULL (it did not run here, or was reaped meanwhile): read the job.
 */
static void run_sync(PGresult **out, struct api_lane_entry *lane, PGresult *claimed,
		     struct api_req *r, const struct exec_req *x, const char *job_id,
		     const struct api_job_sink *sink)
{
	*out = NULL;
	if (claimed)
		api_job_run_claimed(out, claimed, job_id, r->request_id[0] ? r->request_id : NULL, sink);
	else
		api_lane_run(out, lane, orc_mono_ms() + (x->timeout + WAIT_SLACK_S) * 1000, sink);
}

/* ---- streaming (stream: true or Accept: application/x-ndjson) ------------ */

static int sink_line(void *arg, const char *s, size_t n)
{
	struct api_req *r = arg;

	/* a revoked key's stream ends; the job itself runs on (as when the
	 * client goes) and stays readable by a valid key */
	if (api_key_revoked(r->key_id))
		return ORC_EFORBIDDEN;
	return api_reply_ndjson_line(r, s, n, 1);
}

static void stream_obj(struct api_req *r, json_object *o)
{
	size_t len = 0;
	const char *s = orc_json_str(o, &len);

	api_reply_ndjson_line(r, s, len, 1);
	json_object_put(o);
}

/*
 * The answer is NDJSON from here on: {"type":"job","job_id"} at once, the
 * agent's {"type":"stdout"|"stderr","data":base64} lines as the command
 * writes, then {"type":"exit","job":{...}}: the job as GET /jobs/{id}
 * answers (unfinished if its turn did not come in time). The job is the
 * same as without streaming: stored, evented, replayable.
 */
static int run_streaming(struct api_req *r, struct api_lane_entry *lane, PGresult *claimed,
			 const struct exec_req *x, const char *job_id)
{
	struct api_job_sink sink = { sink_line, r };
	json_object *o;
	PGresult *res = NULL;

	api_reply_ndjson_begin(r);
	o = json_object_new_object();
	json_object_object_add(o, "type", json_object_new_string("job"));
	json_object_object_add(o, "job_id", json_object_new_string(job_id));
	stream_obj(r, o);
	run_sync(&res, lane, claimed, r, x, job_id, &sink);
	o = json_object_new_object();
	if (api_key_revoked(r->key_id)) {
		json_object_object_add(o, "type", json_object_new_string("error"));
		json_object_object_add(o, "error", json_object_new_string("the API key was revoked"));
	} else if (res || (api_job_fetch(&res, r->tenant_id, job_id) == 0 && PQntuples(res) == 1)) {
		json_object_object_add(o, "type", json_object_new_string("exit"));
		json_object_object_add(o, "job", api_job_view(res, 0));
	} else {
		json_object_object_add(o, "type", json_object_new_string("error"));
		json_object_object_add(o, "error", json_object_new_string("cannot read the job's result"));
	}
	PQclear(res);
	stream_obj(r, o);
	return 0;
}

int api_exec_post(struct api_req *r)
{
	struct api_lane_entry *lane = NULL;
	struct exec_req x;
	json_object *body;
	PGresult *res = NULL, *claimed = NULL;
	PGconn *db = NULL;
	struct api_sandbox_state st;
	char job_id[37];
	int64_t seq = 0;
	int err;

	if ((err = api_req_json_body(&body, r)) < 0)
		return err;
	if ((err = parse_exec(&x, r, body)) < 0)
		return api_reply_failed(r, err);
	if ((err = api_exec_resume(r, body)) < 0)   /* "resume": true (sandbox_pause.c) */
		return err;
	api_step_barrier(r, r->id);                 /* the last step's checkpoint first */
	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		return api_reply_error(r, err, "database unavailable");
	if (x.idempotency_key) {
		if ((err = api_idempotency_bind(r, db, "exec", x.idempotency_key)) < 0)
			goto done;
		err = replay(r, &x, &db);
		if (r->replied || err != ORC_ENOTFOUND)
			goto replayed;
	}
	new_job_id(job_id);
	err = insert_job_when_ready(&claimed, &seq, &db, r, &x, job_id, &st);
	if (err == NEED_LOCK)
		err = insert_limited(&claimed, &seq, db, r, &x, job_id, &st);
	if (err == ORC_ECONFLICT && x.idempotency_key) {
		/* a concurrent retry with the same key inserted first */
		err = replay(r, &x, &db);
		if (r->replied || err != ORC_ENOTFOUND)
			goto replayed;
		err = ORC_ECONFLICT;
	}
	orc_pg_pool_release(&api_server.db, db); /* never held across the agent call */
	db = NULL;
	if (err == ORC_ENOTFOUND) {
		err = api_reply_error(r, err, "sandbox %s not found", r->id);
		goto done;
	}
	if (err == API_ENOTREADY) {
		err = api_reply_not_ready(r, &st, "; it cannot run commands");
		goto done;
	}
	if (err == ORC_EQUOTA) {
		/* refused: the key may be used again, for this body or another */
		if (x.idempotency_key)
			api_idempotency_unbind(r, "exec", x.idempotency_key);
		err = api_reply_exec_limit(r);
		goto done;
	}
	if (err < 0) {
		err = api_reply_error(r, err, "cannot accept the command");
		goto done;
	}
	/* A job claimed at once needs no lane: the next one of the sandbox
	 * sees it running and waits for its orchard_lane. */
	if (!claimed && (err = api_lane_enqueue(&lane, r->id, job_id, seq, r->request_id, x.wait,
						x.serial)) < 0) {
		api_job_abandon(job_id, "the server is overloaded; the job was not started");
		err = api_reply_error(r, err, "too many jobs queued; retry later");
		goto done;
	}
	if (!x.wait && claimed) {
		/* claimed under exec limits: a worker runs it; with no room in
		 * this process's queue, this thread (it is running already) */
		if (api_lane_hand_over(r->id, job_id, seq, r->request_id, claimed) == 0)
			claimed = NULL;
		else
			api_job_run_claimed(NULL, claimed, job_id, r->request_id[0] ? r->request_id : NULL,
					    NULL);
	}
	if (!x.wait) {
		err = reply_queued(r, job_id, "queued");
		goto done;
	}
	if (x.stream) {
		err = run_streaming(r, lane, claimed, &x, job_id);
		goto done;
	}
	run_sync(&res, lane, claimed, r, &x, job_id, NULL);
	if (!res && (err = api_job_fetch(&res, r->tenant_id, job_id)) < 0) {
		err = api_reply_error(r, err, "cannot read job %s", job_id);
		goto done;
	}
	err = reply_job_row(r, res);
	goto done;
replayed:
	if (!r->replied)
		err = api_reply_error(r, err, "cannot look up the Idempotency-Key");
done:
	PQclear(claimed);
	orc_pg_pool_release(&api_server.db, db);
	return err;
}
