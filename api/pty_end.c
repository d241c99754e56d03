/*
 * /_pty_end: the end of a PTY session (issue 21, docs/checkpoints.md).
 *
 * nginx proxies the PTY WebSocket straight to the agent, so the api sees
 * a session only twice: /_auth_agent records 'pty.open' before nginx may
 * connect, and nginx's post_action (@pty_end) calls here once the
 * connection has ended, whatever its outcome, with the request's id, the
 * original URI and the tenant its key check found. This records
 * 'pty.close' (data: open_event_id) for the session that opened under that
 * request id; a refused handshake opened none and records nothing. The
 * events trigger (sql/migrations/032_pty_step.sql) then writes a step
 * checkpoint for an every_step sandbox, and the pty.close line of the
 * trajectory names it.
 *
 * Reachable only on the auth socket, from nginx's named location; its
 * answer goes nowhere.
 */
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "err.h"
#include "log.h"

static const char close_sql[] =
	"INSERT INTO events (sandbox_id, tenant_id, kind, data, api_key_id, request_id)"
	" SELECT o.sandbox_id, o.tenant_id, 'pty.close', jsonb_build_object('open_event_id', o.id),"
	"  o.api_key_id, o.request_id FROM events o"
	" WHERE o.sandbox_id = $1 AND o.tenant_id = $2::bigint AND o.kind = 'pty.open'"
	"  AND o.request_id = $3"
	"  AND NOT EXISTS (SELECT 1 FROM events c WHERE c.sandbox_id = o.sandbox_id"
	"   AND c.kind = 'pty.close' AND c.data->>'open_event_id' = o.id::text)"
	" ORDER BY o.id DESC LIMIT 1";

int api_pty_end_handle(struct api_req *r)
{
	const char *doc = api_req_param(r, "DOCUMENT_URI");
	const char *uri = api_req_param(r, "ORCHARD_ORIGINAL_URI");
	char id[API_MAX_ID + 1], tenant[24];
	const char *params[3] = { id, tenant, r->request_id };
	PGconn *db = NULL;
	int err;

	if (!doc || strcmp(doc, "/_pty_end") || !uri)
		return api_reply_error(r, ORC_ENOTFOUND, "no route for %s %s", r->method, r->path);
	if (api_agent_uri_parse(id, uri) != API_AGENT_ROUTE_PTY || r->tenant_id <= 0 ||
	    !r->request_id || !*r->request_id) {
		api_req_write(r, 204, NULL, NULL, 0);   /* refused before the key check: no session */
		return 0;
	}
	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		goto done;
	err = orc_pg_query(NULL, db, close_sql, 3, params);
	orc_pg_pool_release(&api_server.db, db);
done:
	if (err < 0) {
		orc_log(ORC_LOG_ERROR, "cannot record the end of a PTY session", "sandbox_id", id,
			"request_id", r->request_id, NULL);
		return api_reply_error(r, err, "cannot record the end of the PTY session");
	}
	api_req_write(r, 204, NULL, NULL, 0);
	return 0;
}
