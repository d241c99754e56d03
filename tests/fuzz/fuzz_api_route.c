/*
 * The request line and path parameters of the api: api_req_init of
 * api/request.c (method, set_path: query string, /v1 prefix, trailing
 * slash; tenant, role and request id parameters; parse_query) with a fake
 * FastCGI environment, then api_dispatch of api/router.c (route_match,
 * the {id} segment and its DNS-label check, 405 with Allow, 401, 403).
 * Both files are included (fuzz_req.h, then router.c); every handler is a
 * stub that records it was called, so a route added to the table needs
 * its handler added to HANDLERS below.
 *
 * Input lines: "METHOD URI" (URI with an optional ?query), then the
 * ORCHARD_TENANT, ORCHARD_ROLE and X-Request-ID values (each optional).
 * DOCUMENT_URI is the URI before '?' unless the method starts with 'r'
 * (then only REQUEST_URI is given and set_path must cut the query off).
 *
 * Properties: every request gets exactly one answer; a handler is called
 * only for a route whose method matches (or GET for HEAD), whose pattern
 * with {id} replaced by r->id is the path, whose {id} is one non-empty
 * segment and a DNS label (unless the route takes any id), with a tenant
 * unless public and the admin role when admin-only; api_route_streams
 * agrees with the route's flag; a 404 means no such route took the id, a
 * 405 that the path matched only other methods; the request id is empty
 * or 1-128 characters of [A-Za-z0-9._-]; the path holds no '?'.
 */
#include "fuzz_req.h"
#include "../../api/router.c"

static api_handler called;
static int called_auth;

#define HANDLERS(X) \
	X(api_root_get) X(api_health_get) X(api_ready_get) X(api_resources_get) X(api_stats_get) \
	X(api_metrics_get) X(api_sandbox_create) X(api_batch_create) X(api_batch_wait) X(api_sandbox_list) X(api_sandbox_get) \
	X(api_sandbox_delete) X(api_sandbox_wait) X(api_sandbox_heartbeat) X(api_exec_post) \
	X(api_job_list) X(api_job_get) X(api_job_wait) X(api_job_stream_get) X(api_trajectory_get) \
	X(api_trajectory_bulk) \
	X(api_trajectory_replay) X(api_job_cancel) X(api_tenant_list) X(api_tenant_create) \
	X(api_tenant_patch) X(api_tenant_get) X(api_tenant_delete) X(api_key_list) X(api_key_create) \
	X(api_key_revoke) X(api_files_upload) X(api_files_download) X(api_files_delete) X(api_files_list) \
	X(api_files_stat) \
	X(api_files_mkdir) X(api_files_raw_put) X(api_files_raw_get) X(api_archive_put) \
	X(api_archive_get) X(api_git_apply) X(api_git_diff) X(api_git_reset) \
	X(api_checkpoint_create) X(api_checkpoint_list) X(api_checkpoint_get) \
	X(api_checkpoint_delete) X(api_checkpoint_fork) X(api_sandbox_fork) X(api_sandbox_pause) \
	X(api_sandbox_resume) X(api_sandbox_patch) X(api_sandbox_evaluate)

#define STUB(name) \
	int name(struct api_req *r) \
	{ \
		FUZZ_ASSERT(!called && !called_auth); \
		called = name; \
		r->replied = 1; \
		r->status = 200; \
		return 0; \
	}
HANDLERS(STUB)

int api_auth_handle(struct api_req *r)
{
	FUZZ_ASSERT(!strcmp(r->path, "/_auth"));
	called_auth = 1;
	r->replied = 1;
	return 0;
}

int api_auth_agent_handle(struct api_req *r)
{
	FUZZ_ASSERT(!strcmp(r->path, "/_auth_agent"));
	called_auth = 1;
	r->replied = 1;
	return 0;
}

int api_pty_end_handle(struct api_req *r)
{
	FUZZ_ASSERT(!strcmp(r->path, "/_pty_end"));
	called_auth = 1;
	r->replied = 1;
	return 0;
}

/* Would dispatch hand this route the request's id? */
static int id_ok(const struct api_route *rt, const char *id_start, size_t id_len)
{
	char *id;
	int ok;

	if (!id_start || (rt->flags & ROUTE_ANY_ID))
		return 1;
	id = xstrndup(id_start, id_len);
	ok = api_valid_id(id);
	free(id);
	return ok;
}

static int method_ok(const struct api_route *rt, const char *method)
{
	return !strcmp(rt->method, method) || (!strcmp(method, "HEAD") && !strcmp(rt->method, "GET"));
}

static void check_hit(struct api_req *r)
{
	const struct api_route *rt = NULL;
	struct orc_buf b = ORC_BUF_INIT;
	const char *p, *id;
	size_t i, n;

	for (i = 0; i < sizeof(routes) / sizeof(*routes) && !rt; i++)
		if (routes[i].handler == called && method_ok(&routes[i], r->method) &&
		    route_match(routes[i].pattern, r->path, &id, &n))
			rt = &routes[i];
	FUZZ_ASSERT(rt);
	FUZZ_ASSERT(!strstr(rt->pattern, "{id}") == !r->id);
	for (p = rt->pattern; *p; p++) {
		if (!strncmp(p, "{id}", 4)) {
			orc_buf_adds(&b, r->id);
			p += 3;
		} else {
			orc_buf_addc(&b, *p);
		}
	}
	FUZZ_ASSERT(!strcmp(orc_buf_cstr(&b), r->path));
	orc_buf_release(&b);
	if (r->id) {
		FUZZ_ASSERT(*r->id && !strchr(r->id, '/'));
		FUZZ_ASSERT((rt->flags & ROUTE_ANY_ID) || orc_is_dns_label(r->id));
	}
	FUZZ_ASSERT((rt->flags & ROUTE_PUBLIC) || r->tenant_id > 0);
	FUZZ_ASSERT(!(rt->flags & ROUTE_ADMIN) || !strcmp(r->role, "admin"));
	FUZZ_ASSERT(api_route_streams(r->method, r->path) == !!(rt->flags & ROUTE_STREAM));
}

static void check_refusal(struct api_req *r)
{
	const char *id;
	size_t i, n;
	int path_matched = 0;

	for (i = 0; i < sizeof(routes) / sizeof(*routes); i++) {
		if (!route_match(routes[i].pattern, r->path, &id, &n))
			continue;
		path_matched = 1;
		/* the first route of path and method is the one dispatch takes */
		if (method_ok(&routes[i], r->method)) {
			if (r->status == ORC_ENOTFOUND)
				FUZZ_ASSERT(!id_ok(&routes[i], id, n));
			else if (r->status == ORC_EUNAUTH)
				FUZZ_ASSERT(!(routes[i].flags & ROUTE_PUBLIC) && !r->tenant_id);
			else if (r->status == ORC_EFORBIDDEN)
				FUZZ_ASSERT((routes[i].flags & ROUTE_ADMIN) && strcmp(r->role, "admin"));
			else
				FUZZ_ASSERT(0);
			return;
		}
	}
	FUZZ_ASSERT(r->status == (path_matched ? API_EMETHOD : ORC_ENOTFOUND));
}

static char *line(const uint8_t **p, const uint8_t *end)
{
	const uint8_t *nl;
	char *s;

	if (*p >= end)
		return NULL;
	nl = memchr(*p, '\n', (size_t)(end - *p));
	s = fuzz_cstr(*p, (size_t)((nl ? nl : end) - *p));
	*p = nl ? nl + 1 : end;
	return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *p = data, *end = data + size;
	char *first = line(&p, end), *tenant = line(&p, end), *role = line(&p, end);
	char *rid = line(&p, end), *env[8], *uri, *q;
	const char *rq;
	FCGX_Request fcgi;
	struct api_req r;
	int n = 0, i;

	memset(&fcgi, 0, sizeof(fcgi));
	memset(&r, 0, sizeof(r));
	called = NULL;
	called_auth = 0;
	if (!first || !(uri = strchr(first, ' ')))
		goto done;
	*uri++ = '\0';
	env[n++] = xasprintf("REQUEST_METHOD=%s", first);
	env[n++] = xasprintf("REQUEST_URI=%s", uri);
	if (first[0] != 'r')
		env[n++] = xasprintf("DOCUMENT_URI=%.*s", (int)strcspn(uri, "?"), uri);
	if ((q = strchr(uri, '?')))
		env[n++] = xasprintf("QUERY_STRING=%s", q + 1);
	if (tenant)
		env[n++] = xasprintf("ORCHARD_TENANT=%s", tenant);
	if (role)
		env[n++] = xasprintf("ORCHARD_ROLE=%s", role);
	if (rid)
		env[n++] = xasprintf("HTTP_X_REQUEST_ID=%s", rid);
	env[n] = NULL;
	fcgi.envp = env;
	if (api_req_init(&r, &fcgi) < 0) {
		FUZZ_ASSERT(r.replied && fuzz_refusal(r.status));
		goto release;
	}
	FUZZ_ASSERT(!r.replied && r.path && !strchr(r.path, '?') && r.method && r.role);
	rq = r.request_id;
	FUZZ_ASSERT(strlen(rq) <= 128 && strspn(rq, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
						 "0123456789._-") == strlen(rq));
	FUZZ_ASSERT(r.tenant_id >= 0);
	api_dispatch(&r);
	FUZZ_ASSERT(r.replied);
	if (called)
		check_hit(&r);
	else if (!called_auth)
		check_refusal(&r);
release:
	api_req_release(&r);
	for (i = 0; i < n; i++)
		free(env[i]);
done:
	free(first);
	free(tenant);
	free(role);
	free(rid);
	return 0;
}
