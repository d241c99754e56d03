#ifndef ORC_TRAJ_REPLAY_H
#define ORC_TRAJ_REPLAY_H
#include <stddef.h>
#include <json-c/json.h>

#include "traj_compare.h"
/*
 * The step loop of a replay (docs/trajectory.md), one copy for both
 * drivers: `orchardctl replay` (cli/replay.c, over HTTP) and POST
 * /v1/trajectories/replay (api/replay_run.c, in process). It decides which
 * lines are steps, which kind each is, decodes an archive's recorded tar,
 * and reports every step into the report; the driver only sends requests
 * and judges their answers (traj_compare.h), through this table.
 */

/* Each function sends one step of sandbox ctx and judges it into s. */
struct orc_traj_replayer {
	void (*exec)(void *ctx, json_object *rec, struct orc_traj_step *s);
	/* file.write, git.apply, git.reset: body from orc_traj_action_body(). */
	void (*action)(void *ctx, json_object *rec, enum orc_traj_kind kind, json_object *body,
		       struct orc_traj_step *s);
	/* archive.upload: the recorded tar, to PUT at path. */
	void (*archive)(void *ctx, json_object *rec, const char *path, const char *tar, size_t len,
			struct orc_traj_step *s);
	/* Optional, before each step: 1 ends the replay (nobody would read
	 * the report), with *why as its error. */
	int (*stop)(void *ctx, const char **why);
	/* Optional, before each step: 1 when the replay's time is up (the
	 * step is an error, not run). */
	int (*late)(void *ctx);
	/* Who skips a step of an unknown kind: "this server", "this orchardctl". */
	const char *reader;
};

/* The largest recorded archive a replay uploads again (files_raw.c
 * records the first MiB). */
#define ORC_TRAJ_ARCHIVE_MAX (1u << 20)

/*
 * Replay every step of t into rep (after orc_traj_report_started), in
 * order. NULL, or the error that ended the replay early (ops->stop's).
 */
const char *orc_traj_replay_steps(struct orc_traj_report *rep, const struct orc_traj *t,
				  const struct orc_traj_replayer *ops, void *ctx);
#endif
