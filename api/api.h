#ifndef API_H
#define API_H
#include <stdint.h>
#include <fcgiapp.h>
#include <json-c/json.h>
#include <libpq-fe.h>

#include "buf.h"
#include "pgpool.h"
#include "trace.h"
/*
 * orchard-api: the FastCGI REST service (docs/architecture.md).
 *
 * One process, a pool of request threads serving the FastCGI socket and the
 * connections nginx keeps to it, a second small pool on its own socket for
 * nginx's auth subrequests (serve.c, main.c),
 * a small pool of exec worker threads, and one listener thread that turns
 * PostgreSQL notifications into wake-ups. All state lives in PostgreSQL.
 */

#define API_VERSION "0.1.0"
#define API_BODY_MAX (16u << 20)      /* request bodies past this are 413 */
#define API_FILE_BODY_MAX (96u << 20) /* POST /files: a 64 MiB file as base64 JSON */
#define API_MAX_ID 63

/* Process-wide configuration and shared resources (main.c). */
struct api_server {
	struct orc_pg_pool db;
	char *conninfo;
	char runner[128];             /* "hostname:pid:starttime": owns our jobs (lease.c) */
	int threads;
	int workers;
	int64_t raw_max;              /* raw uploads (files/raw, archive): ORCHARD_API_RAW_MAX */
	const char *driver;           /* sandboxes.driver of new rows: ORCHARD_DRIVER (local) */
};
extern struct api_server api_server;

/*
 * API-local error codes, beyond lib/err.h, for statuses that have no
 * orc_err: they map to HTTP status in reply.c like the others.
 */
enum api_err {
	API_EBADREQ = -100,     /* 400: malformed request (bad JSON, bad query) */
	API_EMETHOD = -101,     /* 405 */
	API_ENOTREADY = -102,   /* 409: sandbox not ready */
	API_EAGENT = -103,      /* 502: agent answered nonsense */
	API_EAGAIN = -104,      /* internal, never replied: a job's turn has not come */
	API_EPRECOND = -105,    /* 412: If-Match does not hold */
	API_ERATE = -106,       /* 429: the tenant's request rate (rate_limit.c) */
};

/* ---- serve.c: a FastCGI listening socket and its request threads ------- */

struct api_listener {
	const char *path;             /* unix socket path, or "host:port" */
	int fd;                       /* the listening socket */
	int ep;                       /* epoll: fd and the idle kept connections */
	int auth_only;                /* answers /_auth and /_auth_agent only */
};

int api_listener_open(struct api_listener *l);
int api_listener_start(struct api_listener *l, int threads);
/* Stop taking new connections (shutdown). */
void api_listener_stop(struct api_listener *l);
/* Requests being handled now, on every listener. */
int api_listener_active(void);
void api_listener_remove(const struct api_listener *l);

/* ---- auth_limit.c: failed key checks per key id and client address ---- */

/* Failures a key id or address may have in a burst (0: no limit). */
void api_auth_limit_init(int burst);
/* 0 when key_id's or addr's failures are used up: refuse without argon2. */
int api_auth_limit_allows(const char *key_id, const char *addr);
void api_auth_limit_failed(const char *key_id, const char *addr);

/* ---- tenant_share.c: one tenant's share of the request threads -------- */

void api_tenant_share_init(int threads, int cap);
/* 0, or ORC_EQUOTA when tenant has cap requests in flight already. */
int api_tenant_share_enter(int64_t tenant);
void api_tenant_share_leave(int64_t tenant);

/* ---- peer.c: who may connect to the sockets ---------------------------- */

/* Read ORCHARD_API_SOCKET_GROUP/_MODE and ORCHARD_API_PEER_UIDS. */
int api_peer_init(void);
/* Give a freshly bound unix socket its group and mode. */
int api_peer_secure_socket(const char *path);
/* 1 when the peer of accepted connection fd may be served. */
int api_peer_allowed(int fd);

/* ---- request.c: one FastCGI request and everything it owns ------------- */

#define API_MAX_QUERY 32
#define API_MAX_OWNED 64

struct api_query_param {
	char *key;
	char *value;
};

struct api_req {
	FCGX_Request *fcgi;
	const char *method;
	const char *path;             /* without query string and /v1 prefix */
	const char *request_id;       /* "" when nginx sent none */
	struct orc_trace trace;       /* this request's span (traceparent, lib/trace.h) */
	int64_t tenant_id;            /* 0: not authenticated */
	const char *key_id;           /* api_keys.id as text, or NULL */
	const char *role;
	const char *id;               /* the {id} path segment, when routed */
	const char *route;            /* the matched route's pattern (metrics), or NULL */
	struct orc_buf body;
	struct api_query_param query[API_MAX_QUERY];
	int nquery;
	int replied;
	int status;                   /* status sent, for the access log */
	/* Allocations released when the request ends (STYLE.md). */
	json_object *owned_json[API_MAX_OWNED];
	int njson;
	PGresult *owned_pg[API_MAX_OWNED];
	int npg;
	void *owned_mem[API_MAX_OWNED];
	int nmem;
	char *path_copy;
	/* Header lines ("Name: value\r\n") every answer to it carries. */
	struct orc_buf headers;
	/* Why it failed (api_fail), for api_reply_failed; "" when unset. */
	char error[512];
};

/* r's error buffer as the (API_ERRBUF(r)) pair lib/ functions fill. */
#define API_ERRBUF(r) (r)->error, sizeof((r)->error)

/* Read params, query and body; a failure has already been replied. */
int api_req_init(struct api_req *r, FCGX_Request *fcgi);
void api_req_release(struct api_req *r);
/* Read what is left of the request's stdin; 1 when all of it has been
 * read, 0 when the connection must not be reused. */
int api_req_end_input(struct api_req *r);
const char *api_req_param(struct api_req *r, const char *name);
/* The last value of a query parameter, or NULL. */
const char *api_req_query(struct api_req *r, const char *key);
/* A boolean query parameter: absent, empty, 0 or false is 0; 1 or true is 1; else 422 (replied). */
int api_req_query_bool(int *out, struct api_req *r, const char *key);
/* Parse the body as a JSON object (400 on failure, replied). */
int api_req_json_body(json_object **out, struct api_req *r);
/* The same for a route whose body is optional: no body at all is {}. */
int api_req_json_body_opt(json_object **out, struct api_req *r);
/*
 * 1 when nginx has closed this request's FastCGI connection: its client went
 * away (fastcgi_ignore_client_abort is off), so no one will read the
 * answer. For long handlers to stop between steps. Never blocks.
 */
int api_req_client_gone(struct api_req *r);
/* Take ownership: released at the end of the request. Return the argument. */
json_object *api_own_json(struct api_req *r, json_object *o);
PGresult *api_own_pg(struct api_req *r, PGresult *res);
void *api_own_mem(struct api_req *r, void *p);
/* Add a header line to whatever answer the request gets (printf-style
 * value; the caller bounds it). */
void api_req_add_header(struct api_req *r, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Write a complete response (status line, headers, body). */
void api_req_write(struct api_req *r, int status, const char *extra_headers,
		   const char *body, size_t len);

/* ---- reply.c: the one place where errors become HTTP ------------------ */

/* Reply 2xx with a JSON body. */
int api_reply_json(struct api_req *r, int status, json_object *o);
/* Reply with {"detail","code","request_id"} for err; returns err. */
int api_reply_error(struct api_req *r, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Same with extra header lines ("Allow: GET\r\n"). */
int api_reply_error_h(struct api_req *r, int err, const char *headers, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/*
 * The error travels with the request (libgit2's git_error_set, curl's
 * failf): a helper that fails returns api_fail(r, err, fmt, ...), which
 * keeps the message in r->error and returns err; the handler answers it
 * with api_reply_failed(r, err). lib/ functions write into API_ERRBUF(r).
 */
int api_fail(struct api_req *r, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Reply err with the message in r->error; returns err. */
int api_reply_failed(struct api_req *r, int err);
/* The HTTP status an error code maps to (for logs and tests). */
int api_err_status(int err);
/* A 200 NDJSON answer: its headers now (nginx passes lines on unbuffered),
 * then lines as they come. */
void api_reply_ndjson_begin(struct api_req *r);
/* One line (s, without its newline), flushed when flush: 0, or ORC_EUNAVAIL
 * when the client has gone. */
int api_reply_ndjson_line(struct api_req *r, const char *s, size_t n, int flush);

/* ---- job_stream.c: an agent's streaming exec answer --------------------- */

/* Where the output lines of a streaming job go as they arrive. */
struct api_job_sink {
	int (*line)(void *arg, const char *s, size_t n);   /* < 0: the client has gone */
	void *arg;
};

struct api_job_stream {
	const struct api_job_sink *sink;
	struct orc_buf line;          /* the line being read */
	struct orc_buf out, err;      /* decoded output, at most cap bytes each */
	size_t cap;
	json_object *exit;            /* the "exit" line, once read */
	char error[512];              /* an "error" line or a malformed stream */
	int client_gone;
	const char *job_id;           /* kept output is stored for readers */
	size_t flushed[2];            /* bytes of out, err stored so far */
	int64_t flushed_ms;           /* when last stored (the start at first) */
};

void api_job_stream_init(struct api_job_stream *s, const struct api_job_sink *sink, size_t cap,
			 const char *job_id);
/* orc_agent_sink_fn: feed a piece of the answer. */
int api_job_stream_feed(void *arg, const char *data, size_t n);
/* After the call: the exit line with "stdout"/"stderr" (the bytes) added,
 * owned by the caller; NULL (and s->error says why) when none came. */
json_object *api_job_stream_result(struct api_job_stream *s);
void api_job_stream_release(struct api_job_stream *s);
/* orc_agent_req.tick: store the output kept since the last time for
 * attached readers (job_output.c), when API_JOB_OUTPUT_FLUSH_MS have passed
 * since the job started or since the last time. */
#define API_JOB_OUTPUT_FLUSH_MS 200
int api_job_stream_tick(void *arg);

/* job_output.c: a running job's output, readable from any offset. Append
 * out_n bytes of stdout at out_off and err_n bytes of stderr at err_off
 * (either may be 0) in one statement, and wake readers. */
void api_job_output_append(const char *job_id, size_t out_off, const char *out, size_t out_n,
			   size_t err_off, const char *err, size_t err_n);
int api_job_stream_get(struct api_req *r);          /* GET /jobs/{id}/stream */

/* ---- rate_limit.c: per-tenant token buckets (off when per_minute is 0) -- */

void api_rate_limit_init(int64_t per_minute, int64_t burst);
/* Take a token of the request's tenant: 0, or < 0 with the 429 replied.
 * Adds the RateLimit-* headers to the answer either way. */
int api_rate_limit_take(struct api_req *r);

/* ---- idempotency.c: Idempotency-Key bound to its first body ------------ */

/* Bind key (in scope: "sandbox", "exec", "fork") to the request's body,
 * or check it is bound to this body: 0, or < 0 with the 422 (another
 * body) or the error replied. db: a connection held, or NULL. */
int api_idempotency_bind(struct api_req *r, PGconn *db, const char *scope, const char *key);
/* Mark the answer as the replay of an earlier one (Idempotent-Replayed). */
void api_idempotency_replayed(struct api_req *r);
/* Forget key's binding: the request it came with was refused and wrote
 * nothing (a 429), so the key is free again. */
void api_idempotency_unbind(struct api_req *r, const char *scope, const char *key);

/* ---- router.c ---------------------------------------------------------- */

typedef int (*api_handler)(struct api_req *r);
void api_dispatch(struct api_req *r);
/* The auth socket's dispatch: /_auth and /_auth_agent, anything else 404. */
void api_dispatch_auth(struct api_req *r);

/* ---- handlers ---------------------------------------------------------- */

int api_auth_handle(struct api_req *r);              /* auth.c */
int api_root_get(struct api_req *r);                 /* service.c */
int api_health_get(struct api_req *r);
int api_ready_get(struct api_req *r);                /* resources.c */
int api_resources_get(struct api_req *r);
int api_stats_get(struct api_req *r);                /* stats.c */
int api_sandbox_create(struct api_req *r);           /* sandbox_create.c */
int api_batch_create(struct api_req *r);             /* batch_create.c */
int api_batch_wait(struct api_req *r);               /* batch_wait.c */
int api_sandbox_list(struct api_req *r);             /* sandboxes.c */
int api_sandbox_get(struct api_req *r);
int api_sandbox_wait(struct api_req *r);
int api_sandbox_delete(struct api_req *r);
int api_sandbox_heartbeat(struct api_req *r);
/*
 * The rows of sql, a query of the tenant's sandboxes with $1 tenant_id and
 * $2.. the nargs (at most API_SANDBOX_ROWS_ARGS) strings of args, into *out
 * (the caller PQclear()s it); ORC_ENOTFOUND when there are none. Runs on
 * db, or (db NULL) on a connection of the pool held for the query only.
 */
#define API_SANDBOX_ROWS_ARGS 3
int api_sandbox_rows(PGresult **out, PGconn *db, int64_t tenant_id, const char *sql, int nargs,
		     const char *const *args);
int api_exec_post(struct api_req *r);                /* exec.c */
int api_job_get(struct api_req *r);                  /* jobs.c */
int api_job_wait(struct api_req *r);
int api_trajectory_get(struct api_req *r);           /* trajectory.c */
int api_trajectory_bulk(struct api_req *r);
int api_trajectory_replay(struct api_req *r);         /* replay.c */
int api_job_list(struct api_req *r);                 /* job_list.c */
int api_job_cancel(struct api_req *r);               /* job_cancel.c */
int api_tenant_list(struct api_req *r);              /* tenants.c (admin) */
int api_tenant_create(struct api_req *r);
int api_tenant_patch(struct api_req *r);
int api_tenant_get(struct api_req *r);
/* tenant_delete.c: DELETE /tenants/{name}[?force=true]. */
int api_tenant_delete(struct api_req *r);
int api_key_list(struct api_req *r);                 /* keys.c (admin) */
int api_key_revoke(struct api_req *r);
int api_key_create(struct api_req *r);
int api_files_upload(struct api_req *r);             /* files.c (base64 JSON) */
int api_files_download(struct api_req *r);
int api_files_list(struct api_req *r);
int api_files_stat(struct api_req *r);
int api_files_mkdir(struct api_req *r);
int api_files_delete(struct api_req *r);
int api_files_raw_put(struct api_req *r);            /* files_raw.c (streams) */
int api_files_raw_get(struct api_req *r);
int api_archive_put(struct api_req *r);
int api_archive_get(struct api_req *r);
int api_git_apply(struct api_req *r);                /* git.c */
int api_git_diff(struct api_req *r);
int api_git_reset(struct api_req *r);

/*
 * Routes whose handler reads the request body itself, as a stream
 * (router.c); for all others request.c reads it whole before dispatch.
 */
int api_route_streams(const char *method, const char *path);
/* The largest request body of a route: API_BODY_MAX, or API_FILE_BODY_MAX
 * for the base64 upload, whose handler never parses the content as a tree. */
size_t api_route_body_max(const char *method, const char *path);

/* ---- auth.c: the verified-key cache ----------------------------------- */

struct api_auth {
	char tenant[24];              /* tenants.id */
	char key[24];                 /* api_keys.id */
	char role[8];                 /* "user" | "admin" */
};
/* Check the request's X-API-Key / Authorization: Bearer key through the
 * verified-key cache; 401 or 403 (replied) when it is missing or bad. */
int api_auth_check(struct api_auth *out, struct api_req *r);
/* The same for a key found elsewhere (NULL: none sent, 401). */
int api_auth_check_key(struct api_auth *out, struct api_req *r, const char *key);
/* /_auth_agent (auth_agent.c): the key check plus the sandbox named by the
 * original URI, answering with its agent's upstream and token. */
int api_auth_agent_handle(struct api_req *r);
/* The sandbox id of an agent route's URI ("[/v1]/sandboxes/<id>/<route>")
 * into out, returning the route's index (API_AGENT_ROUTE_PTY: exec/pty);
 * ORC_EINVALID for any other URI. */
#define API_AGENT_ROUTE_PTY 2
int api_agent_uri_parse(char out[API_MAX_ID + 1], const char *uri);
/* /_pty_end (pty_end.c): nginx's post_action after a PTY connection. */
int api_pty_end_handle(struct api_req *r);

void api_auth_init(void);
/* NOTIFY orchard_key: drop the cached entries of key_id (revocation), or
 * of every key when key_id is NULL (notifications may have been missed). */
void api_auth_notified(const char *key_id);

/* key_revoke.c: a revoked key's open PTY sessions and agent streams end
 * (the listener queues each revoked key_id; one thread tells the agents). */
int api_key_revoke_start(void);
/* NOTIFY orchard_key: queue key_id; NULL (the listener (re)connected):
 * queue the keys revoked in the last hour. */
void api_key_revoke_notified(const char *key_id);
/* 1 when the key with api_keys.id id (a request's key_id) has been revoked
 * since this process started: a long stream it holds ends. */
int api_key_revoked(const char *id);

/* ---- notify.c: LISTEN/NOTIFY and bounded waits ------------------------ */

/* API_CHAN_JOB_OUTPUT: a piece of a job's output came, or the job changed. */
enum api_channel { API_CHAN_SANDBOX, API_CHAN_JOB, API_CHAN_CHECKPOINT, API_CHAN_JOB_OUTPUT,
		   API_CHAN_COUNT };

/*
 * A waiter snapshots the generation of its (channel, id) bucket before it
 * reads the row, so a notification between the read and the wait is never
 * lost. Waits are bounded; after a wake-up the caller re-reads the row.
 */
struct api_waiter {
	int chan;
	unsigned bucket;
	uint64_t gen;
	uint64_t epoch;
};

int api_notify_start(const char *conninfo);
void api_waiter_init(struct api_waiter *w, enum api_channel chan, const char *id);
/* Wait until the bucket changes or deadline_ms (orc_mono_ms) passes;
 * returns 1 when woken, 0 on timeout. Re-arms the waiter. */
int api_waiter_wait(struct api_waiter *w, int64_t deadline_ms);
/* Wake waiters of (chan, id) in this process (also done by NOTIFY). */
void api_notify_local(enum api_channel chan, const char *id);

/* ---- views.c: rows to JSON -------------------------------------------- */

/* SELECT lists matching the view functions. */
extern const char api_sandbox_cols[];
extern const char api_job_cols[];
json_object *api_sandbox_view(PGresult *res, int row);
/* Where routes read a view's row by name (views.c has every column). */
enum { API_SANDBOX_COL_ID = 0, API_SANDBOX_COL_STATE = 8 };
enum { API_JOB_COL_ID = 0, API_JOB_COL_SANDBOX = 1, API_JOB_COL_STATUS = 3 };
json_object *api_job_view(PGresult *res, int row);
/* A job without its output (stdout, stderr), from api_job_summary_cols. */
extern const char api_job_summary_cols[];
json_object *api_job_summary_view(PGresult *res, int row);
/* Status strings derived from the sandbox state. */
const char *api_sandbox_status(const char *state);

/* ---- exec.c / lanes.c: running jobs ----------------------------------- */

/* Output kept per stream of a job: max_output_bytes of the request, by
 * default API_OUTPUT_DEFAULT, at most API_OUTPUT_MAX (docs/openapi.yaml). */
#define API_OUTPUT_DEFAULT (4 << 20)
#define API_OUTPUT_MAX (16 << 20)

/*
 * The columns of a claimed job, as claim() (job_run.c) and the statement
 * accepting a job (exec.c) answer them for api_job_run_claimed.
 */
enum {
	API_CLAIM_ADDRESS, API_CLAIM_TOKEN, API_CLAIM_COMMAND, API_CLAIM_CWD, API_CLAIM_ENV,
	API_CLAIM_LOGIN_SHELL, API_CLAIM_STDIN, API_CLAIM_TIMEOUT, API_CLAIM_SANDBOX_ENV,
	API_CLAIM_WORKDIR, API_CLAIM_MAX_OUTPUT, API_CLAIM_CWD_STRICT, API_CLAIM_VERDICT,
	API_CLAIM_NCOLS,
};

int api_lanes_start(int workers);
/*
 * Queue job_id (seq: its jobs.seq). A serial job queues among this
 * process's serial jobs of sandbox_id and runs once every serial job of the
 * sandbox accepted before it has ended, on any replica; any other job has a
 * lane of its own and runs as soon as it is claimed. With sync set the
 * caller runs it itself (api_lane_run); otherwise a worker thread does.
 */
struct api_lane_entry;
int api_lane_enqueue(struct api_lane_entry **out, const char *sandbox_id,
		     const char *job_id, int64_t seq, const char *request_id, int sync,
		     int serial);
/*
 * Give a job claimed when it was accepted (claimed: that statement's answer,
 * in claim()'s layout) to the workers to run; on success they own claimed.
 */
int api_lane_hand_over(const char *sandbox_id, const char *job_id, int64_t seq,
		       const char *request_id, PGresult *claimed);
/*
 * Run a sync entry on this thread when its turn comes (its output streamed
 * to sink, if not NULL). 1: it ran or never will (e is freed); 0: its turn
 * had not come by deadline_ms, and the workers run it instead (e is theirs).
 * *out (if not NULL) gets the finished job's row (api_job_cols) when this
 * thread ran and stored it, else NULL: then read the job.
 */
int api_lane_run(PGresult **out, struct api_lane_entry *e, int64_t deadline_ms,
		 const struct api_job_sink *sink);
/* A job of sandbox_id ended or the sandbox changed (notify.c): try its
 * waiting jobs now. */
void api_lanes_wake(const char *sandbox_id);
/* The same for every sandbox (notifications may have been lost). */
void api_lanes_wake_all(void);
/* NOTIFY orchard_lane/orchard_sandbox: api_lanes_wake, or with NULL
 * (notifications may have been missed) api_lanes_wake_all. */
void api_lanes_notified(const char *sandbox_id);
/* jobs.c: the tenant's job (the caller PQclear()s); ORC_ENOTFOUND. */
int api_job_fetch(PGresult **out, int64_t tenant_id, const char *job_id);
int api_job_finished(PGresult *res);
/* Re-read the job until it finishes or deadline_ms passes; *out is the
 * last row read, finished or not. */
int api_job_wait_until(PGresult **out, int64_t tenant_id, const char *job_id, int64_t deadline_ms);
/*
 * Run one accepted job: claim it, call the agent, store the result.
 * API_EAGAIN (nothing done): its turn has not come, or the database is
 * unavailable; try again after a wake-up (lanes.c). *out (if not NULL)
 * gets the stored job's row (api_job_cols), or stays NULL.
 */
int api_job_run(PGresult **out, const char *job_id, const char *request_id);
/* The same, the output streamed to sink as it comes (job_stream.c). */
int api_job_run_stream(PGresult **out, const char *job_id, const char *request_id,
		       const struct api_job_sink *sink);
/*
 * Run a job that the statement accepting it already claimed (exec.c): job
 * is that statement's answer, in claim()'s layout (job_run.c); the caller
 * keeps it. Otherwise as api_job_run_stream (sink may be NULL).
 */
int api_job_run_claimed(PGresult **out, PGresult *job, const char *job_id, const char *request_id,
			const struct api_job_sink *sink);
/* Fail a job that is still queued (it will never run here). */
void api_job_abandon(const char *job_id, const char *why);

/* ---- exec_limit.c: backpressure on exec (sql/migrations/033) ---------- */

/*
 * The limits of a tenant as a query (columns id, name, sb, tn, qsb, qtn:
 * max_execs_per_sandbox, max_execs, max_queued_execs_per_sandbox,
 * max_queued_execs, each NULL when none), its NULL columns taking the
 * server defaults d1-d4 (parameters, from api_exec_limit_params).
 */
#define API_EXEC_LIMIT_SQL(tenant, d1, d2, d3, d4) \
	"SELECT x.id, x.name, coalesce(x.max_execs_per_sandbox, " d1 "::int) AS sb," \
	" coalesce(x.max_execs, " d2 "::int) AS tn," \
	" coalesce(x.max_queued_execs_per_sandbox, " d3 "::int) AS qsb," \
	" coalesce(x.max_queued_execs, " d4 "::int) AS qtn FROM tenants x WHERE x.id = " tenant
/* Sandbox s (a sandboxes row) could start a job now, under limits lim. */
#define API_EXEC_SLOT_FREE_SQL(s) \
	s ".state = 'ready' AND NOT " s ".paused AND NOT " s ".pause_desired AND (lim.sb IS NULL" \
	" OR (SELECT count(*) FROM jobs r WHERE r.sandbox_id = " s ".id AND r.status = 'running')" \
	" < lim.sb)"
/* Read the ORCHARD_EXEC_* defaults; ORC_EINVALID (logged) for a bad one. */
int api_exec_limit_init(void);
/* The four defaults as query parameters (NULL: none). */
void api_exec_limit_params(const char *params[4]);
/* BEGIN and take the exec lock of the tenant (of job_id's tenant). On
 * failure nothing is left open. The caller commits or rolls back. */
int api_exec_limit_lock(PGconn *db, int64_t tenant_id);
int api_exec_limit_lock_job(PGconn *db, const char *job_id);
/*
 * Under the tenant's exec lock: may a new exec of sandbox r->id run at
 * once (*run_now_out 1), or wait (0)? ORC_EQUOTA (api_fail names the
 * bound) when it would wait and a queue bound is reached.
 */
int api_exec_limit_admit(int *run_now_out, PGconn *db, struct api_req *r);
/* 429 with Retry-After for an api_exec_limit_admit refusal (r->error). */
int api_reply_exec_limit(struct api_req *r);

/* ---- job_failure.c: what ended a job (sql/migrations/023) ------------- */

/* The class of a job the agent answered for (NULL: none); "canceled" is
 * the storing statement's, which knows about the cancel request. */
const char *api_job_failure(const char *status, int timed_out, const char *signal,
			    int oom_killed, int pids_limited);
/* The agent call of job_id broke off: "sandbox_lost" when its sandbox
 * leaves 'ready' within a short wait (the controller saw it die), else
 * "agent_error". */
const char *api_job_lost_or_agent(const char *job_id);

/* ---- sandbox_agent.c: reaching a sandbox's agent from a route -------- */

/* The caller's ready sandbox's agent. Strings owned by the request. */
struct api_agent {
	const char *address;          /* "unix:/path" or "http://host:port" */
	const char *token;
};

/* Why a sandbox cannot take a call: its state ("pending", "paused",
 * "failed", ...) and state_message ("" when none). */
struct api_sandbox_state {
	char state[32];
	char message[480];
};

/* Fill *out from a row's state and message columns. */
void api_sandbox_state_set(struct api_sandbox_state *out, const char *state, const char *message);
/*
 * Reply 409 not_ready for sandbox r->id in state *s: paused (resume it),
 * failed (with its message, then failed_suffix), or not ready yet (wait).
 */
int api_reply_not_ready(struct api_req *r, const struct api_sandbox_state *s,
			const char *failed_suffix);

/*
 * Look up sandbox id of tenant: 0 with *out when it is ready and has an
 * agent; ORC_ENOTFOUND (none, another tenant's, being deleted);
 * API_ENOTREADY with the state in *state_out (may be NULL). Touches
 * last_activity_at of a ready sandbox. The strings in *out are malloc'd
 * (the caller frees).
 */
int api_agent_lookup(char **address_out, char **token_out, struct api_sandbox_state *state_out,
		     int64_t tenant_id, const char *id);
/* api_agent_lookup for r->id and the caller's tenant; 404/409/503 replied. */
int api_agent_get(struct api_agent *out, struct api_req *r);
/*
 * One JSON call to the agent (path with query, body may be NULL). 0 with
 * the agent's status and body; a transport failure is replied (502, or
 * 413 when the answer passes out->max) and returned.
 */
int api_agent_json(struct orc_buf *out, long *status_out, struct api_req *r,
		   const struct api_agent *a, const char *method, const char *path,
		   const char *body, size_t body_len, long timeout_ms);
/* The agent's {"error": "..."} message (its first API_AGENT_MESSAGE_MAX
 * bytes), or a placeholder, as a new JSON string the caller owns. */
#define API_AGENT_MESSAGE_MAX 1023
json_object *api_agent_message(const char *body, size_t len);
/* The orc_err for an agent's error status (404 -> ORC_ENOTFOUND, ...). */
int api_agent_status_err(long status);
/* Reply with the agent's error status and message mapped to ours. */
int api_reply_agent_error(struct api_req *r, long status, const struct orc_buf *body);
/* Pass the agent's 200 answer through as ours; any other status as above. */
int api_reply_agent(struct api_req *r, long status, const struct orc_buf *body);
/*
 * Record one event of kind on r->id (with the caller's key and request id)
 * and touch the sandbox's last_activity_at, in one statement. data is
 * serialised, not taken.
 */
int api_event_record(struct api_req *r, const char *kind, json_object *data);

/* ---- quota.c ---------------------------------------------------------- */

/* capacity.c: a 422 (ORC_EINVALID, api_fail) for a size no node can hold. */
int api_capacity_check(PGconn *db, int64_t cpu_millis, int64_t memory_bytes, struct api_req *r);
/*
 * Inside the caller's transaction: lock the row of r's tenant and check
 * that n new sandboxes of cpu_millis and memory_bytes each fit its quotas,
 * all or none. ORC_EQUOTA with a message (api_fail) naming the quota and
 * the numbers, and *retry_out the seconds after which a retry may fit.
 */
int api_quota_check(long *retry_out, PGconn *db, struct api_req *r, int n, int64_t cpu_millis,
		    int64_t memory_bytes);
/* The 429 of a refused quota (the message in r->error), with Retry-After: retry_s. */
int api_reply_quota(struct api_req *r, long retry_s);

/* ---- lease.c: runner leases ------------------------------------------ */

#define LEASE_S 30            /* a job's lease outlives its runner by this */
#define LEASE_RENEW_S 10      /* the runner renews its leases this often */
#define LEASE_REAP_S 10       /* expired leases are looked for this often */

/* Start the thread that renews our leases and reaps expired ones. */
int api_lease_start(void);
/* Fail every open job whose lease expired (its runner died); *count_out
 * (may be NULL) gets how many. */
int api_lease_reap(PGconn *db, int *count_out);

/* ---- cursor.c: keyset pagination ------------------------------------- */

/* SQL for a row's cursor position (epoch microseconds of created_at). */
#define API_CURSOR_US(col) "(extract(epoch FROM " col ") * 1000000)::bigint"

struct api_cursor {
	char us[24];          /* created_at in epoch microseconds */
	const char *id;       /* points into the parsed string */
};
/* "<us>_<id>" as returned in next_cursor; ORC_EINVALID otherwise. */
int api_cursor_parse(struct api_cursor *out, const char *s);

/* ---- metrics.c: GET /metrics (docs/observability.md) ------------------- */

int api_metrics_init(void);
int api_metrics_get(struct api_req *r);
/* One finished request, ms after it was accepted (serve.c). */
void api_metrics_request(const struct api_req *r, int64_t ms);
/* One FastCGI connection accepted (serve.c). */
void api_metrics_connection(int auth_only);
/* One finished exec job: "succeeded" or "failed", agent call time (job_run.c). */
void api_metrics_exec(const char *status, int64_t ms);
/* One argon2id check of a key secret (auth.c). */
void api_metrics_key_verification(void);

/* ---- misc helpers ----------------------------------------------------- */

/* ?timeout= in seconds: dflt when absent, clamped to max; replies 422 on
 * garbage. */
int api_query_timeout(int64_t *out, struct api_req *r, int64_t dflt, int64_t max);

/* ids in paths and bodies: DNS labels of at most 63 characters. */
int api_valid_id(const char *s);
#endif
