/*
 * /_auth_agent: nginx's auth_request target for the routes it proxies
 * straight to a sandbox's agent (docs/architecture.md, "Routes nginx
 * proxies to the agent"): raw file and tar downloads, and the PTY.
 *
 * It is /_auth (the same cached key check) plus the sandbox: nginx sends the
 * client's original URI and method (ORCHARD_ORIGINAL_URI/_METHOD), the
 * sandbox id is taken from the URI, and when it is the caller's and ready
 * the answer is 204 with
 *
 *   X-Orchard-Tenant, X-Orchard-Key, X-Orchard-Role   (as /_auth)
 *   X-Orchard-Agent-Upstream: http://unix:/path/agent.sock:   (nginx's form)
 *                          or http://10.0.0.7:7070
 *   X-Orchard-Agent-Token:  the agent's bearer token
 *
 * For exec/pty the key may also come as ?api_key= or a WebSocket
 * subprotocol "api_key.<key>" (Orchard's PTY auth). Every other case
 * answers 403 with X-Orchard-Auth-Error (not_found,
 * not_ready, bad_uri, bad_method, no_agent) besides the tenant headers, or
 * 401/403 for the key itself, exactly like /_auth. auth_request only knows
 * 2xx, 401 and 403, so nginx hands every 403 to the api's own streaming
 * handler of the route, which re-checks everything and answers the real
 * 404/409 in our error shape. Response headers of an auth subrequest never
 * reach the client; nginx also hides X-Orchard-Agent-* from every upstream.
 */
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "err.h"
#include "log.h"
#include "strutil.h"
#include "xalloc.h"

/* The routes nginx may send here: what follows /sandboxes/{id}/. */
static const char *const agent_routes[] = { "files/raw", "archive", "exec/pty" };

#define ROUTE_PTY API_AGENT_ROUTE_PTY   /* agent_routes[] index of exec/pty */

/*
 * The sandbox id of uri ("[/v1]/sandboxes/<id>/<route>[?query]") into
 * out, returning the route's index; ORC_EINVALID unless uri is exactly
 * that form with a DNS-label id (no dot segments, no percent-encoding:
 * nginx matched the normalised URI, so anything else is a URI that does
 * not mean what it seems).
 */
int api_agent_uri_parse(char out[API_MAX_ID + 1], const char *uri)
{
	const char *p = uri, *slash, *end;
	size_t n, i;

	if (!strncmp(p, "/v1/", 4))
		p += 3;
	if (strncmp(p, "/sandboxes/", 11))
		return ORC_EINVALID;
	p += 11;
	if (!(slash = strchr(p, '/')) || (n = (size_t)(slash - p)) == 0 || n > API_MAX_ID)
		return ORC_EINVALID;
	memcpy(out, p, n);
	out[n] = '\0';
	if (!api_valid_id(out))
		return ORC_EINVALID;
	p = slash + 1;
	end = strchr(p, '?');
	n = end ? (size_t)(end - p) : strlen(p);
	for (i = 0; i < sizeof(agent_routes) / sizeof(*agent_routes); i++)
		if (strlen(agent_routes[i]) == n && !strncmp(p, agent_routes[i], n))
			return (int)i;
	return ORC_EINVALID;
}

/* Characters that may go into a response header unquoted. */
static int header_safe(const char *s, size_t max)
{
	size_t n = strlen(s), i;

	if (!n || n > max)
		return 0;
	for (i = 0; i < n; i++)
		if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] >= 0x7f)
			return 0;
	return 1;
}

/* nginx's proxy_pass form of an agent address, malloc'd; NULL if unusable. */
static char *upstream_of(const char *address)
{
	if (!strncmp(address, "unix:/", 6)) {
		/* nginx splits "unix:PATH:URI" at the first ':' after the path */
		if (strchr(address + 5, ':'))
			return NULL;
		return xasprintf("http://%s:", address);
	}
	if (!strncmp(address, "http://", 7) && address[7] && !strchr(address + 7, '/'))
		return xstrdup(address);
	return NULL;
}

/*
 * Browsers cannot set headers on a WebSocket: for the PTY, Orchard also
 * takes the key from ?api_key= or a subprotocol "api_key.<key>". The key
 * is copied into buf (keys are plain [a-z0-9_], nothing to decode).
 */
static const char *pty_key(struct api_req *r, const char *uri, char *buf, size_t buflen)
{
	const char *q = strchr(uri, '?'), *p, *proto;
	size_t n;

	for (p = q; p; p = strchr(p + 1, '&')) {
		if (!strncmp(p + 1, "api_key=", 8)) {
			n = strcspn(p + 9, "&");
			if (n && n < buflen) {
				memcpy(buf, p + 9, n);
				buf[n] = '\0';
				return buf;
			}
		}
	}
	proto = api_req_param(r, "HTTP_SEC_WEBSOCKET_PROTOCOL");
	for (p = proto; p && *p; p += n) {
		p += strspn(p, " ,");
		n = strcspn(p, " ,");
		if (n > 8 && n - 8 < buflen && !strncmp(p, "api_key.", 8)) {
			memcpy(buf, p + 8, n - 8);
			buf[n - 8] = '\0';
			return buf;
		}
	}
	return NULL;
}

static int defer(struct api_req *r, const struct api_auth *a, const char *why)
{
	char hdr[256];

	snprintf(hdr, sizeof(hdr), "X-Orchard-Tenant: %s\r\nX-Orchard-Key: %s\r\nX-Orchard-Role: %s\r\n"
		 "X-Orchard-Auth-Error: %s\r\n", a->tenant, a->key, a->role, why);
	api_req_write(r, 403, hdr, NULL, 0);
	return ORC_EFORBIDDEN;
}

/*
 * A PTY session is an action on the sandbox: record it ('pty.open', the
 * request id ties it to nginx's and the agent's logs) before nginx may
 * connect, so no session goes unrecorded. What is typed is not seen here.
 */
static int record_pty_open(struct api_req *r, const struct api_auth *a, const char *id,
			   int64_t tenant)
{
	json_object *data = json_object_new_object();
	int err;

	r->id = api_own_mem(r, xstrdup(id));
	r->tenant_id = tenant;
	r->key_id = a->key;
	err = api_event_record(r, "pty.open", data);
	json_object_put(data);
	return err;
}

int api_auth_agent_handle(struct api_req *r)
{
	const char *doc = api_req_param(r, "DOCUMENT_URI");
	const char *uri = api_req_param(r, "ORCHARD_ORIGINAL_URI");
	const char *method = api_req_param(r, "ORCHARD_ORIGINAL_METHOD");
	char id[API_MAX_ID + 1], keybuf[128], *address = NULL, *token = NULL, *upstream = NULL;
	struct orc_buf hdr = ORC_BUF_INIT;
	struct api_auth a;
	int64_t tenant;
	int route, err;

	/* Only nginx's internal subrequest: never /v1/_auth_agent from outside. */
	if (!doc || strcmp(doc, "/_auth_agent") || !uri || !method)
		return api_reply_error(r, ORC_ENOTFOUND, "no route for %s %s", r->method, r->path);
	route = api_agent_uri_parse(id, uri);
	if (route == ROUTE_PTY && !api_req_param(r, "HTTP_X_API_KEY") &&
	    !api_req_param(r, "HTTP_AUTHORIZATION"))
		err = api_auth_check_key(&a, r, pty_key(r, uri, keybuf, sizeof(keybuf)));
	else
		err = api_auth_check(&a, r);
	if (err < 0)
		return err;
	if (route < 0)
		return defer(r, &a, "bad_uri");
	if (strcmp(method, "GET") && strcmp(method, "HEAD"))
		return defer(r, &a, "bad_method");
	if (orc_parse_i64(&tenant, a.tenant, 1, INT64_MAX) < 0)
		return api_reply_error(r, ORC_ERROR, "bad tenant id in the key cache");
	err = api_agent_lookup(&address, &token, NULL, tenant, id);
	if (err == ORC_ENOTFOUND)
		return defer(r, &a, "not_found");
	if (err == API_ENOTREADY)
		return defer(r, &a, "not_ready");
	if (err < 0)
		return api_reply_error(r, err, "cannot read sandbox %s", id);
	if (!(upstream = upstream_of(address)) || !header_safe(upstream, 512) ||
	    !header_safe(token, 4096)) {
		orc_log(ORC_LOG_ERROR, "unusable agent address or token", "sandbox_id", id, NULL);
		err = defer(r, &a, "no_agent");
		goto done;
	}
	if (route == ROUTE_PTY && (err = record_pty_open(r, &a, id, tenant)) < 0) {
		err = api_reply_error(r, err, "cannot record the PTY session");
		goto done;
	}
	orc_buf_addf(&hdr, "X-Orchard-Tenant: %s\r\nX-Orchard-Key: %s\r\nX-Orchard-Role: %s\r\n"
		     "X-Orchard-Agent-Upstream: %s\r\nX-Orchard-Agent-Token: %s\r\n",
		     a.tenant, a.key, a.role, upstream, token);
	api_req_write(r, 204, hdr.ptr, NULL, 0);
	err = 0;
done:
	orc_buf_release(&hdr);
	free(upstream);
	free(address);
	free(token);
	return err;
}
