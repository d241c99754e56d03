/*
 * GET /sandboxes: the caller's live sandboxes, oldest first.
 *
 *   ?status=pending|ready|failed   filter by status
 *   ?label=key=value               filter by label (repeatable: all must match;
 *                                  the same key twice with two values matches
 *                                  nothing)
 *   ?limit=N                       page size, default 100, at most 1000
 *   ?cursor=C                      the next_cursor of the previous page
 *
 * Answer: {"sandboxes": [...], "next_cursor": "..." | null}. The cursor is
 * opaque to clients: "<created_at in epoch microseconds>_<id>", the keyset
 * position of the last row of the page.
 */
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "err.h"
#include "json.h"
#include "strutil.h"
#include "validate.h"
#include "xalloc.h"

#define LIST_DEFAULT 100
#define LIST_MAX 1000

struct list_req {
	const char *status;
	json_object *labels;      /* NULL: no label filter; else [{k: v}, ...] */
	int64_t limit;
	struct api_cursor cursor; /* us "" when absent */
};

static int parse_list(struct list_req *l, struct api_req *r)
{
	const char *v;
	int i;

	memset(l, 0, sizeof(*l));
	l->limit = LIST_DEFAULT;
	if ((v = api_req_query(r, "status")) && *v) {
		if (strcmp(v, "pending") && strcmp(v, "ready") && strcmp(v, "failed"))
			return api_reply_error(r, ORC_EINVALID, "query parameter 'status' must be "
					       "pending, ready or failed");
		l->status = v;
	}
	if ((v = api_req_query(r, "limit")) && orc_parse_i64(&l->limit, v, 1, LIST_MAX) < 0)
		return api_reply_error(r, ORC_EINVALID, "query parameter 'limit' must be an integer "
				       "from 1 to %d", LIST_MAX);
	if ((v = api_req_query(r, "cursor")) && *v && api_cursor_parse(&l->cursor, v) < 0)
		return api_reply_error(r, ORC_EINVALID, "query parameter 'cursor' is not a cursor "
				       "this server returned");
	/* Each label=key=value must hold (AND): a JSON array of one-label
	 * objects, each of which the row's labels must contain. */
	for (i = 0; i < r->nquery; i++) {
		json_object *pair, *value;
		const char *eq;
		char *key;
		int err;
		if (strcmp(r->query[i].key, "label"))
			continue;
		v = r->query[i].value;
		if (!(eq = strchr(v, '=')))
			return api_reply_error(r, ORC_EINVALID, "query parameter 'label' must be key=value");
		key = api_own_mem(r, xstrndup(v, (size_t)(eq - v)));
		value = json_object_new_string(eq + 1);
		pair = json_object_new_object();
		json_object_object_add(pair, key, value);
		if (!l->labels)
			l->labels = api_own_json(r, json_object_new_array());
		json_object_array_add(l->labels, pair);
		if ((err = api_check_label(key, value, r)) < 0)
			return api_reply_error(r, err, "query parameter 'label': %s", r->error);
	}
	return 0;
}

int api_sandbox_list(struct api_req *r)
{
	struct list_req l;
	char tenant[24], limit[24], sql[2048];
	const char *params[6];
	json_object *o, *arr;
	PGresult *res = NULL;
	PGconn *db = NULL;
	int err, i, n;

	if ((err = parse_list(&l, r)) < 0)
		return err;
	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	snprintf(limit, sizeof(limit), "%lld", (long long)l.limit + 1);
	params[0] = tenant;
	params[1] = l.status;
	params[2] = l.labels ? orc_json_str(l.labels, NULL) : NULL;
	params[3] = l.cursor.us[0] ? l.cursor.us : NULL;
	params[4] = l.cursor.id;
	params[5] = limit;
	snprintf(sql, sizeof(sql),
		 "SELECT %s, " API_CURSOR_US("s.created_at")
		 " FROM sandboxes s JOIN tenants t ON t.id = s.tenant_id"
		 " WHERE s.tenant_id = $1 AND s.state NOT IN ('deleting', 'deleted')"
		 " AND ($2::text IS NULL OR s.state = $2)"
		 " AND ($3::jsonb IS NULL OR NOT EXISTS (SELECT 1 FROM jsonb_array_elements($3::jsonb) f"
		 " WHERE NOT s.labels @> f))"
		 " AND ($4::bigint IS NULL OR (s.created_at, s.id) >"
		 " ('epoch'::timestamptz + $4::bigint * interval '1 microsecond', $5::text))"
		 " ORDER BY s.created_at, s.id LIMIT $6::int", api_sandbox_cols);
	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		return api_reply_error(r, err, "database unavailable");
	err = orc_pg_query(&res, db, sql, 6, params);
	orc_pg_pool_release(&api_server.db, db);
	if (err < 0)
		return api_reply_error(r, err, "cannot list sandboxes");
	api_own_pg(r, res);

	o = api_own_json(r, json_object_new_object());
	arr = json_object_new_array();
	json_object_object_add(o, "sandboxes", arr);
	n = PQntuples(res);
	for (i = 0; i < n && i < l.limit; i++)
		json_object_array_add(arr, api_sandbox_view(res, i));
	if (n > l.limit) {
		int last = (int)l.limit - 1, ncols = PQnfields(res);
		char *cursor = xasprintf("%s_%s", PQgetvalue(res, last, ncols - 1),
					 PQgetvalue(res, last, API_SANDBOX_COL_ID));
		json_object_object_add(o, "next_cursor", json_object_new_string(cursor));
		free(cursor);
	} else {
		json_object_object_add(o, "next_cursor", NULL);
	}
	return api_reply_json(r, 200, o);
}
