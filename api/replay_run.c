/*
 * Replaying one trajectory in the api (replay.h): create a sandbox like
 * POST /sandboxes, wait for it like GET /sandboxes/{id}/wait, re-apply
 * each step through the exec, files, git and archive routes (in process,
 * replay_subreq.c) so the new sandbox records its own trajectory, judge
 * each outcome with lib/traj_compare.c (the judge orchardctl replay uses),
 * and delete the sandbox unless asked to keep it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "err.h"
#include "json.h"
#include "log.h"
#include "replay.h"
#include "strutil.h"
#include "traj_replay.h"
#include "xalloc.h"

#define JOB_WAIT_MARGIN_S 90          /* past a step's own timeout */

struct replay_ctx {
	struct api_req *r;
	const struct api_replay_opts *o;
	const char *sid;                  /* the new sandbox (owned by sid_buf) */
	char sid_buf[API_MAX_ID + 1];
};

/* ---- the sandbox ----------------------------------------------------------------- */

/* A refused create is the replay request's answer: its status and code,
 * the detail saying what it was for. */
static int reply_refused(struct api_req *r, const struct api_subreq *a)
{
	json_object *o = json_object_new_object();
	const char *s;
	char *detail;
	size_t len = 0;

	detail = xasprintf("cannot create a sandbox to replay into: %s",
			   orc_json_str_or(a->json, "detail", "the create was refused"));
	json_object_object_add(o, "detail", orc_json_new_text(detail, strlen(detail)));
	json_object_object_add(o, "code",
			       json_object_new_string(orc_json_str_or(a->json, "code", "internal")));
	json_object_object_add(o, "request_id", json_object_new_string(r->request_id));
	s = orc_json_str(o, &len);
	api_req_write(r, (int)a->status, a->status == 503 || a->status == 429 ? "Retry-After: 5\r\n" : NULL,
		      s, len);
	json_object_put(o);
	free(detail);
	return a->status == 429 ? ORC_EQUOTA : ORC_EINVALID;
}

/*
 * A fork's replay starts from its parent's checkpoint while that exists
 * (issue 21, docs/checkpoints.md): 1 with c->sid set, or 0 to create from
 * the image. rep's "start" says which, and why. labels: the replay's.
 */
static int start_from_checkpoint(struct replay_ctx *c, struct orc_traj_report *rep,
				 json_object *header, json_object *labels)
{
	json_object *ff = orc_json_field(header, "forked_from"), *start, *body, *ids = NULL;
	const char *ck = orc_json_str_or(ff, "checkpoint_id", NULL), *why = NULL;
	struct api_subreq a = API_SUBREQ_INIT;
	char *reason = NULL;
	int ok = 0;

	if (!ck)
		return 0;
	start = json_object_new_object();
	json_object_object_add(start, "checkpoint_id", json_object_new_string(ck));
	json_object_object_add(start, "parent_sandbox_id",
			       json_object_get(orc_json_field(ff, "sandbox_id")));
	json_object_object_add(start, "parent_step", json_object_get(orc_json_field(ff, "step")));
	if (c->o->image) {
		why = "an image was given: started from it, without the parent's state";
	} else {
		body = json_object_new_object();
		json_object_object_add(body, "count", json_object_new_int(1));
		if (labels)
			json_object_object_add(body, "labels", json_object_get(labels));
		if (api_subreq_json(&a, c->r, "POST", "/checkpoints/{id}/fork", api_checkpoint_fork, ck,
				    body) == 0 && a.status == 200 &&
		    json_object_object_get_ex(a.json, "sandbox_ids", &ids) &&
		    json_object_array_length(ids) == 1 &&
		    strlen(json_object_get_string(json_object_array_get_idx(ids, 0))) < sizeof(c->sid_buf)) {
			snprintf(c->sid_buf, sizeof(c->sid_buf), "%s",
				 json_object_get_string(json_object_array_get_idx(ids, 0)));
			ok = 1;
		} else {
			reason = xasprintf("the parent's checkpoint cannot be forked (%s): started from the "
					   "image, without the parent's prefix",
					   orc_json_str_or(a.json, "detail", "no answer"));
		}
		json_object_put(body);
	}
	json_object_object_add(start, "from", json_object_new_string(ok ? "checkpoint" : "image"));
	if (why || reason)
		json_object_object_add(start, "reason", json_object_new_string(reason ? reason : why));
	json_object_object_add(rep->obj, "start", start);
	free(reason);
	api_subreq_release(&a);
	if (!ok)
		return 0;
	c->sid = c->sid_buf;
	orc_traj_report_sandbox(rep, c->sid);
	orc_log(ORC_LOG_INFO, "replay started from a checkpoint", "sandbox_id", c->sid, "replay_of",
		orc_json_str_or(header, "sandbox_id", ""), "checkpoint_id", ck, NULL);
	return 1;
}

static int create_sandbox(struct replay_ctx *c, struct orc_traj_report *rep, const struct orc_traj *t)
{
	struct api_subreq a = API_SUBREQ_INIT;
	struct api_subreq_call call;
	json_object *header = json_object_array_get_idx(t->lines, 0);
	json_object *body = orc_traj_create_body(orc_json_field(header, "sandbox"), c->o->image,
						 t->sandbox_id);
	const char *sid;
	int err;

	if (start_from_checkpoint(c, rep, header, orc_json_field(body, "labels"))) {
		json_object_put(body);
		return 0;
	}
	memset(&call, 0, sizeof(call));
	call.method = "POST";
	call.path = "/sandboxes";
	call.handler = api_sandbox_create;
	call.body = orc_json_str(body, &call.body_len);
	if ((err = api_subreq_run(&a, c->r, &call)) < 0) {
		err = api_reply_error(c->r, err, "cannot create a sandbox to replay into");
		goto done;
	}
	if (a.status != 200) {
		err = reply_refused(c->r, &a);
		goto done;
	}
	sid = orc_json_str_or(a.json, "sandbox_id", NULL);
	if (!sid || strlen(sid) >= sizeof(c->sid_buf)) {
		err = api_reply_error(c->r, ORC_ERROR, "the sandbox create answered without a sandbox_id");
		goto done;
	}
	snprintf(c->sid_buf, sizeof(c->sid_buf), "%s", sid);
	c->sid = c->sid_buf;
	orc_traj_report_sandbox(rep, c->sid);
	orc_log(ORC_LOG_INFO, "replay started", "sandbox_id", c->sid, "replay_of", t->sandbox_id, NULL);
done:
	api_subreq_release(&a);
	json_object_put(body);
	return err;
}

/* Wait until the new sandbox is ready: 0, or why not (api_fail on c->r). */
static int wait_ready(struct replay_ctx *c)
{
	struct api_subreq a = API_SUBREQ_INIT;
	int err;

	if ((err = api_subreq_wait(&a, c->r, c->sid, c->o->ready_timeout_s)) < 0)
		return api_fail(c->r, err, "waiting for sandbox %s failed", c->sid);
	err = 0;
	if (a.status == 200 && strcmp(orc_json_str_or(a.json, "status", ""), "ready"))
		err = api_fail(c->r, ORC_ERROR, "sandbox %s did not become ready (status %s%s%s)",
			       c->sid, orc_json_str_or(a.json, "status", "?"),
			       orc_json_field(a.json, "status_message") ? ": " : "",
			       orc_json_str_or(a.json, "status_message", ""));
	else if (a.status != 200)
		err = api_fail(c->r, ORC_ERROR, "sandbox %s did not become ready: %s (HTTP %ld)",
			       c->sid, orc_json_str_or(a.json, "detail", "no detail"), a.status);
	api_subreq_release(&a);
	return err;
}

static void delete_sandbox(struct replay_ctx *c)
{
	struct api_subreq a = API_SUBREQ_INIT;

	if (api_subreq_json(&a, c->r, "DELETE", "/sandboxes/{id}", api_sandbox_delete, c->sid, NULL) < 0 ||
	    a.status != 200)
		orc_log(ORC_LOG_WARN, "replay: cannot delete its sandbox", "sandbox_id", c->sid, NULL);
	api_subreq_release(&a);
}

/* ---- steps ----------------------------------------------------------------------------- */

static int job_done(json_object *job)
{
	const char *st = orc_json_str_or(job, "status", "queued");

	return strcmp(st, "queued") && strcmp(st, "running");
}

static void step_exec(void *ctx, json_object *rec, struct orc_traj_step *s)
{
	struct replay_ctx *c = ctx;
	struct api_subreq a = API_SUBREQ_INIT;
	json_object *body, *job = NULL;
	PGresult *res = NULL;
	const char *job_id;
	int64_t timeout;

	body = orc_traj_exec_body(rec, &timeout);
	if (api_subreq_json(&a, c->r, "POST", "/sandboxes/{id}/exec", api_exec_post, c->sid, body) < 0) {
		orc_traj_refused(s, "exec failed", 0, NULL);
		goto done;
	}
	if (a.status != 200 || !a.json) {
		orc_traj_refused(s, "exec refused", a.status, a.json);
		goto done;
	}
	job = json_object_get(a.json);
	/* wait: true gave up before the job's turn came: it runs on a worker */
	if (!job_done(job) && (job_id = orc_json_str_or(job, "job_id", NULL))) {
		if (api_job_wait_until(&res, c->r->tenant_id, job_id,
				       orc_mono_ms() + (timeout + JOB_WAIT_MARGIN_S) * 1000) < 0) {
			orc_traj_refused(s, "waiting for the job failed", 0, NULL);
			goto done;
		}
		json_object_put(job);
		job = api_job_view(res, 0);
	}
	if (!job_done(job)) {
		orc_traj_refused(s, "the job did not finish in time", 0, NULL);
		goto done;
	}
	orc_traj_judge_exec(s, rec, job, c->o->compare);
done:
	PQclear(res);
	json_object_put(job);
	json_object_put(body);
	api_subreq_release(&a);
}

/* file.write, git.apply, git.reset: one call; success compared. */
static void step_action(void *ctx, json_object *rec, enum orc_traj_kind kind, json_object *body,
			struct orc_traj_step *s)
{
	static const struct {
		const char *path;
		api_handler handler;
	} routes[] = {
		[ORC_TRAJ_KIND_FILE_WRITE] = { "/sandboxes/{id}/files", api_files_upload },
		[ORC_TRAJ_KIND_GIT_APPLY] = { "/sandboxes/{id}/apply_patch", api_git_apply },
		[ORC_TRAJ_KIND_GIT_RESET] = { "/sandboxes/{id}/git/reset", api_git_reset },
	};
	struct replay_ctx *c = ctx;
	struct api_subreq a = API_SUBREQ_INIT;

	if (api_subreq_json(&a, c->r, "POST", routes[kind].path, routes[kind].handler, c->sid,
			    body) < 0)
		orc_traj_refused(s, "request failed", 0, NULL);
	else
		orc_traj_judge_action(s, rec, a.status, a.json, c->o->compare);
	api_subreq_release(&a);
}

/* archive.upload: its recorded tar PUT again; success compared. */
static void step_archive(void *ctx, json_object *rec, const char *path, const char *tar, size_t len,
			 struct orc_traj_step *s)
{
	struct replay_ctx *c = ctx;
	struct api_subreq a = API_SUBREQ_INIT;
	struct api_subreq_call call;

	memset(&call, 0, sizeof(call));
	call.method = "PUT";
	call.path = "/sandboxes/{id}/archive";
	call.handler = api_archive_put;
	call.id = c->sid;
	call.query_key = "path";
	call.query_value = path;
	call.body = tar;
	call.body_len = len;
	call.stream = 1;
	if (api_subreq_run(&a, c->r, &call) < 0)
		orc_traj_refused(s, "request failed", 0, NULL);
	else
		orc_traj_judge_action(s, rec, a.status, a.json, c->o->compare);
	api_subreq_release(&a);
}

/* No one would read the report: stop, and delete the sandbox. */
static int client_gone(void *ctx, const char **why)
{
	struct replay_ctx *c = ctx;

	if (!api_req_client_gone(c->r))
		return 0;
	*why = "the client went away; the replay stopped before this step";
	orc_log(ORC_LOG_INFO, "replay: client gone, stopping", "sandbox_id", c->sid, NULL);
	return 1;
}

static int past_deadline(void *ctx)
{
	struct replay_ctx *c = ctx;

	return orc_mono_ms() >= c->o->deadline_ms;
}

static const struct orc_traj_replayer replayer = {
	.exec = step_exec,
	.action = step_action,
	.archive = step_archive,
	.stop = client_gone,
	.late = past_deadline,
	.reader = "this server",
};

/* ---- one trajectory ---------------------------------------------------------------------- */

int api_replay_run(json_object **out, struct api_req *r, const struct orc_traj *t,
		   const struct api_replay_opts *o)
{
	struct orc_traj_report rep;
	struct replay_ctx c;
	json_object *header = json_object_array_get_idx(t->lines, 0);
	const char *error = NULL;
	int err;

	memset(&c, 0, sizeof(c));
	c.r = r;
	c.o = o;
	orc_traj_report_init(&rep, NULL, t->sandbox_id, o->image ? o->image :
			     orc_json_str_or(orc_json_field(header, "sandbox"), "image", NULL));
	if ((err = create_sandbox(&c, &rep, t)) < 0) {
		json_object_put(orc_traj_report_finish(&rep, "not created", 0));
		return err;
	}
	if (wait_ready(&c) < 0) {
		error = r->error;
		goto finish;
	}
	orc_traj_report_started(&rep);
	error = orc_traj_replay_steps(&rep, t, &replayer, &c);
finish:
	if (!o->keep)
		delete_sandbox(&c);
	*out = orc_traj_report_finish(&rep, error, o->keep);
	orc_log(ORC_LOG_INFO, "replay finished", "sandbox_id", c.sid, "replay_of", t->sandbox_id,
		"result", orc_json_str_or(*out, "result", "?"), NULL);
	return 0;
}
