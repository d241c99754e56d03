/*
 * Reaching a sandbox's agent from a route (files, git, raw streams): find
 * the caller's ready sandbox, call its agent, map the agent's errors to
 * ours, and record the action as an event.
 *
 * A sandbox of another tenant, an unknown one and one being deleted are
 * all 404; a pending or failed one is 409 not_ready. The database
 * connection is never held across the agent call (DESIGN.md).
 */
#include <stdio.h>
#include <string.h>

#include "agent_client.h"
#include "api.h"
#include "checkpoint.h"
#include "err.h"
#include "json.h"
#include "log.h"
#include "strutil.h"
#include "xalloc.h"

/* The lookup statement's columns. */
enum { LOOKUP_STATE, LOOKUP_MESSAGE, LOOKUP_ADDRESS, LOOKUP_TOKEN };

void api_sandbox_state_set(struct api_sandbox_state *out, const char *state, const char *message)
{
	snprintf(out->state, sizeof(out->state), "%s", state);
	snprintf(out->message, sizeof(out->message), "%s", message);
}

int api_reply_not_ready(struct api_req *r, const struct api_sandbox_state *s,
			const char *failed_suffix)
{
	if (!strcmp(s->state, "paused"))
		return api_reply_error(r, API_ENOTREADY, "sandbox %s is paused; resume it with "
				       "POST /v1/sandboxes/%s/resume first", r->id, r->id);
	if (!strcmp(s->state, "failed"))
		return api_reply_error(r, API_ENOTREADY, "sandbox %s failed%s%s%s", r->id,
				       s->message[0] ? ": " : "", s->message, failed_suffix);
	return api_reply_error(r, API_ENOTREADY, "sandbox %s is not ready yet (status %s); wait for "
			       "it with GET /sandboxes/%s/wait", r->id, s->state, r->id);
}

int api_agent_lookup(char **address_out, char **token_out, struct api_sandbox_state *state_out,
		     int64_t tenant_id, const char *id)
{
	char tenant[24];
	const char *params[2] = { id, tenant };
	PGresult *res = NULL;
	PGconn *db = NULL;
	int err;

	snprintf(tenant, sizeof(tenant), "%lld", (long long)tenant_id);
	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		return err;
	/* Reading files is activity too: the idle timeout must not reap a
	 * sandbox that is only being downloaded from. */
	err = orc_pg_query(&res, db,
		"WITH s AS (SELECT id, CASE WHEN state = 'ready' AND (paused OR pause_desired)"
		" THEN 'paused' ELSE state END AS state, coalesce(state_message, '') AS msg, agent_address,"
		" agent_token FROM sandboxes WHERE id = $1 AND tenant_id = $2::bigint"
		" AND state NOT IN ('deleting', 'deleted')),"
		" t AS (UPDATE sandboxes SET last_activity_at = now() WHERE id = (SELECT id FROM s"
		" WHERE state = 'ready') RETURNING 1)"
		" SELECT state, msg, agent_address, agent_token FROM s",
		2, params);
	orc_pg_pool_release(&api_server.db, db);
	if (err < 0)
		return err;
	if (PQntuples(res) != 1) {
		err = ORC_ENOTFOUND;
	} else if (strcmp(PQgetvalue(res, 0, LOOKUP_STATE), "ready") ||
		   PQgetisnull(res, 0, LOOKUP_ADDRESS) || PQgetisnull(res, 0, LOOKUP_TOKEN)) {
		if (state_out)
			api_sandbox_state_set(state_out, PQgetvalue(res, 0, LOOKUP_STATE),
					      PQgetvalue(res, 0, LOOKUP_MESSAGE));
		err = API_ENOTREADY;
	} else {
		*address_out = xstrdup(PQgetvalue(res, 0, LOOKUP_ADDRESS));
		*token_out = xstrdup(PQgetvalue(res, 0, LOOKUP_TOKEN));
	}
	PQclear(res);
	return err;
}

int api_agent_get(struct api_agent *out, struct api_req *r)
{
	struct api_sandbox_state st;
	char *address = NULL, *token = NULL;
	int err;

	api_step_barrier(r, r->id);   /* a step checkpoint holds the state before this call */
	err = api_agent_lookup(&address, &token, &st, r->tenant_id, r->id);
	if (err == ORC_ENOTFOUND)
		return api_reply_error(r, err, "sandbox %s not found", r->id);
	if (err == API_ENOTREADY)
		return api_reply_not_ready(r, &st, "");
	if (err < 0)
		return api_reply_error(r, err, "cannot read sandbox %s", r->id);
	out->address = api_own_mem(r, address);
	out->token = api_own_mem(r, token);
	return 0;
}

int api_agent_json(struct orc_buf *out, long *status_out, struct api_req *r,
		   const struct api_agent *a, const char *method, const char *path,
		   const char *body, size_t body_len, long timeout_ms)
{
	struct orc_agent_req req;
	int err;

	memset(&req, 0, sizeof(req));
	req.address = a->address;
	req.token = a->token;
	req.method = method;
	req.path = path;
	req.body = body;
	req.body_len = body_len;
	req.timeout_ms = timeout_ms;
	req.request_id = r->request_id[0] ? r->request_id : NULL;
	err = orc_agent_call(out, status_out, &req);
	if (err == ORC_ETOOBIG)
		return api_reply_error(r, err, "the agent's answer is larger than %zu bytes", out->max);
	if (err == ORC_ETIMEOUT)
		return api_reply_error(r, API_EAGENT, "the sandbox's agent did not answer within %ld s",
				       timeout_ms / 1000);
	if (err < 0)
		return api_reply_error(r, API_EAGENT, "agent unreachable: cannot connect to the agent of "
				       "sandbox %s", r->id);
	return 0;
}

json_object *api_agent_message(const char *body, size_t len)
{
	json_object *o = NULL, *m = NULL, *s;
	const char *text = "the agent gave no reason";

	if (body && orc_json_parse_object(&o, body, len, NULL, 0) == 0 &&
	    json_object_object_get_ex(o, "error", &m) && json_object_is_type(m, json_type_string))
		text = json_object_get_string(m);
	s = json_object_new_string_len(text, (int)strnlen(text, API_AGENT_MESSAGE_MAX));
	json_object_put(o);
	return s;
}

int api_agent_status_err(long status)
{
	switch (status) {
	case 400: return API_EBADREQ;
	case 403: return ORC_EFORBIDDEN;
	case 404: return ORC_ENOTFOUND;
	case 409: return ORC_ECONFLICT;
	case 413: return ORC_ETOOBIG;
	case 503: return ORC_EUNAVAIL;
	default: return API_EAGENT;    /* 401 (our token), 405, 5xx: our or its bug */
	}
}

int api_reply_agent_error(struct api_req *r, long status, const struct orc_buf *body)
{
	json_object *msg = api_own_json(r, api_agent_message(body->ptr, body->len));
	int err = api_agent_status_err(status);

	if (err == API_EAGENT)
		return api_reply_error(r, err, "the sandbox's agent failed (HTTP %ld): %s", status,
				       json_object_get_string(msg));
	return api_reply_error(r, err, "%s", json_object_get_string(msg));
}

int api_reply_agent(struct api_req *r, long status, const struct orc_buf *body)
{
	if (status != 200)
		return api_reply_agent_error(r, status, body);
	api_req_write(r, 200, NULL, orc_buf_cstr(body), body->len);
	return 0;
}

int api_event_record(struct api_req *r, const char *kind, json_object *data)
{
	char tenant[24];
	const char *params[6];
	PGconn *db = NULL;
	int err;

	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	params[0] = r->id;
	params[1] = tenant;
	params[2] = kind;
	params[3] = orc_json_str(data, NULL);
	params[4] = r->key_id;
	params[5] = r->request_id;
	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		goto done;
	err = orc_pg_query(NULL, db,
		"WITH s AS (UPDATE sandboxes SET last_activity_at = now() WHERE id = $1"
		" AND tenant_id = $2::bigint RETURNING id, tenant_id)"
		" INSERT INTO events (sandbox_id, tenant_id, kind, data, api_key_id, request_id)"
		" SELECT s.id, s.tenant_id, $3, $4::jsonb, $5::bigint, nullif($6, '') FROM s",
		6, params);
	orc_pg_pool_release(&api_server.db, db);
done:
	if (err < 0)
		orc_log(ORC_LOG_ERROR, "cannot record an event", "sandbox_id", r->id, "kind", kind, NULL);
	return err;
}
