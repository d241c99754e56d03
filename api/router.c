/*
 * The route table and dispatch. Paths arrive without the optional /v1
 * prefix (request.c), so each route is listed once and served at both
 * /x and /v1/x. A "{id}" segment matches one path segment, which must be
 * a DNS label (sandbox and job ids both are); anything else is 404, so
 * garbage never reaches SQL (DELETE checks for itself: Orchard answers 200
 * for any unknown id).
 */
#include <string.h>

#include "api.h"
#include "checkpoint.h"
#include "err.h"
#include "log.h"
#include "strutil.h"
#include "xalloc.h"

struct api_route {
	const char *method;
	const char *pattern;
	api_handler handler;
	unsigned flags;
};

#define ROUTE_PUBLIC 1u   /* no authentication (nginx does not auth_request it) */
#define ROUTE_ANY_ID 2u   /* the handler copes with ids that are not DNS labels */
#define ROUTE_ADMIN 4u    /* admin keys only (403 for others) */
#define ROUTE_STREAM 8u   /* the handler reads the body as a stream (api_route_streams) */
#define ROUTE_BIG_BODY 16u /* a body up to API_FILE_BODY_MAX (api_route_body_max) */

static const struct api_route routes[] = {
	{ "GET",    "/",                         api_root_get,          ROUTE_PUBLIC },
	{ "GET",    "/health",                   api_health_get,        ROUTE_PUBLIC },
	{ "GET",    "/ready",                    api_ready_get,         ROUTE_PUBLIC },
	{ "GET",    "/resources",                api_resources_get,     0 },
	{ "GET",    "/stats",                    api_stats_get,         0 },
	{ "GET",    "/metrics",                  api_metrics_get,       ROUTE_ADMIN },
	{ "POST",   "/sandboxes",                api_sandbox_create,    0 },
	{ "POST",   "/sandboxes/batch",          api_batch_create,      0 },
	{ "GET",    "/sandboxes/batch/{id}/wait", api_batch_wait,       0 },
	{ "GET",    "/sandboxes",                api_sandbox_list,      0 },
	{ "GET",    "/sandboxes/{id}",           api_sandbox_get,       0 },
	{ "DELETE", "/sandboxes/{id}",           api_sandbox_delete,    ROUTE_ANY_ID },
	{ "PATCH",  "/sandboxes/{id}",           api_sandbox_patch,     0 },
	{ "GET",    "/sandboxes/{id}/wait",      api_sandbox_wait,      0 },
	{ "POST",   "/sandboxes/{id}/heartbeat", api_sandbox_heartbeat, 0 },
	{ "POST",   "/sandboxes/{id}/exec",      api_exec_post,         0 },
	{ "GET",    "/sandboxes/{id}/jobs",      api_job_list,          0 },
	{ "GET",    "/jobs/{id}",                api_job_get,           0 },
	{ "GET",    "/jobs/{id}/wait",           api_job_wait,          0 },
	{ "GET",    "/jobs/{id}/stream",         api_job_stream_get,    0 },
	{ "GET",    "/sandboxes/{id}/trajectory", api_trajectory_get,   0 },
	{ "GET",    "/trajectories",             api_trajectory_bulk,   0 },
	{ "POST",   "/trajectories/replay",      api_trajectory_replay, 0 },
	{ "POST",   "/jobs/{id}/cancel",         api_job_cancel,        0 },
	{ "GET",    "/tenants",                  api_tenant_list,       ROUTE_ADMIN },
	{ "POST",   "/tenants",                  api_tenant_create,     ROUTE_ADMIN },
	{ "GET",    "/tenants/{id}",             api_tenant_get,        ROUTE_ADMIN },
	{ "PATCH",  "/tenants/{id}",             api_tenant_patch,      ROUTE_ADMIN },
	{ "DELETE", "/tenants/{id}",             api_tenant_delete,     ROUTE_ADMIN },
	{ "GET",    "/keys",                     api_key_list,          ROUTE_ADMIN },
	{ "POST",   "/keys",                     api_key_create,        ROUTE_ADMIN },
	{ "DELETE", "/keys/{id}",                api_key_revoke,        ROUTE_ADMIN },
	{ "POST",   "/sandboxes/{id}/files",     api_files_upload,      ROUTE_BIG_BODY },
	{ "GET",    "/sandboxes/{id}/files",     api_files_download,    0 },
	{ "DELETE", "/sandboxes/{id}/files",     api_files_delete,      0 },
	{ "GET",    "/sandboxes/{id}/files/list", api_files_list,       0 },
	{ "GET",    "/sandboxes/{id}/files/stat", api_files_stat,       0 },
	{ "POST",   "/sandboxes/{id}/files/mkdir", api_files_mkdir,     0 },
	/* nginx proxies GETs of these straight to the agent (auth_agent.c);
	 * the api serves them too, streaming, as the fallback. */
	{ "PUT",    "/sandboxes/{id}/files/raw", api_files_raw_put,     ROUTE_STREAM },
	{ "GET",    "/sandboxes/{id}/files/raw", api_files_raw_get,     0 },
	{ "PUT",    "/sandboxes/{id}/archive",   api_archive_put,       ROUTE_STREAM },
	{ "GET",    "/sandboxes/{id}/archive",   api_archive_get,       0 },
	{ "POST",   "/sandboxes/{id}/apply_patch", api_git_apply,       0 },
	{ "GET",    "/sandboxes/{id}/git/diff",  api_git_diff,          0 },
	{ "POST",   "/sandboxes/{id}/git/reset", api_git_reset,         0 },
	{ "POST",   "/sandboxes/{id}/checkpoints", api_checkpoint_create, 0 },
	{ "GET",    "/checkpoints",              api_checkpoint_list,   0 },
	{ "GET",    "/checkpoints/{id}",         api_checkpoint_get,    0 },
	{ "DELETE", "/checkpoints/{id}",         api_checkpoint_delete, 0 },
	{ "POST",   "/checkpoints/{id}/fork",    api_checkpoint_fork,   0 },
	{ "POST",   "/sandboxes/{id}/fork",      api_sandbox_fork,      0 },
	{ "POST",   "/sandboxes/{id}/evaluate",  api_sandbox_evaluate,  0 },
	{ "POST",   "/sandboxes/{id}/pause",     api_sandbox_pause,     0 },
	{ "POST",   "/sandboxes/{id}/resume",    api_sandbox_resume,    0 },
};

int api_valid_id(const char *s)
{
	return orc_is_dns_label(s);
}

/* Match path against pattern; the {id} segment goes to id_start, id_len. */
static int route_match(const char *pattern, const char *path, const char **id_start, size_t *id_len)
{
	const char *p = pattern, *s = path;

	*id_start = NULL;
	*id_len = 0;
	while (*p && *s) {
		if (!strncmp(p, "{id}", 4)) {
			const char *end = strchr(s, '/');
			size_t n = end ? (size_t)(end - s) : strlen(s);
			if (!n)
				return 0;
			*id_start = s;
			*id_len = n;
			s += n;
			p += 4;
			continue;
		}
		if (*p != *s)
			return 0;
		p++;
		s++;
	}
	return !*p && !*s;
}

/* What the {id} of a path names, for a 404 message. */
static const char *id_kind(const char *path)
{
	if (!strncmp(path, "/jobs/", 6))
		return "job";
	if (!strncmp(path, "/tenants/", 9))
		return "tenant";
	if (!strncmp(path, "/keys/", 6))
		return "key";
	if (!strncmp(path, "/checkpoints/", 13))
		return "checkpoint";
	if (!strncmp(path, "/sandboxes/batch/", 17))
		return "batch";
	return "sandbox";
}

/* Whether the route of method and path has every flag in flags. */
static int route_has(const char *method, const char *path, unsigned flags)
{
	const char *id;
	size_t n, i;

	for (i = 0; i < sizeof(routes) / sizeof(*routes); i++)
		if ((routes[i].flags & flags) == flags && !strcmp(routes[i].method, method) &&
		    route_match(routes[i].pattern, path, &id, &n))
			return 1;
	return 0;
}

int api_route_streams(const char *method, const char *path)
{
	return route_has(method, path, ROUTE_STREAM);
}

size_t api_route_body_max(const char *method, const char *path)
{
	return route_has(method, path, ROUTE_BIG_BODY) ? API_FILE_BODY_MAX : API_BODY_MAX;
}

/* nginx's auth subrequests (never reachable from outside: its locations
 * are internal). */
static const struct {
	const char *path;
	api_handler handler;
} auth_routes[] = {
	{ "/_auth",       api_auth_handle },
	{ "/_auth_agent", api_auth_agent_handle },
	{ "/_pty_end",    api_pty_end_handle },
};

static int dispatch_auth_route(struct api_req *r)
{
	size_t i;

	for (i = 0; i < sizeof(auth_routes) / sizeof(*auth_routes); i++)
		if (!strcmp(r->path, auth_routes[i].path)) {
			auth_routes[i].handler(r);
			return 1;
		}
	return 0;
}

void api_dispatch_auth(struct api_req *r)
{
	if (!dispatch_auth_route(r))
		api_reply_error(r, ORC_ENOTFOUND, "no route for %s %s on the auth socket", r->method,
				r->path);
}

void api_dispatch(struct api_req *r)
{
	struct orc_buf allow = ORC_BUF_INIT;
	const struct api_route *hit = NULL;
	const char *id_start = NULL;
	size_t id_len = 0, i;

	/* Still served here: an nginx that predates the auth socket passes
	 * its subrequests to this one. */
	if (dispatch_auth_route(r))
		return;
	for (i = 0; i < sizeof(routes) / sizeof(*routes); i++) {
		const char *s;
		size_t n;
		if (!route_match(routes[i].pattern, r->path, &s, &n))
			continue;
		r->route = routes[i].pattern;   /* metrics: a 405's pattern too */
		if (!strcmp(routes[i].method, r->method) ||
		    (!strcmp(r->method, "HEAD") && !strcmp(routes[i].method, "GET"))) {
			hit = &routes[i];
			id_start = s;
			id_len = n;
			break;
		}
		orc_buf_addf(&allow, "%s%s", allow.len ? ", " : "Allow: ", routes[i].method);
	}
	if (!hit) {
		if (allow.len) {
			orc_buf_adds(&allow, "\r\n");
			api_reply_error_h(r, API_EMETHOD, allow.ptr, "method %s is not allowed on %s",
					  r->method, r->path);
		} else {
			api_reply_error(r, ORC_ENOTFOUND, "no route for %s %s", r->method, r->path);
		}
		goto done;
	}
	if (!(hit->flags & ROUTE_PUBLIC) && !r->tenant_id) {
		/* nginx authenticates every non-public route; reaching here
		 * without its params means a misconfigured proxy. */
		api_reply_error(r, ORC_EUNAUTH, "missing API key");
		goto done;
	}
	if ((hit->flags & ROUTE_ADMIN) && strcmp(r->role, "admin")) {
		api_reply_error(r, ORC_EFORBIDDEN, "%s %s needs an admin key", r->method, r->path);
		goto done;
	}
	if (id_start) {
		char *id = api_own_mem(r, xstrndup(id_start, id_len));
		r->id = id;
		if (!(hit->flags & ROUTE_ANY_ID) && !api_valid_id(id)) {
			api_reply_error(r, ORC_ENOTFOUND, "%s not found", id_kind(r->path));
			goto done;
		}
	}
	if (api_rate_limit_take(r) < 0)
		goto done;
	if (api_tenant_share_enter(r->tenant_id) < 0) {
		api_reply_error(r, ORC_EQUOTA, "too many requests of this tenant in flight; "
				"retry when some have answered");
		goto done;
	}
	hit->handler(r);
	api_tenant_share_leave(r->tenant_id);
	if (!r->replied)
		api_reply_error(r, ORC_ERROR, "handler sent no response");
done:
	orc_buf_release(&allow);
}
