/*
 * Replaying one trajectory over HTTP: a fresh sandbox with the recorded
 * spec, every recorded action re-applied in order through the public API,
 * each outcome judged against the recording and reported by
 * lib/traj_compare.c (the same judge as POST /v1/trajectories/replay), and
 * the sandbox deleted afterwards unless asked to keep it.
 *
 * Every POST carries an Idempotency-Key, so a retry after a lost connection
 * never creates a second sandbox or runs a step twice. Routes that this
 * server lacks (files, git) make their steps "skipped", not errors.
 */
#include <stdio.h>
#include <string.h>

#include "err.h"
#include "replay.h"
#include "strutil.h"
#include "xalloc.h"

#define HTTP_MARGIN_S 90              /* past a step's own timeout */
#define ACTION_TIMEOUT_S 300

struct replay_ctx {
	const struct cli_config *cfg;
	const struct replay_opts *o;
	const struct orc_traj *t;
	char *sid;                        /* the new sandbox */
};

static json_object *field(json_object *o, const char *key)
{
	json_object *v = NULL;

	return json_object_object_get_ex(o, key, &v) ? v : NULL;
}

/* POST a JSON body with a fresh Idempotency-Key; the raw response. */
static int post(struct cli_response *out, struct replay_ctx *c, const char *suffix, json_object *body,
		long timeout_s)
{
	struct cli_request req = { "POST", NULL, NULL, NULL, timeout_s, NULL, NULL };
	char key[33], *path = cli_path("/v1/sandboxes", c->sid, suffix);
	int err;

	cli_new_idempotency_key(key);
	req.path = path;
	req.body = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	req.idempotency_key = key;
	err = cli_http(out, c->cfg, &req);
	free(path);
	return err;
}

/* ---- the sandbox -------------------------------------------------------- */

static int create_sandbox(struct replay_ctx *c, struct orc_traj_report *rep, json_object *spec)
{
	struct cli_request req = { "POST", "/v1/sandboxes", NULL, NULL, 120, NULL, NULL };
	json_object *body = orc_traj_create_body(spec, c->o->image, c->t->sandbox_id), *res = NULL, *sb = NULL;
	char key[33];
	int err;

	cli_new_idempotency_key(key);
	req.body = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	req.idempotency_key = key;
	if ((err = cli_call(&res, c->cfg, &req)) < 0)
		goto done;
	if (!json_object_is_type(field(res, "sandbox_id"), json_type_string)) {
		cli_error("replay of %s: the server answered the create without a sandbox_id", c->t->sandbox_id);
		err = ORC_ERROR;
		goto done;
	}
	c->sid = xstrdup(json_object_get_string(field(res, "sandbox_id")));
	orc_traj_report_sandbox(rep, c->sid);
	err = cli_sandbox_wait(&sb, c->cfg, c->sid, c->o->ready_timeout_s, 0);
done:
	json_object_put(sb);
	json_object_put(res);
	json_object_put(body);
	return err;
}

static void delete_sandbox(struct replay_ctx *c)
{
	struct cli_request req = { "DELETE", NULL, NULL, NULL, 60, NULL, NULL };
	json_object *res = NULL;
	char *path = cli_path("/v1/sandboxes", c->sid, NULL);

	req.path = path;
	if (cli_call(&res, c->cfg, &req) == 0)
		json_object_put(res);
	free(path);
}

/* ---- steps --------------------------------------------------------------- */

static void step_exec(struct replay_ctx *c, json_object *rec, struct orc_traj_step *s)
{
	struct cli_response r = CLI_RESPONSE_INIT;
	json_object *job = NULL, *body;
	int64_t timeout;

	body = orc_traj_exec_body(rec, &timeout);
	if (post(&r, c, "/exec", body, (long)timeout + HTTP_MARGIN_S) < 0) {
		orc_traj_refused(s, "exec failed", 0, NULL);
		goto done;
	}
	if (r.status != 200 || !r.json || !json_object_is_type(r.json, json_type_object)) {
		orc_traj_refused(s, "exec refused", r.status, r.json);
		goto done;
	}
	job = json_object_get(r.json);
	if (!cli_job_is_done(job) && cli_job_wait(&job, c->cfg, (long)timeout + HTTP_MARGIN_S) < 0) {
		orc_traj_refused(s, "waiting for the job failed", 0, NULL);
		goto done;
	}
	orc_traj_judge_exec(s, rec, job, c->o->compare);
done:
	json_object_put(job);
	json_object_put(body);
	cli_response_release(&r);
}

/* file.write, git.apply, git.reset: one POST; success compared. */
static void step_post(struct replay_ctx *c, json_object *rec, enum orc_traj_kind kind,
		      struct orc_traj_step *s)
{
	static const char *const suffix[] = {
		[ORC_TRAJ_KIND_FILE_WRITE] = "/files",
		[ORC_TRAJ_KIND_GIT_APPLY] = "/apply_patch",
		[ORC_TRAJ_KIND_GIT_RESET] = "/git/reset",
	};
	struct cli_response r = CLI_RESPONSE_INIT;
	json_object *body = NULL;

	if (orc_traj_action_body(&body, s, rec, kind))
		return;
	if (post(&r, c, suffix[kind], body, ACTION_TIMEOUT_S) < 0)
		orc_traj_refused(s, "request failed", 0, NULL);
	else if (cli_route_missing(&r))
		orc_traj_skip(s, "not supported by this server");
	else
		orc_traj_judge_action(s, rec, r.status, r.json, c->o->compare);
	json_object_put(body);
	cli_response_release(&r);
}

static void replay_step(struct replay_ctx *c, json_object *rec, struct orc_traj_step *s)
{
	json_object *type = field(rec, "type");
	enum orc_traj_kind kind = orc_traj_kind_of(type ? json_object_get_string(type) : "");

	switch (kind) {
	case ORC_TRAJ_KIND_EXEC:
		step_exec(c, rec, s);
		break;
	case ORC_TRAJ_KIND_FILE_WRITE:
	case ORC_TRAJ_KIND_GIT_APPLY:
	case ORC_TRAJ_KIND_GIT_RESET:
		step_post(c, rec, kind, s);
		break;
	case ORC_TRAJ_KIND_ARCHIVE:
		/* The raw tar PUT needs a binary body, which this client does not send. */
		orc_traj_skip(s, "orchardctl does not re-upload archives (POST /v1/trajectories/replay does)");
		break;
	default:
		orc_traj_skip(s, "this orchardctl does not know this kind of step");
	}
}

/* ---- one trajectory ------------------------------------------------------ */

int replay_run(json_object **out, struct orc_buf *text, const struct cli_config *cfg,
	       const struct orc_traj *t, const struct replay_opts *o)
{
	struct orc_traj_report rep;
	struct replay_ctx c;
	json_object *header, *spec, *line, *v;
	size_t i, n = json_object_array_length(t->lines);
	const char *error = NULL;
	int err = 0;

	memset(&c, 0, sizeof(c));
	c.cfg = cfg;
	c.o = o;
	c.t = t;
	header = json_object_array_get_idx(t->lines, 0);
	spec = field(header, "sandbox");
	v = field(spec, "image");
	orc_traj_report_init(&rep, text, t->sandbox_id,
			     o->image ? o->image : v && json_object_is_type(v, json_type_string) ?
			     json_object_get_string(v) : NULL);
	if ((err = create_sandbox(&c, &rep, spec)) < 0) {
		error = "could not start a sandbox to replay into";
		goto finish;
	}
	orc_traj_report_started(&rep);
	for (i = 1; i < n; i++) {
		struct orc_traj_step s = ORC_TRAJ_STEP_INIT;
		line = json_object_array_get_idx(t->lines, i);
		/* Lines without a step number are context (events, deletion, end). */
		if (!(v = field(line, "step")))
			continue;
		replay_step(&c, line, &s);
		orc_traj_report_step(&rep, line, json_object_get_int64(v), &s);
	}
finish:
	if (c.sid && !o->keep)
		delete_sandbox(&c);
	*out = orc_traj_report_finish(&rep, error, o->keep);
	free(c.sid);
	return err;
}
