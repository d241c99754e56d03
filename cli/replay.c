/*
 * Replaying one trajectory over HTTP: a fresh sandbox with the recorded
 * spec, every recorded action re-applied in order through the public API,
 * each outcome judged against the recording and reported by
 * lib/traj_compare.c (the same judge as POST /v1/trajectories/replay), and
 * the sandbox deleted afterwards unless asked to keep it.
 *
 * The step loop is lib/traj_replay.c's, the api's too; this file sends.
 * Every POST carries an Idempotency-Key, so a retry after a lost connection
 * never creates a second sandbox or runs a step twice (an archive's PUT
 * replaces the same files again). Routes that this server lacks (files,
 * git, archive) make their steps "skipped", not errors.
 */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "err.h"
#include "io.h"
#include "json.h"
#include "replay.h"
#include "strutil.h"
#include "traj_replay.h"
#include "transfer.h"
#include "xalloc.h"

#define HTTP_MARGIN_S 90              /* past a step's own timeout */
#define ACTION_TIMEOUT_S 300

struct replay_ctx {
	const struct cli_config *cfg;
	const struct replay_opts *o;
	const struct orc_traj *t;
	char *sid;                        /* the new sandbox */
};

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
	if (!json_object_is_type(orc_json_field(res, "sandbox_id"), json_type_string)) {
		cli_error("replay of %s: the server answered the create without a sandbox_id", c->t->sandbox_id);
		err = ORC_ERROR;
		goto done;
	}
	c->sid = xstrdup(json_object_get_string(orc_json_field(res, "sandbox_id")));
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

static void step_exec(void *ctx, json_object *rec, struct orc_traj_step *s)
{
	struct replay_ctx *c = ctx;
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
static void step_post(void *ctx, json_object *rec, enum orc_traj_kind kind, json_object *body,
		      struct orc_traj_step *s)
{
	static const char *const suffix[] = {
		[ORC_TRAJ_KIND_FILE_WRITE] = "/files",
		[ORC_TRAJ_KIND_GIT_APPLY] = "/apply_patch",
		[ORC_TRAJ_KIND_GIT_RESET] = "/git/reset",
	};
	struct replay_ctx *c = ctx;
	struct cli_response r = CLI_RESPONSE_INIT;

	if (post(&r, c, suffix[kind], body, ACTION_TIMEOUT_S) < 0)
		orc_traj_refused(s, "request failed", 0, NULL);
	else if (cli_route_missing(&r))
		orc_traj_skip(s, "not supported by this server");
	else
		orc_traj_judge_action(s, rec, r.status, r.json, c->o->compare);
	cli_response_release(&r);
}

/* archive.upload: the recorded tar PUT again from a memory file (a
 * binary body that curl can read again for a retry); success compared. */
static void step_archive(void *ctx, json_object *rec, const char *path, const char *tar, size_t len,
			 struct orc_traj_step *s)
{
	struct replay_ctx *c = ctx;
	struct cli_request req = { "PUT", NULL, NULL, NULL, 0, NULL, NULL };
	struct cli_response r = CLI_RESPONSE_INIT;
	struct cli_stream st;
	char *route = cli_remote_route(c->sid, "/archive", path);
	int fd = memfd_create("orchard-replay-tar", MFD_CLOEXEC);

	if (fd < 0 || orc_write_all(fd, tar, len) < 0 || lseek(fd, 0, SEEK_SET) < 0) {
		orc_traj_refused(s, "cannot hold the recorded archive in memory", 0, NULL);
		goto done;
	}
	cli_stream_init(&st);
	st.in_fd = fd;
	st.in_size = (int64_t)len;
	st.in_rewind = 1;
	st.stall_s = ACTION_TIMEOUT_S;
	req.path = route;
	if (cli_http_stream(&r, c->cfg, &req, &st) < 0)
		orc_traj_refused(s, "request failed", 0, NULL);
	else if (cli_route_missing(&r))
		orc_traj_skip(s, "not supported by this server");
	else
		orc_traj_judge_action(s, rec, r.status, r.json, c->o->compare);
done:
	if (fd >= 0)
		close(fd);
	cli_response_release(&r);
	free(route);
}

static const struct orc_traj_replayer replayer = {
	.exec = step_exec,
	.action = step_post,
	.archive = step_archive,
	.reader = "this orchardctl",
};

/* ---- one trajectory ------------------------------------------------------ */

int replay_run(json_object **out, struct orc_buf *text, const struct cli_config *cfg,
	       const struct orc_traj *t, const struct replay_opts *o)
{
	struct orc_traj_report rep;
	struct replay_ctx c;
	json_object *spec;
	const char *error = NULL;
	int err = 0;

	memset(&c, 0, sizeof(c));
	c.cfg = cfg;
	c.o = o;
	c.t = t;
	spec = orc_json_field(json_object_array_get_idx(t->lines, 0), "sandbox");
	orc_traj_report_init(&rep, text, t->sandbox_id,
			     o->image ? o->image : orc_json_str_or(spec, "image", NULL));
	if ((err = create_sandbox(&c, &rep, spec)) < 0) {
		error = "could not start a sandbox to replay into";
		goto finish;
	}
	orc_traj_report_started(&rep);
	error = orc_traj_replay_steps(&rep, t, &replayer, &c);
finish:
	if (c.sid && !o->keep)
		delete_sandbox(&c);
	*out = orc_traj_report_finish(&rep, error, o->keep);
	free(c.sid);
	return err;
}
