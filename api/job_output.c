/*
 * A job's output while it runs, and GET /jobs/{id}/stream: attach to it
 * from a byte offset of each stream (sql/migrations/027_api_ux.sql).
 *
 * The runner appends the kept output at its offsets (api_job_output_append)
 * at most every API_JOB_OUTPUT_FLUSH_MS of the job (job_stream.c): a job
 * that ends sooner writes no piece here, and its readers get its output
 * from the job row when it ends. A reader asks for everything past its
 * offsets in one statement, so it sees either the running job's pieces or the
 * finished job's stored output, never half of each; it sends what is new,
 * waits for the next notification, and ends with the finished job. Nothing
 * is held per reader but its offsets: any number of readers, on any
 * replica, and a reader that lost its connection reconnects with the
 * offsets it had and misses nothing.
 */
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "base64.h"
#include "err.h"
#include "json.h"
#include "log.h"
#include "strutil.h"

#define OFFSET_MAX (INT64_C(1) << 53)
/* A line at least this often, so a reader sees the connection is alive
 * and a reader that has gone is noticed. */
#define HEARTBEAT_MS (15 * 1000)

void api_job_output_append(const char *job_id, size_t out_off, const char *out, size_t out_n,
			   size_t err_off, const char *err, size_t err_n)
{
	char o0[24], o1[24];
	const char *params[5] = { job_id, o0, out_n ? out : "", o1, err_n ? err : "" };
	int lengths[5] = { 0, 0, (int)out_n, 0, (int)err_n }, formats[5] = { 0, 0, 1, 0, 1 };
	PGconn *db = NULL;

	snprintf(o0, sizeof(o0), "%zu", out_off);
	snprintf(o1, sizeof(o1), "%zu", err_off);
	if (orc_pg_pool_acquire(&api_server.db, &db) < 0 ||
	    orc_pg_query_bin(NULL, db,
			     "WITH v (stream, off, data) AS (VALUES ('stdout', $2::bigint, $3::bytea),"
			     " ('stderr', $4::bigint, $5::bytea)),"
			     " i AS (INSERT INTO job_output (job_id, stream, off, data)"
			     " SELECT $1, v.stream, v.off, v.data FROM v WHERE octet_length(v.data) > 0"
			     " ON CONFLICT DO NOTHING RETURNING 1)"
			     " SELECT pg_notify('orchard_job_output', $1) WHERE EXISTS (SELECT 1 FROM i)",
			     5, params, lengths, formats) < 0)
		/* readers get it with the stored result when the job ends */
		orc_log(ORC_LOG_WARN, "cannot store a piece of the job's output", "job_id", job_id, NULL);
	orc_pg_pool_release(&api_server.db, db);
}

/* Rows: the job (kind 'job', done) first, then output past the offsets in
 * the order it was produced, each row cut to start at the offset. */
static const char read_sql[] =
	"WITH j AS (SELECT id, status IN ('succeeded', 'failed') AS done, stdout, stderr"
	" FROM jobs WHERE id = $1 AND tenant_id = $2::bigint),"
	" live AS (SELECT EXISTS (SELECT 1 FROM job_output WHERE job_id = $1) AS has),"
	" c AS (SELECT o.stream, o.off, o.data, o.seq,"
	" CASE o.stream WHEN 'stdout' THEN $3::bigint ELSE $4::bigint END AS want"
	" FROM job_output o JOIN j ON o.job_id = j.id)"
	" SELECT 'job', NULL, NULL, NULL, j.done, -1 AS ord FROM j"
	" UNION ALL SELECT 'out', c.stream, GREATEST(c.off, c.want),"
	" substring(c.data FROM (GREATEST(c.want - c.off, 0) + 1)::int), NULL, c.seq"
	" FROM c WHERE c.off + octet_length(c.data) > c.want"
	" UNION ALL SELECT 'out', 'stdout', $3::bigint, substring(j.stdout FROM ($3::bigint + 1)::int),"
	" NULL, 9223372036854775806 FROM j, live"
	" WHERE j.done AND NOT live.has AND octet_length(j.stdout) > $3::bigint"
	" UNION ALL SELECT 'out', 'stderr', $4::bigint, substring(j.stderr FROM ($4::bigint + 1)::int),"
	" NULL, 9223372036854775807 FROM j, live"
	" WHERE j.done AND NOT live.has AND octet_length(j.stderr) > $4::bigint"
	" ORDER BY ord";

struct attach {
	struct api_req *r;
	int64_t off[2];               /* stdout, stderr */
	int64_t last_line_ms;
	int gone;                     /* the reader has gone */
};

static void attach_line(struct attach *a, json_object *o)
{
	size_t len = 0;
	const char *s = orc_json_str(o, &len);

	if (!a->gone && api_reply_ndjson_line(a->r, s, len, 1) < 0)
		a->gone = 1;
	json_object_put(o);
	a->last_line_ms = orc_mono_ms();
}

static json_object *line_new(const char *type, const char *key, const char *value)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "type", json_object_new_string(type));
	if (key)
		json_object_object_add(o, key, json_object_new_string(value));
	return o;
}

static int send_output(struct attach *a, PGresult *res, int row)
{
	struct orc_buf b64 = ORC_BUF_INIT;
	const char *stream = PQgetvalue(res, row, 1);
	unsigned char *data;
	size_t n = 0;
	int64_t off = 0;
	int i = stream[3] == 'e';   /* stderr */
	json_object *o;

	orc_parse_i64(&off, PQgetvalue(res, row, 2), 0, INT64_MAX);
	if (!(data = PQunescapeBytea((const unsigned char *)PQgetvalue(res, row, 3), &n)))
		return ORC_ERROR;
	orc_base64_encode(&b64, data, n);
	PQfreemem(data);
	o = json_object_new_object();
	json_object_object_add(o, "type", json_object_new_string(stream));
	json_object_object_add(o, "offset", json_object_new_int64(off));
	json_object_object_add(o, "data", json_object_new_string_len(b64.ptr ? b64.ptr : "", (int)b64.len));
	orc_buf_release(&b64);
	attach_line(a, o);
	a->off[i] = off + (int64_t)n;
	return 0;
}

static void send_exit(struct attach *a)
{
	PGresult *res = NULL;
	json_object *o;

	if (api_job_fetch(&res, a->r->tenant_id, a->r->id) == 0) {
		o = line_new("exit", NULL, NULL);
		json_object_object_add(o, "job", api_job_view(res, 0));
	} else {
		o = line_new("error", "error", "cannot read the job's result");
	}
	PQclear(res);
	attach_line(a, o);
}

/* One round: send what is past the offsets; 1 when the job has ended. */
static int attach_round(struct attach *a)
{
	char tenant[24], o0[24], o1[24];
	const char *params[4] = { a->r->id, tenant, o0, o1 };
	PGresult *res = NULL;
	PGconn *db = NULL;
	int err, row, done;

	snprintf(tenant, sizeof(tenant), "%lld", (long long)a->r->tenant_id);
	snprintf(o0, sizeof(o0), "%lld", (long long)a->off[0]);
	snprintf(o1, sizeof(o1), "%lld", (long long)a->off[1]);
	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		return err;
	err = orc_pg_query(&res, db, read_sql, 4, params);
	orc_pg_pool_release(&api_server.db, db);
	if (err < 0)
		return err;
	if (PQntuples(res) == 0 || strcmp(PQgetvalue(res, 0, 0), "job")) {
		PQclear(res);
		return ORC_ENOTFOUND;
	}
	done = PQgetvalue(res, 0, 4)[0] == 't';
	for (row = 1, err = 0; row < PQntuples(res) && err == 0 && !a->gone; row++)
		err = send_output(a, res, row);
	PQclear(res);
	if (err < 0)
		return err;
	return done;
}

static int parse_offset(int64_t *out, struct api_req *r, const char *name)
{
	const char *v = api_req_query(r, name);

	*out = 0;
	if (v && orc_parse_i64(out, v, 0, OFFSET_MAX) < 0)
		return api_reply_error(r, ORC_EINVALID, "query parameter '%s' must be a byte offset"
				       " (an integer from 0 to %lld)", name, (long long)OFFSET_MAX);
	return 0;
}

int api_job_stream_get(struct api_req *r)
{
	struct attach a;
	struct api_waiter w;
	PGresult *res = NULL;
	int err;

	memset(&a, 0, sizeof(a));
	a.r = r;
	if ((err = parse_offset(&a.off[0], r, "stdout_offset")) < 0 ||
	    (err = parse_offset(&a.off[1], r, "stderr_offset")) < 0)
		return err;
	if ((err = api_job_fetch(&res, r->tenant_id, r->id)) == ORC_ENOTFOUND)
		return api_reply_error(r, err, "job %s not found", r->id);
	if (err < 0)
		return api_reply_error(r, err, "cannot read job %s", r->id);
	PQclear(res);
	api_waiter_init(&w, API_CHAN_JOB_OUTPUT, r->id);
	api_reply_ndjson_begin(r);
	attach_line(&a, line_new("job", "job_id", r->id));
	while (!a.gone) {
		if ((err = attach_round(&a)) == 1) {
			send_exit(&a);
			break;
		}
		/* a database restart: try again; anything else ends the answer,
		 * and the reader reconnects with the offsets it has */
		if (err < 0 && err != ORC_EUNAVAIL) {
			attach_line(&a, line_new("error", "error", err == ORC_ENOTFOUND ? "the job was deleted" :
						 "cannot read the job's output; reconnect with the offsets you have"));
			break;
		}
		if (api_key_revoked(r->key_id)) {
			attach_line(&a, line_new("error", "error", "the API key was revoked"));
			break;
		}
		if (orc_mono_ms() - a.last_line_ms >= HEARTBEAT_MS)
			attach_line(&a, line_new("heartbeat", NULL, NULL));
		api_waiter_wait(&w, a.last_line_ms + HEARTBEAT_MS);
	}
	return 0;
}
