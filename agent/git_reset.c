#include "git_ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "files.h"
#include "fsutil.h"
#include "json.h"

/*
 * POST /git/reset: `git reset --hard REF` then `git clean -fd` (and -x with
 * remove_ignored): the working tree and index match REF exactly.
 */

void agent_handle_git_reset(struct agent_reply *reply, const struct agent_request *req)
{
	git_checkout_options co = GIT_CHECKOUT_OPTIONS_INIT;
	git_repository *repo = NULL;
	git_object *target = NULL;
	json_object *body = NULL, *o;
	const char *ref = "HEAD";
	char *cwd = NULL, msg[1024], oid[GIT_OID_HEXSZ + 1];
	int remove_ignored = 0, err;

	if (agent_git_load(reply) < 0 || agent_body_object(&body, reply, req) < 0)
		return;
	if (agent_field_path(&cwd, reply, body, "cwd", AGENT_WORKSPACE) < 0)
		goto done;
	if ((err = orc_json_get_str(body, "ref", &ref, msg, sizeof(msg))) < 0 ||
	    (err = orc_json_get_bool(body, "remove_ignored", &remove_ignored, msg, sizeof(msg))) < 0) {
		agent_reply_error(reply, 400, msg);
		goto done;
	}
	if (agent_git_open_cwd(&repo, reply, cwd) < 0)
		goto done;
	if (git_revparse_single(&target, repo, ref) < 0) {
		snprintf(msg, sizeof(msg), "unknown revision \"%s\": %s", ref, agent_git_error());
		agent_reply_error(reply, 400, msg);
		goto done;
	}
	/* git_reset forces a plain GIT_CHECKOUT_FORCE, so the untracked files
	 * go in a second checkout of the (now reset) index. */
	co.checkout_strategy = GIT_CHECKOUT_FORCE | GIT_CHECKOUT_REMOVE_UNTRACKED;
	if (remove_ignored)
		co.checkout_strategy |= GIT_CHECKOUT_REMOVE_IGNORED;
	if (git_reset(repo, target, GIT_RESET_HARD, NULL) < 0 || git_checkout_head(repo, &co) < 0) {
		snprintf(msg, sizeof(msg), "reset of \"%s\" to \"%s\" failed: %s", cwd, ref,
			 agent_git_error());
		agent_reply_error(reply, 500, msg);
		goto done;
	}
	git_oid_tostr(oid, sizeof(oid), git_object_id(target));
	o = json_object_new_object();
	json_object_object_add(o, "success", json_object_new_boolean(1));
	json_object_object_add(o, "cwd", json_object_new_string(cwd));
	json_object_object_add(o, "head", json_object_new_string(oid));
	agent_reply_json(reply, 200, o);
	json_object_put(o);
done:
	git_object_free(target);
	git_repository_free(repo);
	free(cwd);
	json_object_put(body);
}
