#ifndef CLI_REPLAY_H
#define CLI_REPLAY_H
#include <stddef.h>
#include <json-c/json.h>

#include "buf.h"
#include "cli.h"
/*
 * Trajectories on the client (docs/trajectory.md): `orchardctl trajectory
 * export` (cmd_trajectory.c) and `orchardctl replay` (cmd_replay.c drives,
 * replay.c replays one trajectory, replay_compare.c judges a step).
 */
#define REPLAY_FORMAT "orchard.trajectory"
#define REPLAY_VERSION 1

enum replay_compare { REPLAY_EXACT, REPLAY_EXIT_CODE, REPLAY_NONE };

/* What a step came to. */
enum replay_verdict { REPLAY_MATCH, REPLAY_DIVERGED, REPLAY_SKIPPED, REPLAY_ERROR };

struct replay_opts {
	const char *image;           /* NULL: the recorded image */
	enum replay_compare compare;
	int keep;                    /* leave the new sandbox */
	long ready_timeout_s;
};

/* One trajectory of the input: its lines in order, header first. */
struct replay_traj {
	const char *sandbox_id;      /* owned by lines */
	json_object *lines;          /* array */
	int complete;                /* an "end" line was seen */
};

/*
 * Replay t into a fresh sandbox. *out is the trajectory's report (see
 * docs/trajectory.md, "Replay report"); text gets the human-readable
 * per-step report. Returns 0 when the replay ran (whatever it found), a
 * negative orc_err when it could not start (the report says why).
 */
int replay_run(json_object **out, struct orc_buf *text, const struct cli_config *cfg,
	       const struct replay_traj *t, const struct replay_opts *o);

/*
 * Compare a recorded exec step with the replayed job under mode; *why
 * gets a short reason ("stdout differs") and diff a few lines showing the
 * first difference (both only on divergence).
 */
enum replay_verdict replay_compare_exec(const char **why, struct orc_buf *diff, json_object *rec,
					json_object *job, enum replay_compare mode);
/* "--- recorded NAME / +++ replayed NAME / @@ line N @@" and the lines around the first difference. */
void replay_diff(struct orc_buf *out, const char *name, const char *a, size_t alen, const char *b,
		 size_t blen);
const char *replay_verdict_name(enum replay_verdict v);
/* The command of a step on one line, shortened, for the report. */
void replay_command_text(char *out, size_t outlen, json_object *command);

/* commands.c */
int cmd_trajectory_export(struct cli_config *cfg, int argc, char **argv);
int cmd_replay(struct cli_config *cfg, int argc, char **argv);
extern const char trajectory_usage[], trajectory_export_usage[], replay_usage[];
extern const struct option trajectory_export_opts[], replay_opts[];
#endif
