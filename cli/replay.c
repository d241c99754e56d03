/*
 * Replaying one trajectory: a fresh sandbox with the recorded spec, every
 * recorded action re-applied in order through the public API, each outcome
 * judged against the recording (replay_compare.c), and the sandbox deleted
 * afterwards unless asked to keep it.
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

#define EXEC_DEFAULT_TIMEOUT_S 300
#define HTTP_MARGIN_S 90              /* past a step's own timeout */
#define REPLAY_LABEL "orchard/replay-of"

struct replay_ctx {
	const struct cli_config *cfg;
	const struct replay_opts *o;
	const struct replay_traj *t;
	char *sid;                        /* the new sandbox */
	json_object *steps;               /* the report's step array */
	struct orc_buf *text;
	int counts[4];                    /* per enum replay_verdict */
};

static json_object *field(json_object *o, const char *key)
{
	json_object *v = NULL;

	return json_object_object_get_ex(o, key, &v) ? v : NULL;
}

/* Copy key from src to dst when present and not null. */
static void copy_field(json_object *dst, json_object *src, const char *key)
{
	json_object *v = field(src, key);

	if (v)
		json_object_object_add(dst, key, json_object_get(v));
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

static json_object *create_body(const struct replay_ctx *c, json_object *spec)
{
	json_object *b = json_object_new_object(), *labels = json_object_new_object();

	if (c->o->image)
		json_object_object_add(b, "image", json_object_new_string(c->o->image));
	else
		copy_field(b, spec, "image");
	copy_field(b, spec, "cpu");
	copy_field(b, spec, "memory");
	copy_field(b, spec, "block_network");
	copy_field(b, spec, "env");
	copy_field(b, spec, "workdir");
	/* Not the recorded labels: a replay must not join the label selection
	 * its recording was exported by. It is labelled with what it replays. */
	json_object_object_add(labels, REPLAY_LABEL, json_object_new_string(c->t->sandbox_id));
	json_object_object_add(b, "labels", labels);
	return b;
}

static int create_sandbox(struct replay_ctx *c, json_object *spec, json_object *report)
{
	struct cli_request req = { "POST", "/v1/sandboxes", NULL, NULL, 120, NULL, NULL };
	json_object *body = create_body(c, spec), *res = NULL, *sb = NULL;
	char key[33];
	int err;

	cli_new_idempotency_key(key);
	req.body = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	req.idempotency_key = key;
	json_object_object_add(report, "image", json_object_get(field(body, "image")));
	if ((err = cli_call(&res, c->cfg, &req)) < 0)
		goto done;
	if (!json_object_is_type(field(res, "sandbox_id"), json_type_string)) {
		cli_error("replay of %s: the server answered the create without a sandbox_id", c->t->sandbox_id);
		err = ORC_ERROR;
		goto done;
	}
	c->sid = xstrdup(json_object_get_string(field(res, "sandbox_id")));
	json_object_object_add(report, "replay_sandbox_id", json_object_new_string(c->sid));
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

struct step_result {
	enum replay_verdict verdict;
	const char *why;                  /* static text or NULL */
	char why_buf[256];
	struct orc_buf diff;
	json_object *replayed;            /* what the replay saw (owned) */
};

static enum replay_verdict skipped(struct step_result *s, const char *why)
{
	s->why = why;
	return REPLAY_SKIPPED;
}

static enum replay_verdict errored(struct step_result *s, const struct cli_response *r, const char *what)
{
	const char *detail = r ? cli_field_text(r->json, "detail") : "no response";

	snprintf(s->why_buf, sizeof(s->why_buf), "%s%s%s", what, r ? ": " : "",
		 r ? (strcmp(detail, "-") ? detail : "unexpected response") : "");
	if (r)
		snprintf(s->why_buf + strlen(s->why_buf), sizeof(s->why_buf) - strlen(s->why_buf),
			 " (HTTP %ld)", r->status);
	s->why = s->why_buf;
	return REPLAY_ERROR;
}

static enum replay_verdict step_exec(struct replay_ctx *c, json_object *rec, struct step_result *s)
{
	struct cli_response r = CLI_RESPONSE_INIT;
	json_object *body = json_object_new_object(), *job = NULL, *v;
	enum replay_verdict verdict;
	int64_t timeout = EXEC_DEFAULT_TIMEOUT_S;

	if ((v = field(rec, "timeout_seconds")) && json_object_is_type(v, json_type_int))
		timeout = json_object_get_int64(v);
	copy_field(body, rec, "command");
	copy_field(body, rec, "cwd");
	copy_field(body, rec, "env");
	copy_field(body, rec, "login_shell");
	copy_field(body, rec, "stdin");
	json_object_object_add(body, "timeout_seconds", json_object_new_int64(timeout));
	json_object_object_add(body, "wait", json_object_new_boolean(1));
	if (post(&r, c, "/exec", body, (long)timeout + HTTP_MARGIN_S) < 0) {
		verdict = errored(s, NULL, "exec failed");
		goto done;
	}
	if (r.status != 200 || !r.json || !json_object_is_type(r.json, json_type_object)) {
		verdict = errored(s, &r, "exec refused");
		goto done;
	}
	job = json_object_get(r.json);
	if (!cli_job_is_done(job) && cli_job_wait(&job, c->cfg, (long)timeout + HTTP_MARGIN_S) < 0) {
		verdict = errored(s, NULL, "waiting for the job failed");
		goto done;
	}
	s->replayed = json_object_new_object();
	copy_field(s->replayed, job, "job_id");
	copy_field(s->replayed, job, "exit_code");
	copy_field(s->replayed, job, "timed_out");
	copy_field(s->replayed, job, "error");
	if (!cli_job_is_done(rec)) {
		verdict = skipped(s, "the recorded step had not finished");
		goto done;
	}
	verdict = replay_compare_exec(&s->why, &s->diff, rec, job, c->o->compare);
	if (verdict == REPLAY_DIVERGED) {
		copy_field(s->replayed, job, "stdout");
		copy_field(s->replayed, job, "stderr");
	}
done:
	json_object_put(job);
	json_object_put(body);
	cli_response_release(&r);
	return verdict;
}

/* A boolean field, or dflt when absent. */
static int bool_or(json_object *o, const char *key, int dflt)
{
	json_object *v = field(o, key);

	return v && json_object_is_type(v, json_type_boolean) ? json_object_get_boolean(v) : dflt;
}

/* file.write, git.apply, git.reset: one POST; success compared. */
static enum replay_verdict step_post(struct replay_ctx *c, json_object *rec, const char *type,
				     struct step_result *s)
{
	struct cli_response r = CLI_RESPONSE_INIT;
	json_object *body = json_object_new_object();
	enum replay_verdict verdict;
	const char *suffix;
	int ok_rec, ok_rep;

	if (!strcmp(type, "file.write")) {
		if (!field(rec, "content")) {
			verdict = skipped(s, "the file's content is not in the trajectory "
					  "(export it with content)");
			goto done;
		}
		suffix = "/files";
		copy_field(body, rec, "path");
		copy_field(body, rec, "content");
		copy_field(body, rec, "mode");
	} else if (!strcmp(type, "git.apply")) {
		suffix = "/apply_patch";
		copy_field(body, rec, "patch");
	} else {
		suffix = "/git/reset";
		copy_field(body, rec, "ref");
	}
	if (post(&r, c, suffix, body, 300) < 0) {
		verdict = errored(s, NULL, "request failed");
		goto done;
	}
	if (cli_route_missing(&r)) {
		verdict = skipped(s, "not supported by this server");
		goto done;
	}
	ok_rec = bool_or(rec, "success", 1);
	ok_rep = r.status >= 200 && r.status <= 299 && bool_or(r.json, "success", 1);
	s->replayed = json_object_new_object();
	json_object_object_add(s->replayed, "status", json_object_new_int64(r.status));
	json_object_object_add(s->replayed, "success", json_object_new_boolean(ok_rep));
	if (r.status >= 400 && r.status != 409 && r.status != 422) {
		verdict = errored(s, &r, "refused");
		goto done;
	}
	if (c->o->compare != REPLAY_NONE && ok_rec != ok_rep) {
		s->why = ok_rep ? "succeeded (the recorded step failed)" : "failed (the recorded step succeeded)";
		if (!ok_rep)
			orc_buf_addf(&s->diff, "      %s\n", cli_field_text(r.json, r.status >= 400 ? "detail" : "stderr"));
		verdict = REPLAY_DIVERGED;
		goto done;
	}
	verdict = REPLAY_MATCH;
done:
	json_object_put(body);
	cli_response_release(&r);
	return verdict;
}

/* What a step line shows after its type: the command, path or ref. */
static void step_subject(char *out, size_t outlen, json_object *rec, const char *type)
{
	if (!strcmp(type, "exec"))
		replay_command_text(out, outlen, field(rec, "command"));
	else if (!strcmp(type, "file.write"))
		snprintf(out, outlen, "%s", cli_field_text(rec, "path"));
	else if (!strcmp(type, "git.reset"))
		snprintf(out, outlen, "%s", cli_field_text(rec, "ref"));
	else
		out[0] = '\0';
}

static int is_step_type(const char *type)
{
	return !strcmp(type, "exec") || !strcmp(type, "file.write") || !strcmp(type, "git.apply") ||
	       !strcmp(type, "git.reset");
}

static void replay_step(struct replay_ctx *c, json_object *rec, const char *type, int64_t n)
{
	struct step_result s;
	json_object *r = json_object_new_object();
	char subject[128];

	memset(&s, 0, sizeof(s));
	if (!strcmp(type, "exec"))
		s.verdict = step_exec(c, rec, &s);
	else if (is_step_type(type))
		s.verdict = step_post(c, rec, type, &s);
	else
		s.verdict = skipped(&s, "this orchardctl does not know this kind of step");
	c->counts[s.verdict]++;
	step_subject(subject, sizeof(subject), rec, type);

	orc_buf_addf(c->text, "  step %-3lld %-10s %-44s %s", (long long)n, type, subject,
		     s.verdict == REPLAY_MATCH ? "ok" : s.verdict == REPLAY_DIVERGED ? "DIVERGED" :
		     s.verdict == REPLAY_SKIPPED ? "skipped" : "ERROR");
	if (s.why)
		orc_buf_addf(c->text, ": %s", s.why);
	orc_buf_addc(c->text, '\n');
	if (s.diff.len)
		orc_buf_adds(c->text, s.diff.ptr);

	json_object_object_add(r, "step", json_object_new_int64(n));
	json_object_object_add(r, "type", json_object_new_string(type));
	if (!strcmp(type, "exec"))
		copy_field(r, rec, "command");
	else if (subject[0])
		json_object_object_add(r, strcmp(type, "git.reset") ? "path" : "ref", json_object_new_string(subject));
	json_object_object_add(r, "result", json_object_new_string(replay_verdict_name(s.verdict)));
	if (s.why)
		json_object_object_add(r, "reason", json_object_new_string(s.why));
	if (s.diff.len)
		json_object_object_add(r, "diff", json_object_new_string(s.diff.ptr));
	if (!strcmp(type, "exec")) {
		json_object *recorded = json_object_new_object();
		copy_field(recorded, rec, "job_id");
		copy_field(recorded, rec, "exit_code");
		copy_field(recorded, rec, "timed_out");
		json_object_object_add(r, "recorded", recorded);
	}
	if (s.replayed)
		json_object_object_add(r, "replayed", s.replayed);
	json_object_array_add(c->steps, r);
	orc_buf_release(&s.diff);
}

/* ---- one trajectory ------------------------------------------------------ */

static const char *result_of(const struct replay_ctx *c, int failed)
{
	if (failed || c->counts[REPLAY_ERROR])
		return "error";
	return c->counts[REPLAY_DIVERGED] ? "diverged" : "match";
}

int replay_run(json_object **out, struct orc_buf *text, const struct cli_config *cfg,
	       const struct replay_traj *t, const struct replay_opts *o)
{
	struct replay_ctx c;
	json_object *report = json_object_new_object(), *header, *spec, *line;
	size_t i, n = json_object_array_length(t->lines);
	int64_t step = 0;
	int err = 0;

	memset(&c, 0, sizeof(c));
	c.cfg = cfg;
	c.o = o;
	c.t = t;
	c.text = text;
	c.steps = json_object_new_array();
	header = json_object_array_get_idx(t->lines, 0);
	spec = field(header, "sandbox");
	json_object_object_add(report, "sandbox_id", json_object_new_string(t->sandbox_id));
	if ((err = create_sandbox(&c, spec, report)) < 0) {
		orc_buf_addf(text, "replay %s: could not start a sandbox to replay into\n", t->sandbox_id);
		goto finish;
	}
	orc_buf_addf(text, "replay %s -> %s (image %s)\n", t->sandbox_id, c.sid,
		     cli_field_text(report, "image"));
	for (i = 1; i < n; i++) {
		const char *type;
		line = json_object_array_get_idx(t->lines, i);
		type = cli_field_text(line, "type");
		/* Lines without a step number are context (events, deletion, end). */
		if (!field(line, "step"))
			continue;
		step = json_object_get_int64(field(line, "step"));
		replay_step(&c, line, type, step);
	}
finish:
	if (c.sid && !o->keep)
		delete_sandbox(&c);
	json_object_object_add(report, "result", json_object_new_string(result_of(&c, err < 0)));
	json_object_object_add(report, "steps", json_object_new_int64(c.counts[0] + c.counts[1] +
								       c.counts[2] + c.counts[3]));
	json_object_object_add(report, "matched", json_object_new_int(c.counts[REPLAY_MATCH]));
	json_object_object_add(report, "diverged", json_object_new_int(c.counts[REPLAY_DIVERGED]));
	json_object_object_add(report, "skipped", json_object_new_int(c.counts[REPLAY_SKIPPED]));
	json_object_object_add(report, "errors", json_object_new_int(c.counts[REPLAY_ERROR]));
	json_object_object_add(report, "kept", json_object_new_boolean(c.sid && o->keep));
	json_object_object_add(report, "step_results", c.steps);
	if (!err)
		orc_buf_addf(text, "  result: %s (%d matched, %d diverged, %d skipped, %d errors)%s%s\n",
			     result_of(&c, 0), c.counts[REPLAY_MATCH], c.counts[REPLAY_DIVERGED],
			     c.counts[REPLAY_SKIPPED], c.counts[REPLAY_ERROR],
			     o->keep ? "; kept sandbox " : "", o->keep ? c.sid : "");
	free(c.sid);
	*out = report;
	return err;
}
