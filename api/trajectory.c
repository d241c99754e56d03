/*
 * Trajectory export (docs/trajectory.md): a sandbox's spec, every action
 * recorded in `events` (exec steps joined with their `jobs` row), and its
 * end state, streamed as JSON lines.
 *
 *   GET /sandboxes/{id}/trajectory[?include=content]
 *   GET /trajectories?label=k=v[&label=...][&limit=N][&include=content]
 *   GET /trajectories?root=ID[&limit=N][&include=content]  a fork tree
 *
 * Both work for deleted sandboxes (their rows and events are kept). The
 * events are read in keyset batches up to the last event id seen when the
 * export began, so an export is a consistent prefix of a live sandbox and
 * never loads more than one batch (plus one job's output) into memory. A
 * pool connection is held for one query at a time, never while writing to
 * a slow client. Once the 200 is sent an error can only be reported in the
 * stream: a {"type":"error"} line and no "end" line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "err.h"
#include "json.h"
#include "log.h"
#include "pg_json.h"
#include "strutil.h"
#include "validate.h"
#include "xalloc.h"

#define TRAJ_FORMAT "orchard.trajectory"
#define TRAJ_VERSION 1     /* docs/trajectory.md: bump on an incompatible change */
#define TRAJ_BATCH 256
#define STR_(x) #x
#define STR(x) STR_(x)
#define BULK_DEFAULT 100
#define BULK_MAX 1000

#define ISO(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
#define EPOCH(col) "extract(epoch FROM " col ")::float8"

/* One export in progress: where it writes and what it has written. */
struct traj_stream {
	struct api_req *r;
	const char *sandbox_id;
	char tenant[24];
	int include_content;
	int64_t steps;
	int broken;                   /* the client went away */
};

/* ---- the response stream ---------------------------------------------- */

/* Write o as one line and release it. */
static int stream_line(struct traj_stream *t, json_object *o)
{
	size_t len = 0;
	const char *s = orc_json_str(o, &len);

	if (!t->broken && api_reply_ndjson_line(t->r, s, len, 0) < 0)
		t->broken = 1;
	json_object_put(o);
	return t->broken ? ORC_EUNAVAIL : 0;
}

static void stream_flush(struct traj_stream *t)
{
	if (!t->broken && FCGX_FFlush(t->r->fcgi->out) < 0)
		t->broken = 1;
}

/* The in-band error of a stream that already started. */
static void stream_error(struct traj_stream *t, int err, const char *what)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "type", json_object_new_string("error"));
	json_object_object_add(o, "sandbox_id", json_object_new_string(t->sandbox_id));
	json_object_object_add(o, "code", json_object_new_string(orc_err_name(err)));
	json_object_object_add(o, "detail", json_object_new_string(what));
	json_object_object_add(o, "request_id", json_object_new_string(t->r->request_id));
	stream_line(t, o);
	orc_log(ORC_LOG_WARN, "trajectory export failed", "sandbox_id", t->sandbox_id,
		"detail", what, NULL);
}

/* ---- lines ------------------------------------------------------------ */

static json_object *line_new(struct traj_stream *t, const char *type)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "type", json_object_new_string(type));
	json_object_object_add(o, "sandbox_id", json_object_new_string(t->sandbox_id));
	return o;
}

/* ---- one query at a time on a pool connection -------------------------- */

static int query(PGresult **out, const char *sql, int n, const char *const *params)
{
	PGconn *db = NULL;
	int err;

	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		return err;
	err = orc_pg_query(out, db, sql, n, params);
	orc_pg_pool_release(&api_server.db, db);
	return err;
}

/* ---- header and end ---------------------------------------------------- */

enum {
	H_ID, H_IMAGE, H_CPU, H_MEMORY, H_BLOCK_NET, H_ENV, H_WORKDIR, H_LABELS, H_TIMEOUT,
	H_TTL, H_IDLE, H_DRIVER, H_STATE, H_MESSAGE, H_CREATED, H_READY, H_DELETED,
	H_NAMESPACE, H_LAST_EVENT, H_NOW, H_FORKED_FROM, H_FORK_SOURCE, H_FORK_STEP,
};

static const char header_sql[] =
	"SELECT s.id, s.image, s.cpu, s.memory, s.block_network, s.env, s.workdir, s.labels,"
	" s.timeout_seconds, s.ttl_seconds, s.idle_timeout_seconds, s.driver, s.state,"
	" s.state_message, " ISO("s.created_at") ", " ISO("s.ready_at") ", " ISO("s.deleted_at") ","
	" t.name, (SELECT coalesce(max(e.id), 0) FROM events e WHERE e.sandbox_id = s.id"
	" AND e.tenant_id = s.tenant_id), " ISO("now()") ","
	/* lineage (docs/checkpoints.md): the checkpoint and its sandbox */
	" s.forked_from, (SELECT c.sandbox_id FROM checkpoints c WHERE c.id = s.forked_from),"
	" (SELECT c.traj_step FROM checkpoints c WHERE c.id = s.forked_from)"
	" FROM sandboxes s JOIN tenants t ON t.id = s.tenant_id"
	" WHERE s.id = $1 AND s.tenant_id = $2";

static json_object *header_line(struct traj_stream *t, PGresult *h)
{
	json_object *o = line_new(t, "header"), *sb = json_object_new_object();

	json_object_object_add(o, "format", json_object_new_string(TRAJ_FORMAT));
	json_object_object_add(o, "version", json_object_new_int(TRAJ_VERSION));
	json_object_object_add(o, "exported_at", api_col_str(h, 0, H_NOW));
	json_object_object_add(o, "content", json_object_new_boolean(t->include_content));
	json_object_object_add(sb, "sandbox_id", api_col_str(h, 0, H_ID));
	json_object_object_add(sb, "namespace", api_col_str(h, 0, H_NAMESPACE));
	json_object_object_add(sb, "image", api_col_str(h, 0, H_IMAGE));
	json_object_object_add(sb, "cpu", api_col_str(h, 0, H_CPU));
	json_object_object_add(sb, "memory", api_col_str(h, 0, H_MEMORY));
	json_object_object_add(sb, "block_network", api_col_bool(h, 0, H_BLOCK_NET));
	json_object_object_add(sb, "env", api_col_json_object(h, 0, H_ENV));
	json_object_object_add(sb, "workdir", api_col_str(h, 0, H_WORKDIR));
	json_object_object_add(sb, "labels", api_col_json_object(h, 0, H_LABELS));
	json_object_object_add(sb, "timeout", api_col_int(h, 0, H_TIMEOUT));
	json_object_object_add(sb, "ttl_seconds", api_col_int(h, 0, H_TTL));
	json_object_object_add(sb, "idle_timeout_seconds", api_col_int(h, 0, H_IDLE));
	json_object_object_add(sb, "driver", api_col_str(h, 0, H_DRIVER));
	json_object_object_add(sb, "created_at", api_col_str(h, 0, H_CREATED));
	json_object_object_add(sb, "ready_at", api_col_str(h, 0, H_READY));
	json_object_object_add(o, "sandbox", sb);
	if (!PQgetisnull(h, 0, H_FORKED_FROM)) {
		json_object *f = json_object_new_object();
		json_object_object_add(f, "checkpoint_id", api_col_str(h, 0, H_FORKED_FROM));
		json_object_object_add(f, "sandbox_id", api_col_str(h, 0, H_FORK_SOURCE));
		json_object_object_add(f, "step", api_col_int(h, 0, H_FORK_STEP));
		json_object_object_add(o, "forked_from", f);
	}
	return o;
}

static json_object *end_line(struct traj_stream *t, PGresult *h)
{
	json_object *o = line_new(t, "end");

	json_object_object_add(o, "state", api_col_str(h, 0, H_STATE));
	json_object_object_add(o, "status_message", api_col_str(h, 0, H_MESSAGE));
	json_object_object_add(o, "deleted_at", api_col_str(h, 0, H_DELETED));
	json_object_object_add(o, "steps", json_object_new_int64(t->steps));
	return o;
}

/* ---- actions ----------------------------------------------------------- */

enum {
	E_ID, E_KIND, E_DATA, E_HAS_CONTENT, E_JOB_ID, E_AT, E_JOB_FOUND, E_COMMAND, E_CWD,
	E_ENV, E_LOGIN, E_TIMEOUT, E_STATUS, E_EXIT, E_SIGNAL, E_TIMED_OUT, E_ERROR,
	E_CREATED, E_STARTED, E_COMPLETED, E_DURATION, E_OUT_BYTES, E_ERR_BYTES, E_OUT_TRUNC,
	E_ERR_TRUNC, E_FAILURE, E_CKPT_ID, E_CKPT_STATE,
};

/* exec.finish is folded into the exec line of its exec.accept (the job
 * row has the outcome); sandbox.create is the header. */
static const char batch_sql[] =
	"SELECT e.id, e.kind, e.data - 'content', e.data ? 'content', e.job_id, " EPOCH("e.created_at") ","
	" j.id IS NOT NULL, j.command, j.cwd, j.env, j.login_shell, j.timeout_seconds, j.status,"
	" j.exit_code, j.signal, j.timed_out, j.error, " EPOCH("j.created_at") ", "
	EPOCH("j.started_at") ", " EPOCH("j.completed_at") ", "
	EPOCH("j.completed_at - j.started_at") ", j.stdout_bytes, j.stderr_bytes,"
	" j.stdout_truncated, j.stderr_truncated, j.failure, ck.id, ck.state"
	" FROM events e LEFT JOIN jobs j ON j.id = e.job_id AND j.tenant_id = e.tenant_id"
	/* the step's own checkpoint (every_step; docs/checkpoints.md) */
	" LEFT JOIN LATERAL (SELECT c.id, c.state FROM checkpoints c WHERE c.step_event_id = e.id"
	"  AND c.sandbox_id = e.sandbox_id ORDER BY c.created_at DESC LIMIT 1) ck ON true"
	" WHERE e.sandbox_id = $1 AND e.tenant_id = $2 AND e.id > $3::bigint AND e.id <= $4::bigint"
	" AND e.kind NOT IN ('exec.finish', 'sandbox.create')"
	" ORDER BY e.id LIMIT " STR(TRAJ_BATCH);

/* The kinds replay re-applies; their data becomes the line's fields. */
static const char *const action_kinds[] = {
	"file.write", "git.apply", "git.reset", "archive.upload",
};

static int is_action_kind(const char *kind)
{
	size_t i;

	for (i = 0; i < sizeof(action_kinds) / sizeof(*action_kinds); i++)
		if (!strcmp(kind, action_kinds[i]))
			return 1;
	return 0;
}

/* The job's stdin, stdout and stderr: fetched one job at a time. */
static int exec_outputs(json_object *o, const char *job_id)
{
	const char *params[1] = { job_id };
	PGresult *res = NULL;
	json_object *in;
	int err;

	if ((err = query(&res, "SELECT stdin, stdout, stderr FROM jobs WHERE id = $1", 1, params)) < 0)
		return err;
	if (PQntuples(res) == 1) {
		if ((in = api_col_bytea(res, 0, 0)))
			json_object_object_add(o, "stdin", in);
		json_object_object_add(o, "stdout", api_col_bytea(res, 0, 1));
		json_object_object_add(o, "stderr", api_col_bytea(res, 0, 2));
	}
	PQclear(res);
	return 0;
}

/* A step's checkpoint: its id, and whether it is gone (expired or deleted)
 * or failed. */
static void step_checkpoint(json_object *o, PGresult *b, int i)
{
	const char *state = PQgetvalue(b, i, E_CKPT_STATE);

	if (PQgetisnull(b, i, E_CKPT_ID))
		return;
	json_object_object_add(o, "checkpoint_id", api_col_str(b, i, E_CKPT_ID));
	if (!strcmp(state, "deleting") || !strcmp(state, "deleted"))
		json_object_object_add(o, "checkpoint_expired", json_object_new_boolean(1));
	else if (!strcmp(state, "failed"))
		json_object_object_add(o, "checkpoint_failed", json_object_new_boolean(1));
}

static int exec_line(json_object **out, struct traj_stream *t, PGresult *b, int i)
{
	json_object *o = line_new(t, "exec");
	int err;

	json_object_object_add(o, "step", json_object_new_int64(++t->steps));
	json_object_object_add(o, "job_id", api_col_str(b, i, E_JOB_ID));
	json_object_object_add(o, "at", api_col_float(b, i, E_AT));
	json_object_object_add(o, "command", api_col_json(b, i, E_COMMAND));
	json_object_object_add(o, "cwd", api_col_str(b, i, E_CWD));
	json_object_object_add(o, "env", api_col_json_object(b, i, E_ENV));
	json_object_object_add(o, "login_shell", api_col_bool(b, i, E_LOGIN));
	json_object_object_add(o, "timeout_seconds", api_col_int(b, i, E_TIMEOUT));
	if ((err = exec_outputs(o, PQgetvalue(b, i, E_JOB_ID))) < 0) {
		json_object_put(o);
		return err;
	}
	json_object_object_add(o, "status", api_col_str(b, i, E_STATUS));
	json_object_object_add(o, "exit_code", api_col_int(b, i, E_EXIT));
	json_object_object_add(o, "timed_out", api_col_bool(b, i, E_TIMED_OUT));
	json_object_object_add(o, "signal", api_col_int(b, i, E_SIGNAL));
	json_object_object_add(o, "error", api_col_str(b, i, E_ERROR));
	json_object_object_add(o, "failure", api_col_str(b, i, E_FAILURE));
	json_object_object_add(o, "stdout_bytes", api_col_int(b, i, E_OUT_BYTES));
	json_object_object_add(o, "stderr_bytes", api_col_int(b, i, E_ERR_BYTES));
	json_object_object_add(o, "stdout_truncated", api_col_bool(b, i, E_OUT_TRUNC));
	json_object_object_add(o, "stderr_truncated", api_col_bool(b, i, E_ERR_TRUNC));
	json_object_object_add(o, "created_at", api_col_float(b, i, E_CREATED));
	json_object_object_add(o, "started_at", api_col_float(b, i, E_STARTED));
	json_object_object_add(o, "completed_at", api_col_float(b, i, E_COMPLETED));
	json_object_object_add(o, "duration_seconds", api_col_float(b, i, E_DURATION));
	step_checkpoint(o, b, i);
	*out = o;
	return 0;
}

/* A recorded file's content (base64), fetched one event at a time. */
static int event_content(json_object *o, const char *event_id)
{
	const char *params[1] = { event_id };
	PGresult *res = NULL;
	int err;

	if ((err = query(&res, "SELECT data->>'content' FROM events WHERE id = $1::bigint", 1, params)) < 0)
		return err;
	if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
		json_object_object_add(o, "content", api_col_str(res, 0, 0));
	PQclear(res);
	return 0;
}

/* file.write, git.apply, git.reset, archive.upload: the event's data plus
 * our fields; the uploads say whether their bytes were kept. */
static int action_line(json_object **out, struct traj_stream *t, PGresult *b, int i)
{
	json_object *data = api_col_json_object(b, i, E_DATA), *o = line_new(t, PQgetvalue(b, i, E_KIND));
	int recorded = PQgetvalue(b, i, E_HAS_CONTENT)[0] == 't', err;

	json_object_object_add(o, "step", json_object_new_int64(++t->steps));
	json_object_object_add(o, "at", api_col_float(b, i, E_AT));
	if (!PQgetisnull(b, i, E_JOB_ID))
		json_object_object_add(o, "job_id", api_col_str(b, i, E_JOB_ID));
	json_object_object_foreach(data, k, v) {
		if (!json_object_object_get_ex(o, k, NULL))
			json_object_object_add(o, k, json_object_get(v));
	}
	json_object_put(data);
	step_checkpoint(o, b, i);
	if (!strcmp(PQgetvalue(b, i, E_KIND), "file.write") ||
	    !strcmp(PQgetvalue(b, i, E_KIND), "archive.upload")) {
		json_object_object_add(o, "content_recorded", json_object_new_boolean(recorded));
		if (recorded && t->include_content &&
		    (err = event_content(o, PQgetvalue(b, i, E_ID))) < 0) {
			json_object_put(o);
			return err;
		}
	}
	*out = o;
	return 0;
}

static json_object *event_line(struct traj_stream *t, PGresult *b, int i)
{
	const char *kind = PQgetvalue(b, i, E_KIND);
	json_object *o;

	if (!strcmp(kind, "sandbox.delete")) {
		o = line_new(t, "delete");
		json_object_object_add(o, "at", api_col_float(b, i, E_AT));
		return o;
	}
	if (!strcmp(kind, "evaluate")) {
		/* POST /sandboxes/{id}/evaluate: the data (fork, checkpoint, job) as fields */
		json_object *data = api_col_json_object(b, i, E_DATA);
		o = line_new(t, "evaluate");
		json_object_object_add(o, "at", api_col_float(b, i, E_AT));
		json_object_object_foreach(data, k, v) {
			if (!json_object_object_get_ex(o, k, NULL))
				json_object_object_add(o, k, json_object_get(v));
		}
		json_object_put(data);
		return o;
	}
	o = line_new(t, "event");
	json_object_object_add(o, "kind", api_col_str(b, i, E_KIND));
	json_object_object_add(o, "at", api_col_float(b, i, E_AT));
	if (!PQgetisnull(b, i, E_JOB_ID))
		json_object_object_add(o, "job_id", api_col_str(b, i, E_JOB_ID));
	json_object_object_add(o, "data", api_col_json_object(b, i, E_DATA));
	step_checkpoint(o, b, i);   /* a PTY session's end (pty.close) */
	return o;
}

static int row_line(json_object **out, struct traj_stream *t, PGresult *b, int i)
{
	const char *kind = PQgetvalue(b, i, E_KIND);

	if (!strcmp(kind, "exec.accept") && PQgetvalue(b, i, E_JOB_FOUND)[0] == 't')
		return exec_line(out, t, b, i);
	if (is_action_kind(kind))
		return action_line(out, t, b, i);
	*out = event_line(t, b, i);
	return 0;
}

/* ---- one trajectory ---------------------------------------------------- */

/*
 * Write one sandbox's trajectory. Before anything was written (started
 * 0) a failure is returned for the caller to answer with a status; after,
 * it is reported in the stream.
 */
static int traj_write(struct traj_stream *t, int *started)
{
	const char *params[4] = { t->sandbox_id, t->tenant, NULL, NULL };
	char after[24] = "0", last[24];
	PGresult *h = NULL, *b = NULL;
	json_object *line = NULL;
	int err, i, n;

	t->steps = 0;
	if ((err = query(&h, header_sql, 2, params)) < 0) {
		if (*started)
			stream_error(t, err, "cannot read the sandbox");
		return err;
	}
	if (PQntuples(h) != 1) {
		err = ORC_ENOTFOUND;
		goto done;
	}
	if (!*started) {
		api_reply_ndjson_begin(t->r);
		*started = 1;
	}
	snprintf(last, sizeof(last), "%s", PQgetvalue(h, 0, H_LAST_EVENT));
	if ((err = stream_line(t, header_line(t, h))) < 0)
		goto done;
	params[2] = after;
	params[3] = last;
	do {
		if ((err = query(&b, batch_sql, 4, params)) < 0) {
			stream_error(t, err, "cannot read the sandbox's events");
			goto done;
		}
		n = PQntuples(b);
		for (i = 0; i < n; i++) {
			if ((err = row_line(&line, t, b, i)) < 0) {
				stream_error(t, err, "cannot read a recorded step");
				goto done;
			}
			if ((err = stream_line(t, line)) < 0)
				goto done;
		}
		if (n)
			snprintf(after, sizeof(after), "%s", PQgetvalue(b, n - 1, E_ID));
		PQclear(b);
		b = NULL;
		stream_flush(t);
	} while (n == TRAJ_BATCH && !t->broken);
	err = stream_line(t, end_line(t, h));
	stream_flush(t);
done:
	PQclear(b);
	PQclear(h);
	return err;
}

/* ?include=content (a comma-separated list; "content" is the only item). */
static int parse_include(struct api_req *r, int *out)
{
	const char *v = api_req_query(r, "include"), *p;
	size_t n;

	*out = 0;
	for (p = v; p && *p; p += n + (p[n] == ',')) {
		n = strcspn(p, ",");
		if (n == 7 && !strncmp(p, "content", 7))
			*out = 1;
		else if (n)
			return api_reply_error(r, ORC_EINVALID, "query parameter 'include' must be "
					       "\"content\", not \"%.*s\"", (int)(n > 64 ? 64 : n), p);
	}
	return 0;
}

static void stream_init(struct traj_stream *t, struct api_req *r)
{
	memset(t, 0, sizeof(*t));
	t->r = r;
	snprintf(t->tenant, sizeof(t->tenant), "%lld", (long long)r->tenant_id);
}

int api_trajectory_get(struct api_req *r)
{
	struct traj_stream t;
	int err, started = 0;

	stream_init(&t, r);
	if ((err = parse_include(r, &t.include_content)) < 0)
		return err;
	t.sandbox_id = r->id;
	err = traj_write(&t, &started);
	if (!started) {
		if (err == ORC_ENOTFOUND)
			return api_reply_error(r, err, "sandbox %s not found", r->id);
		return api_reply_error(r, err, "cannot export the trajectory of %s", r->id);
	}
	return err;
}

/* ---- bulk -------------------------------------------------------------- */

static int parse_labels(json_object **out, struct api_req *r)
{
	json_object *labels = NULL;
	char *key;
	const char *eq;
	int i;

	for (i = 0; i < r->nquery; i++) {
		if (strcmp(r->query[i].key, "label"))
			continue;
		if (!(eq = strchr(r->query[i].value, '=')))
			return api_reply_error(r, ORC_EINVALID, "query parameter 'label' must be key=value");
		if (!labels)
			labels = api_own_json(r, json_object_new_object());
		key = xstrndup(r->query[i].value, (size_t)(eq - r->query[i].value));
		json_object_object_add(labels, key, json_object_new_string(eq + 1));
		free(key);
	}
	if (labels && api_check_labels(labels, r) < 0)
		return api_reply_failed(r, ORC_EINVALID);
	*out = labels;
	return 0;
}

/*
 * ?root=ID: the root and every sandbox forked from it, recursively (a fork
 * names its checkpoint, the checkpoint its sandbox), parents before their
 * forks, then oldest first. The labels, when given, filter the forks.
 */
static const char tree_sql[] =
	"WITH RECURSIVE tree (id, depth, created_at) AS ("
	" SELECT s.id, 0, s.created_at FROM sandboxes s WHERE s.id = $4 AND s.tenant_id = $1"
	" UNION ALL"
	" SELECT f.id, tree.depth + 1, f.created_at FROM tree"
	" JOIN checkpoints c ON c.sandbox_id = tree.id AND c.tenant_id = $1"
	" JOIN sandboxes f ON f.forked_from = c.id AND f.tenant_id = $1"
	" WHERE tree.depth < 1000)"
	" SELECT t.id FROM tree t JOIN sandboxes s ON s.id = t.id"
	" WHERE t.depth = 0 OR $2::jsonb IS NULL OR s.labels @> $2::jsonb"
	" ORDER BY t.depth, t.created_at, t.id LIMIT $3::int";

int api_trajectory_bulk(struct api_req *r)
{
	char tenant[24], limit_s[24];
	const char *params[4] = { tenant, NULL, limit_s, NULL }, *v;
	json_object *labels = NULL;
	struct traj_stream t;
	PGresult *ids = NULL;
	int64_t limit = BULK_DEFAULT;
	int err, i, n, started = 0;

	stream_init(&t, r);
	if ((err = parse_include(r, &t.include_content)) < 0 || (err = parse_labels(&labels, r)) < 0)
		return err;
	if ((v = api_req_query(r, "limit")) && orc_parse_i64(&limit, v, 1, BULK_MAX) < 0)
		return api_reply_error(r, ORC_EINVALID, "query parameter 'limit' must be an integer "
				       "from 1 to %d", BULK_MAX);
	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	snprintf(limit_s, sizeof(limit_s), "%lld", (long long)limit);
	params[1] = labels ? orc_json_str(labels, NULL) : NULL;
	params[3] = api_req_query(r, "root");
	if (params[3] && !api_valid_id(params[3]))
		return api_reply_error(r, ORC_EINVALID, "query parameter 'root' is not a sandbox id");
	/* Deleted sandboxes included: datasets are made of finished ones. */
	if ((err = query(&ids, params[3] ? tree_sql : "SELECT id FROM sandboxes WHERE tenant_id = $1"
			 " AND ($2::jsonb IS NULL OR labels @> $2::jsonb) AND $4::text IS NULL"
			 " ORDER BY created_at, id LIMIT $3::int", 4, params)) < 0)
		return api_reply_error(r, err, "cannot list the sandboxes to export");
	api_own_pg(r, ids);
	if (params[3] && PQntuples(ids) == 0)
		return api_reply_error(r, ORC_ENOTFOUND, "sandbox %s not found", params[3]);
	api_reply_ndjson_begin(r);
	started = 1;
	n = PQntuples(ids);
	for (i = 0; i < n && !t.broken; i++) {
		t.sandbox_id = PQgetvalue(ids, i, 0);
		err = traj_write(&t, &started);
		if (err == ORC_ENOTFOUND) {
			err = 0;   /* gone since the listing (rows are not deleted today) */
			continue;
		}
		if (err < 0)
			break;
	}
	stream_flush(&t);
	return err < 0 ? err : 0;
}
