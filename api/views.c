/*
 * Rows to JSON: the one place that knows the wire shape of a sandbox and of
 * a job. Queries select api_sandbox_cols / api_job_cols (in this order) and
 * hand the result here.
 *
 * Times: the fields Orchard has keep Orchard's type, Unix epoch seconds as
 * floats: a sandbox's created_at (with created_at_iso, the same instant as
 * an ISO-8601 UTC string ending in "Z", beside it) and a job's times. Our
 * own ready_at and last_heartbeat_at are ISO-8601 strings.
 */
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "json.h"
#include "pg_json.h"

#define ISO(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
#define EPOCH(col) "extract(epoch FROM " col ")::float8"

/* Sandbox queries alias sandboxes as s and tenants as t. */
const char api_sandbox_cols[] =
	"s.id, t.name, s.image, s.driver_handle, s.block_network, s.cpu, s.memory, "
	EPOCH("s.created_at") ", s.state, s.state_message, s.timeout_seconds, s.labels, "
	"s.env, s.workdir, s.ttl_seconds, s.idle_timeout_seconds, " ISO("s.ready_at") ", "
	ISO("s.last_heartbeat_at") ", s.driver, " ISO("s.created_at") ", s.forked_from, s.paused, "
	"s.pause_desired, s.failure, s.state = 'pending' AND s.admitted_at IS NULL, s.queue_position, "
	"s.queue_reason, s.disk";

enum {
	S_ID, S_NAMESPACE, S_IMAGE, S_POD, S_BLOCK_NET, S_CPU, S_MEMORY, S_CREATED, S_STATE,
	S_MESSAGE, S_TIMEOUT, S_LABELS, S_ENV, S_WORKDIR, S_TTL, S_IDLE, S_READY_AT,
	S_HEARTBEAT, S_DRIVER, S_CREATED_ISO, S_FORKED_FROM, S_PAUSED, S_PAUSE_DESIRED, S_FAILURE,
	S_QUEUED, S_QUEUE_POSITION, S_QUEUE_REASON, S_DISK,
};

_Static_assert((int)S_ID == (int)API_SANDBOX_COL_ID, "api.h knows where the id is");
_Static_assert((int)S_STATE == (int)API_SANDBOX_COL_STATE, "api.h knows where state is");

/* Job queries alias jobs as j. */
const char api_job_cols[] =
	"j.id, j.sandbox_id, j.command, j.status, j.stdout, j.stderr, j.exit_code, "
	EPOCH("j.created_at") ", " EPOCH("j.started_at") ", " EPOCH("j.completed_at") ", "
	"j.error, j.timed_out, j.signal, j.stdout_bytes, j.stderr_bytes, j.stdout_truncated, "
	"j.stderr_truncated, j.kind, j.cwd, j.timeout_seconds, j.seq, j.serial, j.max_output_bytes, "
	"j.failure";

/* The same columns without the output (lists): NULL where stdout and
 * stderr are. */
const char api_job_summary_cols[] =
	"j.id, j.sandbox_id, j.command, j.status, NULL::bytea, NULL::bytea, j.exit_code, "
	EPOCH("j.created_at") ", " EPOCH("j.started_at") ", " EPOCH("j.completed_at") ", "
	"j.error, j.timed_out, j.signal, j.stdout_bytes, j.stderr_bytes, j.stdout_truncated, "
	"j.stderr_truncated, j.kind, j.cwd, j.timeout_seconds, j.seq, j.serial, j.max_output_bytes, "
	"j.failure";

enum {
	J_ID, J_SANDBOX, J_COMMAND, J_STATUS, J_STDOUT, J_STDERR, J_EXIT, J_CREATED,
	J_STARTED, J_COMPLETED, J_ERROR, J_TIMED_OUT, J_SIGNAL, J_STDOUT_BYTES,
	J_STDERR_BYTES, J_STDOUT_TRUNC, J_STDERR_TRUNC, J_KIND, J_CWD, J_TIMEOUT, J_SEQ, J_SERIAL,
	J_MAX_OUTPUT, J_FAILURE,
};

_Static_assert((int)J_ID == (int)API_JOB_COL_ID, "api.h knows where the id is");
_Static_assert((int)J_SANDBOX == (int)API_JOB_COL_SANDBOX, "api.h knows where the sandbox is");
_Static_assert((int)J_STATUS == (int)API_JOB_COL_STATUS, "api.h knows where status is");

const char *api_sandbox_status(const char *state)
{
	if (!strcmp(state, "pending") || !strcmp(state, "ready") || !strcmp(state, "failed"))
		return state;
	return "deleted"; /* deleting, deleted: only seen on an idempotent replay */
}

json_object *api_sandbox_view(PGresult *res, int row)
{
	json_object *o = json_object_new_object();
	const char *state = PQgetvalue(res, row, S_STATE);
	json_object *labels = api_col_json(res, row, S_LABELS), *env = api_col_json(res, row, S_ENV);

	json_object_object_add(o, "sandbox_id", api_col_str(res, row, S_ID));
	json_object_object_add(o, "namespace", api_col_str(res, row, S_NAMESPACE));
	json_object_object_add(o, "image", api_col_str(res, row, S_IMAGE));
	json_object_object_add(o, "pod_name", PQgetisnull(res, row, S_POD)
			       ? json_object_new_string("") : api_col_str(res, row, S_POD));
	json_object_object_add(o, "block_network", api_col_bool(res, row, S_BLOCK_NET));
	json_object_object_add(o, "cpu", api_col_str(res, row, S_CPU));
	json_object_object_add(o, "memory", api_col_str(res, row, S_MEMORY));
	json_object_object_add(o, "disk", api_col_str(res, row, S_DISK));
	json_object_object_add(o, "timeout", api_col_int(res, row, S_TIMEOUT));
	json_object_object_add(o, "created_at", api_col_float(res, row, S_CREATED));
	json_object_object_add(o, "created_at_iso", api_col_str(res, row, S_CREATED_ISO));
	json_object_object_add(o, "ready", json_object_new_boolean(!strcmp(state, "ready")));
	json_object_object_add(o, "status", json_object_new_string(api_sandbox_status(state)));
	json_object_object_add(o, "status_message", PQgetisnull(res, row, S_MESSAGE)
			       ? json_object_new_string("") : api_col_str(res, row, S_MESSAGE));
	json_object_object_add(o, "labels", labels ? labels : json_object_new_object());
	json_object_object_add(o, "env", env ? env : json_object_new_object());
	json_object_object_add(o, "workdir", api_col_str(res, row, S_WORKDIR));
	json_object_object_add(o, "ttl_seconds", api_col_int(res, row, S_TTL));
	json_object_object_add(o, "idle_timeout_seconds", api_col_int(res, row, S_IDLE));
	json_object_object_add(o, "ready_at", api_col_str(res, row, S_READY_AT));
	json_object_object_add(o, "last_heartbeat_at", api_col_str(res, row, S_HEARTBEAT));
	json_object_object_add(o, "driver", api_col_str(res, row, S_DRIVER));
	json_object_object_add(o, "forked_from", api_col_str(res, row, S_FORKED_FROM));
	json_object_object_add(o, "paused", api_col_bool(res, row, S_PAUSED));
	/* sql/migrations/023_failure_class.sql: set only on a failed sandbox */
	json_object_object_add(o, "failure", api_col_str(res, row, S_FAILURE));
	/* Admission (docs/controller.md): queued until the controller admits
	 * it; the position is null until the controller has seen the row. */
	json_object_object_add(o, "queued", api_col_bool(res, row, S_QUEUED));
	json_object_object_add(o, "queue_position", api_col_int(res, row, S_QUEUE_POSITION));
	json_object_object_add(o, "queue_reason", api_col_str(res, row, S_QUEUE_REASON));
	return o;
}

/* A job's stdout or stderr (bytea): "" rather than null. */
static json_object *text_bytes(PGresult *res, int row, int col)
{
	json_object *o = api_col_bytea(res, row, col);

	return o ? o : json_object_new_string("");
}

json_object *api_job_view(PGresult *res, int row)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "job_id", api_col_str(res, row, J_ID));
	json_object_object_add(o, "sandbox_id", api_col_str(res, row, J_SANDBOX));
	json_object_object_add(o, "command", api_col_json(res, row, J_COMMAND));
	json_object_object_add(o, "status", api_col_str(res, row, J_STATUS));
	json_object_object_add(o, "stdout", text_bytes(res, row, J_STDOUT));
	json_object_object_add(o, "stderr", text_bytes(res, row, J_STDERR));
	json_object_object_add(o, "exit_code", api_col_int(res, row, J_EXIT));
	json_object_object_add(o, "created_at", api_col_float(res, row, J_CREATED));
	json_object_object_add(o, "started_at", api_col_float(res, row, J_STARTED));
	json_object_object_add(o, "completed_at", api_col_float(res, row, J_COMPLETED));
	json_object_object_add(o, "error", api_col_str(res, row, J_ERROR));
	json_object_object_add(o, "timed_out", api_col_bool(res, row, J_TIMED_OUT));
	json_object_object_add(o, "signal", api_col_int(res, row, J_SIGNAL));
	json_object_object_add(o, "stdout_bytes", api_col_int(res, row, J_STDOUT_BYTES));
	json_object_object_add(o, "stderr_bytes", api_col_int(res, row, J_STDERR_BYTES));
	json_object_object_add(o, "stdout_truncated", api_col_bool(res, row, J_STDOUT_TRUNC));
	json_object_object_add(o, "stderr_truncated", api_col_bool(res, row, J_STDERR_TRUNC));
	json_object_object_add(o, "kind", api_col_str(res, row, J_KIND));
	json_object_object_add(o, "cwd", api_col_str(res, row, J_CWD));
	json_object_object_add(o, "timeout_seconds", api_col_int(res, row, J_TIMEOUT));
	json_object_object_add(o, "seq", api_col_int(res, row, J_SEQ));
	json_object_object_add(o, "serial", api_col_bool(res, row, J_SERIAL));
	json_object_object_add(o, "max_output_bytes", PQgetisnull(res, row, J_MAX_OUTPUT) ?
			       json_object_new_int64(API_OUTPUT_DEFAULT) : api_col_int(res, row, J_MAX_OUTPUT));
	/* what ended a failed job (sql/migrations/023_failure_class.sql) */
	json_object_object_add(o, "failure", api_col_str(res, row, J_FAILURE));
	return o;
}

json_object *api_job_summary_view(PGresult *res, int row)
{
	json_object *o = api_job_view(res, row);

	json_object_object_del(o, "stdout");
	json_object_object_del(o, "stderr");
	return o;
}
