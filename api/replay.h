#ifndef API_REPLAY_H
#define API_REPLAY_H
#include <stdint.h>
#include <json-c/json.h>

#include "api.h"
#include "traj_compare.h"
/*
 * POST /trajectories/replay (docs/trajectory.md, "Replay in the API"):
 * replay.c is the route (options, body, how many replays may run at once),
 * replay_run.c replays one trajectory, and replay_subreq.c runs the
 * ordinary route handlers in process for it, so the replay goes through
 * exactly what a client's requests would: quota, validation, events.
 */

/* ---- replay_subreq.c: a route handler called in process --------------- */

/* What a sub-request asks for. */
struct api_subreq_call {
	const char *method;           /* for the handler and logs */
	const char *path;             /* routed form, e.g. "/sandboxes/{id}/exec" */
	api_handler handler;
	const char *id;               /* the {id} segment, or NULL */
	const char *query_key;        /* one query parameter, or NULL */
	const char *query_value;
	const char *body;             /* may be NULL */
	size_t body_len;
	int stream;                   /* hand the body over as the FastCGI input
	                               * stream (ROUTE_STREAM handlers) */
};

/* What the handler answered. */
struct api_subreq {
	long status;
	struct orc_buf body;
	json_object *json;            /* the body parsed, when it is a JSON object */
};
#define API_SUBREQ_INIT { 0, ORC_BUF_INIT, NULL }

/*
 * Run call->handler as parent's caller (tenant, key, role, request id)
 * would through HTTP, capturing its answer in *out (release it). Returns
 * 0 when the handler answered (any status); ORC_ERROR when its answer could
 * not be captured (too large, or none).
 */
int api_subreq_run(struct api_subreq *out, struct api_req *parent, const struct api_subreq_call *call);
void api_subreq_release(struct api_subreq *s);
/* api_subreq_run of handler on sandbox (or checkpoint) id with a JSON
 * body (or none). */
int api_subreq_json(struct api_subreq *out, struct api_req *parent, const char *method,
		    const char *path, api_handler handler, const char *id, json_object *body);
/* GET /sandboxes/{id}/wait?timeout=timeout_s: the sandbox as the wait
 * ended (out->json; "ready" in its status when it came up). */
int api_subreq_wait(struct api_subreq *out, struct api_req *parent, const char *id, int64_t timeout_s);

/* ---- replay_run.c: one trajectory ------------------------------------- */

struct api_replay_opts {
	const char *image;            /* NULL: the recorded one */
	enum orc_traj_compare compare;
	int keep;
	int64_t ready_timeout_s;
	int64_t deadline_ms;          /* orc_mono_ms(): no step starts after it */
};

/*
 * Replay t into a fresh sandbox of r's caller. 0 with *out the report
 * (lib/traj_compare.h; whatever the steps came to, and also when the
 * sandbox never became ready). When the create itself is refused (quota,
 * validation), that answer is replied on r and returned: nothing exists.
 */
int api_replay_run(json_object **out, struct api_req *r, const struct orc_traj *t,
		   const struct api_replay_opts *o);
#endif
