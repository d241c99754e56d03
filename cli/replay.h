#ifndef CLI_REPLAY_H
#define CLI_REPLAY_H
#include <stddef.h>
#include <json-c/json.h>

#include "buf.h"
#include "cli.h"
#include "traj_compare.h"
/*
 * Trajectories on the client (docs/trajectory.md): `orchardctl trajectory
 * export` (cmd_trajectory.c) and `orchardctl replay` (cmd_replay.c drives,
 * replay.c replays one trajectory over HTTP; lib/traj_compare.c judges the
 * steps and builds the report, shared with POST /v1/trajectories/replay).
 */
struct replay_opts {
	const char *image;           /* NULL: the recorded image */
	enum orc_traj_compare compare;
	int keep;                    /* leave the new sandbox */
	long ready_timeout_s;
};

/*
 * Replay t into a fresh sandbox. *out is the trajectory's report (see
 * docs/trajectory.md, "Replay report"); text gets the human-readable
 * per-step report. Returns 0 when the replay ran (whatever it found), a
 * negative orc_err when it could not start (the report says why).
 */
int replay_run(json_object **out, struct orc_buf *text, const struct cli_config *cfg,
	       const struct orc_traj *t, const struct replay_opts *o);

/* commands.c */
int cmd_trajectory_export(struct cli_config *cfg, int argc, char **argv);
int cmd_trajectory_tree(struct cli_config *cfg, int argc, char **argv);   /* cmd_trajectory_tree.c */
int cmd_replay(struct cli_config *cfg, int argc, char **argv);
extern const char trajectory_usage[], trajectory_export_usage[], replay_usage[];
extern const struct option trajectory_export_opts[], replay_opts[];
extern const char trajectory_tree_usage[];
extern const struct option trajectory_tree_opts[];
#endif
