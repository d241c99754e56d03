/*
 * GET /sandboxes/{id}/jobs: the jobs of one of the caller's live sandboxes,
 * newest first.
 *
 *   ?limit=N    page size, default 50, at most 500
 *   ?cursor=C   the next_cursor of the previous page
 *
 * Answer: {"jobs": [...], "next_cursor": "..." | null}. Each job is the job
 * object without stdout and stderr (they can be megabytes each; GET
 * /jobs/{id} has them); the byte counts and truncation flags are there.
 */
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "err.h"
#include "json.h"
#include "strutil.h"
#include "xalloc.h"

#define LIST_DEFAULT 50
#define LIST_MAX 500

/* 1 when the caller's sandbox r->id exists and is not deleted. */
static int sandbox_visible(PGconn *db, struct api_req *r, const char *tenant)
{
	const char *params[2] = { r->id, tenant };
	PGresult *res = NULL;
	int err, found;

	if ((err = orc_pg_query(&res, db, "SELECT 1 FROM sandboxes WHERE id = $1 AND tenant_id = $2"
				" AND state NOT IN ('deleting', 'deleted')", 2, params)) < 0)
		return err;
	found = PQntuples(res) == 1;
	PQclear(res);
	return found;
}

/* ?limit= (1..LIST_MAX, default LIST_DEFAULT) and ?cursor= (us "" when
 * absent or empty): 0, or 422 (replied). */
static int parse_job_list(int64_t *limit, struct api_cursor *cursor, struct api_req *r)
{
	const char *v;

	*limit = LIST_DEFAULT;
	cursor->us[0] = '\0';
	cursor->id = NULL;
	if ((v = api_req_query(r, "limit")) && orc_parse_i64(limit, v, 1, LIST_MAX) < 0)
		return api_reply_error(r, ORC_EINVALID, "query parameter 'limit' must be an integer "
				       "from 1 to %d", LIST_MAX);
	if ((v = api_req_query(r, "cursor")) && *v && api_cursor_parse(cursor, v) < 0)
		return api_reply_error(r, ORC_EINVALID, "query parameter 'cursor' is not a cursor "
				       "this server returned");
	return 0;
}

int api_job_list(struct api_req *r)
{
	struct api_cursor cursor = { "", NULL };
	char tenant[24], limit_s[24], sql[2048];
	const char *params[5];
	json_object *o, *arr;
	PGresult *res = NULL;
	PGconn *db = NULL;
	int64_t limit;
	int err, i, n;

	if ((err = parse_job_list(&limit, &cursor, r)) < 0)
		return err;
	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	snprintf(limit_s, sizeof(limit_s), "%lld", (long long)limit + 1);
	params[0] = r->id;
	params[1] = tenant;
	params[2] = cursor.us[0] ? cursor.us : NULL;
	params[3] = cursor.id;
	params[4] = limit_s;
	snprintf(sql, sizeof(sql),
		 "SELECT %s, " API_CURSOR_US("j.created_at") " FROM jobs j"
		 " WHERE j.sandbox_id = $1 AND j.tenant_id = $2"
		 " AND ($3::bigint IS NULL OR (j.created_at, j.id) <"
		 " ('epoch'::timestamptz + $3::bigint * interval '1 microsecond', $4::text))"
		 " ORDER BY j.created_at DESC, j.id DESC LIMIT $5::int", api_job_summary_cols);
	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		return api_reply_error(r, err, "database unavailable");
	if ((err = sandbox_visible(db, r, tenant)) == 0)
		err = ORC_ENOTFOUND;
	else if (err == 1)
		err = orc_pg_query(&res, db, sql, 5, params);
	orc_pg_pool_release(&api_server.db, db);
	if (err == ORC_ENOTFOUND)
		return api_reply_error(r, err, "sandbox %s not found", r->id);
	if (err < 0)
		return api_reply_error(r, err, "cannot list the jobs of sandbox %s", r->id);
	api_own_pg(r, res);

	o = api_own_json(r, json_object_new_object());
	arr = json_object_new_array();
	json_object_object_add(o, "jobs", arr);
	n = PQntuples(res);
	for (i = 0; i < n && i < limit; i++)
		json_object_array_add(arr, api_job_summary_view(res, i));
	if (n > limit) {
		int last = (int)limit - 1, ncols = PQnfields(res);
		char *c = xasprintf("%s_%s", PQgetvalue(res, last, ncols - 1),
				    PQgetvalue(res, last, API_JOB_COL_ID));
		json_object_object_add(o, "next_cursor", json_object_new_string(c));
		free(c);
	} else {
		json_object_object_add(o, "next_cursor", NULL);
	}
	return api_reply_json(r, 200, o);
}
