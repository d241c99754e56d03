#ifndef API_CHECKPOINT_H
#define API_CHECKPOINT_H
#include <stdint.h>
#include <stddef.h>
#include <json-c/json.h>
#include <libpq-fe.h>

#include "api.h"
/*
 * Checkpoints, forks and pause/resume (docs/checkpoints.md), shared by
 * checkpoints.c, checkpoint_fork.c and sandbox_pause.c.
 */

/* SELECT list of api_checkpoint_view(); queries alias checkpoints as c. */
extern const char api_checkpoint_cols[];
json_object *api_checkpoint_view(PGresult *res, int row);

/* 0 when the driver has checkpoints; else the 422 is replied. */
int api_checkpoint_supported(struct api_req *r);
/* The tenant's live checkpoint id (api_checkpoint_cols); ORC_ENOTFOUND. */
int api_checkpoint_fetch(PGresult **out, int64_t tenant_id, const char *id);
/* Inside a transaction: lock r's tenant, check max_checkpoints and
 * max_checkpoint_bytes; ORC_EQUOTA with a message (api_fail) naming the quota. */
int api_checkpoint_quota(PGconn *db, struct api_req *r);
/*
 * Write a pending checkpoint of the caller's ready sandbox (and its
 * event) with the quota check, in one transaction. *out: the row.
 * API_ENOTREADY when no ready sandbox of that id is the caller's.
 */
int api_checkpoint_begin(PGresult **out, struct api_req *r, const char *sandbox_id, const char *name,
			 json_object *labels, int64_t ttl, const char *kind);
/* The error reply for api_checkpoint_begin's err. */
int api_checkpoint_reply_begin_error(struct api_req *r, int err, const char *sandbox_id);
/* Re-read checkpoint id until it leaves 'pending' or deadline_ms passes. */
int api_checkpoint_wait(PGresult **out, int64_t tenant_id, const char *id, int64_t deadline_ms);
/* Answer with a checkpoint that api_checkpoint_wait returned. */
int api_checkpoint_reply_done(struct api_req *r, PGresult *res);

/* The ready checkpoint of step `step` of the tenant's sandbox (*out is
 * owned by r); else the 404/409/422 is replied and returned. */
int api_checkpoint_at_step(char **out, struct api_req *r, const char *sandbox_id, int64_t step);

/* Per-step checkpoint policy (step_policy.c): fields of a create or PATCH
 * body; NULL/0 where not given. */
struct api_step_policy {
	const char *mode;         /* "none", "every_step" */
	int64_t keep, ttl;
	int given;
};
int api_step_policy_parse(struct api_step_policy *p, json_object *body, struct api_req *r);
/* The policy field `field` of body: *out "none", "every_step", or NULL
 * when absent or null; ORC_EINVALID (api_fail) for anything else. */
int api_step_mode_parse(const char **out, json_object *body, const char *field, struct api_req *r);
/* Inside the create's transaction: store p (retention defaults applied). */
int api_step_policy_store(PGconn *db, const char *sandbox_id, int64_t tenant_id,
			  const struct api_step_policy *p);
/* Before a step reaches the agent: wait until the sandbox's pending step
 * checkpoints are captured (bounded), so they hold the state of the steps
 * before. */
void api_step_barrier(struct api_req *r, const char *sandbox_id);
/* NOTIFY orchard_checkpoint_taken: checkpoint id's state is captured for
 * good (its row may still be pending); wakes the barriers waiting on it. */
void api_step_taken(const char *id);
int api_sandbox_patch(struct api_req *r);
int api_sandbox_evaluate(struct api_req *r);    /* evaluate.c */

int api_checkpoint_create(struct api_req *r);   /* checkpoints.c */
int api_checkpoint_list(struct api_req *r);
int api_checkpoint_get(struct api_req *r);
int api_checkpoint_delete(struct api_req *r);
int api_checkpoint_fork(struct api_req *r);     /* checkpoint_fork.c */
int api_sandbox_fork(struct api_req *r);
int api_sandbox_pause(struct api_req *r);       /* sandbox_pause.c */
int api_sandbox_resume(struct api_req *r);
/* exec's "resume": true: resume r->id first when it is paused. 0 to go
 * on (nothing replied), else the error was replied. */
int api_exec_resume(struct api_req *r, json_object *body);
#endif
