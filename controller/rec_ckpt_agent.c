/*
 * Checkpoints of drivers that copy through the sandbox's agent
 * (kubernetes; docs/checkpoints.md): the loop's side of the driver ops
 * checkpoint_agent (the agent's address and token from the row, the
 * copy's sha256 onto the checkpoint row) and restore_agent (a fork's
 * files pushed to its agent once it answers /health, before the row
 * becomes ready; the sandbox fails when that fails).
 */
#include "rec.h"

#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "log.h"
#include "xalloc.h"

int rec_checkpoint_agent(struct rec *r, int64_t *bytes_out, char **why, const char *sandbox,
			 const char *ckpt)
{
	struct ctl_agent_ref agent;
	const char *p[2] = { sandbox, NULL };
	PGresult *res = NULL;
	char sha[65];
	int err;

	*why = NULL;
	if ((err = rec_db_query(r, &res, "SELECT agent_address, agent_token FROM sandboxes"
				" WHERE id = $1 AND agent_address IS NOT NULL", 1, p)) < 0)
		return err;
	if (PQntuples(res) != 1) {
		*why = xasprintf("sandbox %s has no agent address", sandbox);
		err = ORC_ENOTFOUND;
		goto out;
	}
	agent.id = sandbox;
	agent.address = PQgetvalue(res, 0, 0);
	agent.token = PQgetvalue(res, 0, 1);
	if ((err = r->drv->ops->checkpoint_agent(r->drv, bytes_out, sha, why, &agent, ckpt)) < 0)
		goto out;
	p[0] = ckpt;
	p[1] = sha;
	if (rec_db_exec(r, "UPDATE checkpoints SET sha256 = $2 WHERE id = $1", 2, p) < 0) {
		/* A copy without its checksum would never restore: drop it. */
		r->drv->ops->checkpoint_remove(r->drv, ckpt);
		*why = xstrdup("recording the checkpoint's sha256 failed");
		err = ORC_ERROR;
	}
out:
	PQclear(res);
	return err;
}

int rec_restore(struct rec *r, struct waiter *w)
{
	struct ctl_agent_ref agent = { w->id, w->address, w->token };
	const char *p[1] = { w->restore };
	PGresult *res = NULL;
	char *why = NULL, *msg;
	int err;

	if ((err = rec_db_query(r, &res, "SELECT sha256 FROM checkpoints WHERE id = $1", 1, p)) < 0)
		return ORC_EUNAVAIL;   /* the database: try again next round */
	err = r->drv->ops->restore_agent(r->drv, &why, &agent, w->restore,
					 PQntuples(res) == 1 && !PQgetisnull(res, 0, 0) ?
					 PQgetvalue(res, 0, 0) : NULL);
	PQclear(res);
	if (err < 0) {
		msg = xasprintf("restoring checkpoint %s failed: %s", w->restore,
				why ? why : "the copy failed");
		orc_log(ORC_LOG_WARN, "fork restore failed", "sandbox_id", w->id, "checkpoint_id",
			w->restore, "error", msg, NULL);
		rec_fail_sandbox(r, w->id, "pending", msg, w->handle);
		free(msg);
		free(why);
		return ORC_ERROR;
	}
	orc_log(ORC_LOG_INFO, "fork restored", "sandbox_id", w->id, "checkpoint_id", w->restore, NULL);
	free(w->restore);
	w->restore = NULL;
	return 0;
}
