/*
 * Grading on a branch (docs/checkpoints.md, issue 21):
 *
 *   POST /sandboxes/{id}/evaluate  {command, files?: [{path, content | content_base64}],
 *                                   timeout_seconds?, step?}
 *
 * Fork the sandbox (now, or from the checkpoint of step t, which also
 * works after it was deleted), write the files into the fork, run the
 * command there, answer the job, delete the fork. The files never enter
 * the original and its state is untouched; the evaluation is recorded in
 * the original's trajectory as an 'evaluate' event naming the fork, the
 * checkpoint and the job. Each step goes through the ordinary route
 * handlers in process (replay_subreq.c), so quotas, validation, lanes and
 * events are those of a client's requests. Evaluations are independent:
 * several of one state may run at once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "base64.h"
#include "checkpoint.h"
#include "err.h"
#include "json.h"
#include "log.h"
#include "replay.h"
#include "strutil.h"
#include "validate.h"
#include "xalloc.h"

#define EVAL_FILES_MAX 256
#define EVAL_TIMEOUT_DEFAULT 300
#define EVAL_TIMEOUT_MAX 86400
#define READY_TIMEOUT_S 300
#define FORK_TTL_SLACK_S 900      /* the fork outlives a lost api by at most this */

struct eval_req {
	json_object *command;
	json_object *files;           /* array or NULL */
	int64_t timeout;
	int64_t step;                 /* -1: now */
};

struct eval_run {
	struct api_req *r;
	const struct eval_req *e;
	char fork[64];
	char ckpt[64];
};

static int check_file(json_object *f, size_t i, struct api_req *r)
{
	json_object *path = NULL, *text = NULL, *b64 = NULL;

	if (!json_object_is_type(f, json_type_object) ||
	    !json_object_object_get_ex(f, "path", &path) || !path ||
	    !json_object_is_type(path, json_type_string))
		return api_fail(r, ORC_EINVALID, "files[%zu] must be an object with a string 'path'",
				i);
	json_object_object_get_ex(f, "content", &text);
	json_object_object_get_ex(f, "content_base64", &b64);
	if (!!text == !!b64 || (text && !json_object_is_type(text, json_type_string)) ||
	    (b64 && !json_object_is_type(b64, json_type_string)))
		return api_fail(r, ORC_EINVALID, "files[%zu] needs exactly one of 'content' (text) and "
				"'content_base64' (a string)", i);
	return api_check_path(path, "files[].path", r);
}

static int parse_eval(struct eval_req *e, json_object *body, struct api_req *r)
{
	size_t i, n;
	int err;

	memset(e, 0, sizeof(*e));
	e->timeout = EVAL_TIMEOUT_DEFAULT;
	e->step = -1;
	if (!json_object_object_get_ex(body, "command", &e->command) || !e->command ||
	    !(json_object_is_type(e->command, json_type_string) ||
	      json_object_is_type(e->command, json_type_array)))
		return api_fail(r, ORC_EINVALID, "field 'command' is required: a string or an argv "
				"array");
	if (json_object_object_get_ex(body, "files", &e->files) && e->files) {
		if (!json_object_is_type(e->files, json_type_array) ||
		    (n = json_object_array_length(e->files)) > EVAL_FILES_MAX)
			return api_fail(r, ORC_EINVALID, "field 'files' must be an array of at most %d "
					"{path, content}", EVAL_FILES_MAX);
		for (i = 0; i < n; i++)
			if ((err = check_file(json_object_array_get_idx(e->files, i), i, r)) < 0)
				return err;
	}
	if ((err = orc_json_get_int(body, "timeout_seconds", &e->timeout, 1, EVAL_TIMEOUT_MAX,
				    API_ERRBUF(r))) < 0)
		return err;
	if ((err = orc_json_get_int(body, "step", &e->step, 0, INT64_MAX, API_ERRBUF(r))) < 0)
		return err;
	return 0;
}

/* A sub-request that did not answer 200: pass its answer on. */
static int pass_on(struct api_req *r, const struct api_subreq *a, const char *what)
{
	int err = a->status == 404 ? ORC_ENOTFOUND : a->status == 409 ? ORC_ECONFLICT :
		a->status == 422 ? ORC_EINVALID : a->status == 429 ? ORC_EQUOTA :
		a->status == 503 ? ORC_EUNAVAIL : ORC_ERROR;

	return api_reply_error(r, err, "%s: %s", what, orc_json_str_or(a->json, "detail", "refused"));
}

static int fork_one(struct eval_run *x)
{
	struct api_subreq a = API_SUBREQ_INIT;
	json_object *body = json_object_new_object(), *ids = NULL;
	const char *ck;
	int err;

	json_object_object_add(body, "count", json_object_new_int(1));
	json_object_object_add(body, "ttl_seconds",
			       json_object_new_int64(x->e->timeout + FORK_TTL_SLACK_S));
	if (x->e->step >= 0)
		json_object_object_add(body, "step", json_object_new_int64(x->e->step));
	err = api_subreq_json(&a, x->r, "POST", "/sandboxes/{id}/fork", api_sandbox_fork, x->r->id, body);
	json_object_put(body);
	if (err < 0) {
		err = api_reply_error(x->r, err, "cannot fork sandbox %s", x->r->id);
		goto done;
	}
	if (a.status != 200) {
		err = pass_on(x->r, &a, "cannot fork the sandbox to evaluate in");
		goto done;
	}
	ck = orc_json_str_or(a.json, "checkpoint_id", "");
	if (!json_object_object_get_ex(a.json, "sandbox_ids", &ids) ||
	    json_object_array_length(ids) != 1 || strlen(ck) >= sizeof(x->ckpt)) {
		err = api_reply_error(x->r, ORC_ERROR, "the fork answered without its sandbox");
		goto done;
	}
	snprintf(x->fork, sizeof(x->fork), "%s", json_object_get_string(json_object_array_get_idx(ids, 0)));
	snprintf(x->ckpt, sizeof(x->ckpt), "%s", ck);
done:
	api_subreq_release(&a);
	return err;
}

static int wait_ready(struct eval_run *x)
{
	struct api_subreq a = API_SUBREQ_INIT;
	int err;

	if ((err = api_subreq_wait(&a, x->r, x->fork, READY_TIMEOUT_S)) < 0)
		err = api_reply_error(x->r, err, "waiting for the fork %s failed", x->fork);
	else if (a.status != 200 || strcmp(orc_json_str_or(a.json, "status", ""), "ready"))
		err = api_reply_error(x->r, ORC_EUNAVAIL, "the fork %s did not become ready: %s", x->fork,
				      orc_json_str_or(a.json, "status_message",
						      orc_json_str_or(a.json, "detail", "no detail")));
	api_subreq_release(&a);
	return err;
}

static int upload_one(struct eval_run *x, json_object *f)
{
	struct api_subreq a = API_SUBREQ_INIT;
	json_object *body = json_object_new_object(), *v = NULL;
	const char *path = orc_json_str_or(f, "path", "");
	struct orc_buf b64 = ORC_BUF_INIT;
	int err;

	json_object_object_add(body, "path", json_object_new_string(path));
	if (json_object_object_get_ex(f, "content_base64", &v) && v) {
		json_object_object_add(body, "content", json_object_get(v));
	} else {
		json_object_object_get_ex(f, "content", &v);
		orc_base64_encode(&b64, json_object_get_string(v), (size_t)json_object_get_string_len(v));
		json_object_object_add(body, "content", json_object_new_string(orc_buf_cstr(&b64)));
	}
	err = api_subreq_json(&a, x->r, "POST", "/sandboxes/{id}/files", api_files_upload, x->fork, body);
	json_object_put(body);
	orc_buf_release(&b64);
	if (err < 0)
		err = api_reply_error(x->r, err, "cannot write %s into the fork", path);
	else if (a.status != 200)
		err = pass_on(x->r, &a, "cannot write a file into the fork");
	api_subreq_release(&a);
	return err;
}

/* Run the command in the fork; *job: the job object (owned by r). */
static int run_command(json_object **job, struct eval_run *x)
{
	struct api_subreq a = API_SUBREQ_INIT;
	json_object *body = json_object_new_object();
	int err;

	json_object_object_add(body, "command", json_object_get(x->e->command));
	json_object_object_add(body, "wait", json_object_new_boolean(1));
	json_object_object_add(body, "timeout_seconds", json_object_new_int64(x->e->timeout));
	err = api_subreq_json(&a, x->r, "POST", "/sandboxes/{id}/exec", api_exec_post, x->fork, body);
	json_object_put(body);
	if (err < 0)
		err = api_reply_error(x->r, err, "cannot run the command in the fork");
	else if (a.status != 200 || !a.json)
		err = pass_on(x->r, &a, "cannot run the command in the fork");
	else
		*job = api_own_json(x->r, json_object_get(a.json));
	api_subreq_release(&a);
	return err;
}

/* Delete the fork, and the checkpoint taken for it (not a step's). */
static void cleanup(struct eval_run *x)
{
	struct api_subreq a = API_SUBREQ_INIT;

	if (x->fork[0] && (api_subreq_json(&a, x->r, "DELETE", "/sandboxes/{id}", api_sandbox_delete,
					   x->fork, NULL) < 0 || a.status != 200))
		orc_log(ORC_LOG_WARN, "cannot delete an evaluation's fork; its TTL will",
			"sandbox_id", x->fork, "request_id", x->r->request_id, NULL);
	api_subreq_release(&a);
	if (x->ckpt[0] && x->e->step < 0 &&
	    (api_subreq_json(&a, x->r, "DELETE", "/checkpoints/{id}", api_checkpoint_delete, x->ckpt,
			     NULL) < 0 || a.status != 200))
		orc_log(ORC_LOG_WARN, "cannot delete an evaluation's checkpoint", "checkpoint_id",
			x->ckpt, "request_id", x->r->request_id, NULL);
	api_subreq_release(&a);
}

static json_object *eval_record(struct eval_run *x, json_object *job)
{
	json_object *o = json_object_new_object(), *paths = json_object_new_array(), *v = NULL;
	size_t i, n = x->e->files ? json_object_array_length(x->e->files) : 0;

	json_object_object_add(o, "fork_sandbox_id", json_object_new_string(x->fork));
	json_object_object_add(o, "checkpoint_id", json_object_new_string(x->ckpt));
	json_object_object_add(o, "from_step", x->e->step >= 0 ? json_object_new_int64(x->e->step) : NULL);
	json_object_object_add(o, "command", json_object_get(x->e->command));
	for (i = 0; i < n; i++)
		json_object_array_add(paths, json_object_new_string(
			orc_json_str_or(json_object_array_get_idx(x->e->files, i), "path", "")));
	json_object_object_add(o, "files", paths);
	if (job) {
		const char *keys[] = { "job_id", "status", "exit_code", "timed_out", "failure" };
		for (i = 0; i < sizeof(keys) / sizeof(*keys); i++)
			if (json_object_object_get_ex(job, keys[i], &v))
				json_object_object_add(o, keys[i], json_object_get(v));
	}
	return o;
}

int api_sandbox_evaluate(struct api_req *r)
{
	struct eval_req e;
	struct eval_run x;
	json_object *body, *job = NULL, *rec, *o;
	size_t i, n;
	int err;

	if ((err = api_checkpoint_supported(r)) < 0 || (err = api_req_json_body(&body, r)) < 0)
		return err;
	if ((err = parse_eval(&e, body, r)) < 0)
		return api_reply_failed(r, err);
	memset(&x, 0, sizeof(x));
	x.r = r;
	x.e = &e;
	if ((err = fork_one(&x)) < 0)
		goto done;
	if ((err = wait_ready(&x)) < 0)
		goto done;
	n = e.files ? json_object_array_length(e.files) : 0;
	for (i = 0; i < n; i++)
		if ((err = upload_one(&x, json_object_array_get_idx(e.files, i))) < 0)
			goto done;
	if ((err = run_command(&job, &x)) < 0)
		goto done;
	rec = eval_record(&x, job);
	api_event_record(r, "evaluate", rec);
	o = api_own_json(r, json_object_new_object());
	json_object_object_add(o, "sandbox_id", json_object_new_string(r->id));
	json_object_object_foreach(rec, k, v) {
		if (strcmp(k, "job_id") && strcmp(k, "status") && strcmp(k, "exit_code") &&
		    strcmp(k, "timed_out") && strcmp(k, "failure"))
			json_object_object_add(o, k, json_object_get(v));
	}
	json_object_put(rec);
	json_object_object_add(o, "job", json_object_get(job));
	err = api_reply_json(r, 200, o);
done:
	cleanup(&x);
	return err;
}
