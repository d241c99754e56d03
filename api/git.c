/*
 * Git on the workspace through the agent (libgit2 there; docs/agent-protocol.md
 * "Git"):
 *
 *   POST /sandboxes/{id}/apply_patch {patch, timeout_seconds: 30, check?, cwd?}
 *        -> Orchard's {success, stdout, stderr, exit_code} plus files, check, error
 *   GET  /sandboxes/{id}/git/diff[?cwd=]  -> {cwd, patch, files}
 *   POST /sandboxes/{id}/git/reset [{ref?, cwd?, remove_ignored?}]  (no body: {})
 *
 * A patch that does not apply is Orchard's 200 with success false (and is
 * recorded so); bad input is a 4xx that records nothing. An apply is
 * recorded as 'git.apply' with the whole patch (a replay needs it); a
 * dry run (check: true) as 'git.check', which replay ignores.
 */
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "err.h"
#include "json.h"
#include "log.h"
#include "url.h"
#include "validate.h"
#include "xalloc.h"

#define APPLY_TIMEOUT_DEFAULT_S 30
#define APPLY_TIMEOUT_MAX_S 3600
#define GIT_TIMEOUT_MS 300000L
#define ANSWER_MAX (1u << 20)
#define DIFF_MAX (96u << 20)           /* the agent's 64 MiB patch, JSON-escaped */

static json_object *copy_field(json_object *o, const char *k)
{
	return json_object_get(orc_json_field(o, k));
}

/* Optional cwd: a string path, checked like a file path. */
static int body_cwd(const char **out, json_object *body, struct api_req *r)
{
	const char *c = NULL;
	int err;

	if ((err = orc_json_get_str(body, "cwd", &c, API_ERRBUF(r))) < 0)
		return err;
	if (err == 0 && (!*c || strlen(c) >= API_PATH_MAX))
		return api_fail(r, ORC_EINVALID, "field 'cwd' must be a non-empty path shorter than "
				"%d bytes", API_PATH_MAX);
	*out = err == 0 ? c : NULL;
	return 0;
}

/* Call the agent with body: *status is its status and *ans its parsed
 * answer when that is 200 (else NULL; out has the error body). Transport
 * failures and a 200 that is not JSON are replied and returned. */
static int git_call(json_object **ans, long *status, struct api_req *r, const char *method,
		    const char *path, json_object *body, long timeout_ms, size_t max,
		    struct orc_buf *out)
{
	struct api_agent a;
	const char *s = NULL;
	size_t len = 0;
	json_object *o = NULL;
	int err;

	if ((err = api_agent_get(&a, r)) < 0)
		return err;
	if (body)
		s = orc_json_str(body, &len);
	orc_buf_init(out, max);
	if ((err = api_agent_json(out, status, r, &a, method, path, s, len, timeout_ms)) < 0)
		return err;
	*ans = NULL;
	if (*status == 200) {
		if (orc_json_parse_object(&o, orc_buf_cstr(out), out->len, NULL, 0) < 0)
			return api_reply_error(r, API_EAGENT, "the sandbox's agent sent an invalid answer");
		*ans = api_own_json(r, o);
	}
	return 0;
}

/* An apply_patch body, checked (strings point into the body). */
struct apply_req {
	const char *patch;
	int64_t timeout;              /* seconds, 1..APPLY_TIMEOUT_MAX_S */
	int check;
	const char *cwd;              /* NULL: the workspace */
};

/* The fields of an apply_patch body: 0, or ORC_EINVALID (api_fail). */
static int parse_apply(struct apply_req *a, json_object *body, struct api_req *r)
{
	int err;

	a->patch = NULL;
	a->timeout = APPLY_TIMEOUT_DEFAULT_S;
	a->check = 0;
	a->cwd = NULL;
	if ((err = orc_json_get_str(body, "patch", &a->patch, API_ERRBUF(r))) < 0)
		return err;
	if (err == 1)
		return api_fail(r, ORC_EINVALID, "field 'patch' is required (a unified or git "
				"diff)");
	if ((err = orc_json_get_int(body, "timeout_seconds", &a->timeout, 0, APPLY_TIMEOUT_MAX_S,
				    API_ERRBUF(r))) < 0 ||
	    (err = orc_json_get_bool(body, "check", &a->check, API_ERRBUF(r))) < 0 ||
	    (err = body_cwd(&a->cwd, body, r)) < 0)
		return err;
	if (a->timeout == 0)
		a->timeout = APPLY_TIMEOUT_DEFAULT_S;
	return 0;
}

int api_git_apply(struct api_req *r)
{
	struct orc_buf out = ORC_BUF_INIT;
	json_object *body, *req, *ans = NULL, *d, *reply;
	struct apply_req ap;
	const char *cwd;
	long status = 0;
	int check, err;

	if ((err = api_req_json_body(&body, r)) < 0)
		return err;
	if ((err = parse_apply(&ap, body, r)) < 0)
		return api_reply_failed(r, err);
	cwd = ap.cwd;
	check = ap.check;
	req = api_own_json(r, json_object_new_object());
	json_object_object_add(req, "patch", copy_field(body, "patch"));
	json_object_object_add(req, "check", json_object_new_boolean(check));
	if (cwd)
		json_object_object_add(req, "cwd", json_object_new_string(cwd));
	if ((err = git_call(&ans, &status, r, "POST", "/git/apply", req, ap.timeout * 1000 + 5000,
			    ANSWER_MAX, &out)) < 0)
		goto done;
	if (status != 200) {
		/* The request was ours and valid: the agent refusing it (a bad
		 * cwd) is the error, nothing was applied or recorded. */
		err = api_reply_agent_error(r, status, &out);
		goto done;
	}
	d = api_own_json(r, json_object_new_object());
	json_object_object_add(d, "patch", copy_field(body, "patch"));
	json_object_object_add(d, "success", json_object_new_boolean(
		json_object_get_boolean(orc_json_field(ans, "success"))));
	json_object_object_add(d, "exit_code", copy_field(ans, "exit_code"));
	json_object_object_add(d, "stdout", copy_field(ans, "stdout"));
	json_object_object_add(d, "stderr", copy_field(ans, "stderr"));
	json_object_object_add(d, "files", copy_field(ans, "files"));
	if (cwd)
		json_object_object_add(d, "cwd", json_object_new_string(cwd));
	if (api_event_record(r, check ? "git.check" : "git.apply", d) < 0) {
		err = api_reply_error(r, ORC_EUNAVAIL, "the patch on sandbox %s could not be recorded; "
				      "its outcome is unknown to the trajectory", r->id);
		goto done;
	}
	reply = api_own_json(r, json_object_new_object());
	json_object_object_add(reply, "success", copy_field(d, "success"));
	json_object_object_add(reply, "stdout", copy_field(ans, "stdout"));
	json_object_object_add(reply, "stderr", copy_field(ans, "stderr"));
	json_object_object_add(reply, "exit_code", copy_field(ans, "exit_code"));
	json_object_object_add(reply, "files", copy_field(ans, "files"));
	json_object_object_add(reply, "check", json_object_new_boolean(check));
	json_object_object_add(reply, "error", copy_field(ans, "error"));
	err = api_reply_json(r, 200, reply);
done:
	orc_buf_release(&out);
	return err;
}

/* ?cwd= of a diff (NULL or "" when absent: the workspace); 422 when too long (replied). */
static int query_cwd(const char **out, struct api_req *r)
{
	const char *cwd = api_req_query(r, "cwd");

	if (cwd && strlen(cwd) >= API_PATH_MAX)
		return api_reply_error(r, ORC_EINVALID, "query parameter 'cwd' is longer than %d bytes",
				       API_PATH_MAX - 1);
	*out = cwd;
	return 0;
}

int api_git_diff(struct api_req *r)
{
	struct orc_buf out = ORC_BUF_INIT;
	struct api_agent a;
	const char *cwd = NULL;
	char *path, *esc;
	long status = 0;
	int err;

	if ((err = query_cwd(&cwd, r)) < 0 || (err = api_agent_get(&a, r)) < 0)
		return err;
	esc = cwd && *cwd ? orc_url_escape(cwd, "/") : NULL;
	path = api_own_mem(r, esc ? xasprintf("/git/diff?cwd=%s", esc) : xstrdup("/git/diff"));
	free(esc);
	orc_buf_init(&out, DIFF_MAX);
	if ((err = api_agent_json(&out, &status, r, &a, "GET", path, NULL, 0, GIT_TIMEOUT_MS)) < 0)
		goto done;
	err = api_reply_agent(r, status, &out);
done:
	orc_buf_release(&out);
	return err;
}

/* The fields of a reset body {ref?, cwd?, remove_ignored?} (NULL when
 * absent): 0, or ORC_EINVALID (api_fail). */
static int parse_reset(const char **ref, const char **cwd, int *remove_ignored, json_object *body,
		       struct api_req *r)
{
	int err;

	*ref = NULL;
	*cwd = NULL;
	*remove_ignored = 0;
	if ((err = orc_json_get_str(body, "ref", ref, API_ERRBUF(r))) < 0 ||
	    (err = body_cwd(cwd, body, r)) < 0 ||
	    (err = orc_json_get_bool(body, "remove_ignored", remove_ignored, API_ERRBUF(r))) < 0)
		return err;
	if (*ref && (!**ref || strlen(*ref) > 1024))
		return api_fail(r, ORC_EINVALID, "field 'ref' must be a non-empty string of at most "
				"1024 bytes");
	return 0;
}

int api_git_reset(struct api_req *r)
{
	struct orc_buf out = ORC_BUF_INIT;
	json_object *body, *req, *ans = NULL, *d;
	const char *ref, *cwd;
	long status = 0;
	int remove_ignored, err;

	if ((err = api_req_json_body_opt(&body, r)) < 0)
		return err;
	if ((err = parse_reset(&ref, &cwd, &remove_ignored, body, r)) < 0)
		return api_reply_failed(r, err);
	req = api_own_json(r, json_object_new_object());
	if (ref)
		json_object_object_add(req, "ref", json_object_new_string(ref));
	if (cwd)
		json_object_object_add(req, "cwd", json_object_new_string(cwd));
	json_object_object_add(req, "remove_ignored", json_object_new_boolean(remove_ignored));
	if ((err = git_call(&ans, &status, r, "POST", "/git/reset", req, GIT_TIMEOUT_MS, ANSWER_MAX,
			    &out)) < 0)
		goto done;
	/* An unknown ref or a workspace that is no repository is a failed
	 * step (recorded), answered with the agent's status. */
	d = api_own_json(r, json_object_new_object());
	json_object_object_add(d, "ref", ref ? json_object_new_string(ref) : NULL);
	json_object_object_add(d, "success", json_object_new_boolean(status == 200));
	if (cwd)
		json_object_object_add(d, "cwd", json_object_new_string(cwd));
	if (remove_ignored)
		json_object_object_add(d, "remove_ignored", json_object_new_boolean(1));
	if (status == 200)
		json_object_object_add(d, "head", copy_field(ans, "head"));
	else
		json_object_object_add(d, "error", api_agent_message(out.ptr, out.len));
	if (api_event_record(r, "git.reset", d) < 0) {
		err = api_reply_error(r, ORC_EUNAVAIL, "the reset of sandbox %s could not be recorded",
				      r->id);
		goto done;
	}
	err = api_reply_agent(r, status, &out);
done:
	orc_buf_release(&out);
	return err;
}
