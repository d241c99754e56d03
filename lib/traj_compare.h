#ifndef ORC_TRAJ_COMPARE_H
#define ORC_TRAJ_COMPARE_H
#include <stddef.h>
#include <stdint.h>
#include <json-c/json.h>

#include "buf.h"
/*
 * Replaying trajectories (docs/trajectory.md), the part that does not
 * depend on how a request reaches the API: reading a trajectory's lines,
 * the request body each step is replayed with, judging each replayed
 * outcome against the recording, and the report. `orchardctl replay`
 * (cli/replay.c, over HTTP) and POST /v1/trajectories/replay (api/replay*.c,
 * in process) both drive their replays through it, so their reports have
 * the same shape and the same verdicts.
 *
 * A driver, per trajectory:
 *
 *   orc_traj_report_init(&rep, text, t->sandbox_id, image);
 *   body = orc_traj_create_body(spec, image, t->sandbox_id);   // create
 *   orc_traj_report_sandbox(&rep, new_id);                       // wait
 *   orc_traj_report_started(&rep);
 *   for each line with a "step":
 *       struct orc_traj_step s = ORC_TRAJ_STEP_INIT;
 *       ... send orc_traj_exec_body() / orc_traj_action_body(), then
 *       orc_traj_judge_exec() / orc_traj_judge_action() (or _skip, _refused)
 *       orc_traj_report_step(&rep, line, n, &s);
 *   report = orc_traj_report_finish(&rep, error, keep);
 */

#define ORC_TRAJ_FORMAT "orchard.trajectory"
#define ORC_TRAJ_VERSION 1
/* The label a replay's sandbox carries: the id of the sandbox it replays. */
#define ORC_TRAJ_REPLAY_LABEL "orchard/replay-of"

enum orc_traj_compare { ORC_TRAJ_EXACT, ORC_TRAJ_EXIT_CODE, ORC_TRAJ_NONE };
#define ORC_TRAJ_NCOMPARE 3
/* "exact", "exit-code", "none"; ORC_EINVALID for anything else. */
int orc_traj_compare_parse(enum orc_traj_compare *out, const char *s);
const char *orc_traj_compare_name(enum orc_traj_compare mode);

/* What a step came to. */
enum orc_traj_verdict { ORC_TRAJ_MATCH, ORC_TRAJ_DIVERGED, ORC_TRAJ_SKIPPED, ORC_TRAJ_ERROR };
#define ORC_TRAJ_NVERDICT 4
/* "match", "diverged", "skipped", "error" (the report's "result"). */
const char *orc_traj_verdict_name(enum orc_traj_verdict v);

/* The step lines a replay re-applies (a line's "type"). */
enum orc_traj_kind {
	ORC_TRAJ_KIND_EXEC,
	ORC_TRAJ_KIND_FILE_WRITE,
	ORC_TRAJ_KIND_GIT_APPLY,
	ORC_TRAJ_KIND_GIT_RESET,
	ORC_TRAJ_KIND_ARCHIVE,          /* archive.upload */
	ORC_TRAJ_KIND_UNKNOWN,          /* a later version's step: skipped */
};
enum orc_traj_kind orc_traj_kind_of(const char *type);

/* ---- reading --------------------------------------------------------------------- */

/* One trajectory of the input: its lines in order, header first. */
struct orc_traj {
	const char *sandbox_id;         /* owned by lines */
	json_object *lines;             /* array */
	int complete;                   /* an "end" line was seen */
};

/* The trajectories of one input (a bulk export holds many). */
struct orc_traj_set {
	struct orc_traj *v;
	size_t n, alloc;
	size_t max;                     /* at most this many trajectories; 0: no limit */
};
#define ORC_TRAJ_SET_INIT { NULL, 0, 0, 0 }
void orc_traj_set_release(struct orc_traj_set *s);
/*
 * Add one parsed line: a header (checked: format, version, a "sandbox"
 * object) starts a trajectory, other lines join the trajectory their
 * "sandbox_id" names, which must be open (header seen, no end yet). The
 * set takes line on success; on failure (ORC_EINVALID, or ORC_ETOOBIG past
 * max) msg says why and line is the caller's.
 */
int orc_traj_set_add(struct orc_traj_set *s, json_object *line, char *msg, size_t msglen);
/* After the last line: at least one trajectory, each with its "end" line. */
int orc_traj_set_check(const struct orc_traj_set *s, char *msg, size_t msglen);

/* ---- what a replay sends ----------------------------------------------------------- */

/*
 * POST /sandboxes body for a replay of the header's spec: its image (or
 * image when not NULL), cpu, memory, block_network, env and workdir; not
 * its labels (a replay must not join the selection its recording was
 * exported by) but ORC_TRAJ_REPLAY_LABEL = recorded_id.
 */
json_object *orc_traj_create_body(json_object *spec, const char *image, const char *recorded_id);
/* POST /sandboxes/{id}/exec body (wait: true) for an exec step; *timeout_s
 * gets its timeout (the recorded one, or 300). */
json_object *orc_traj_exec_body(json_object *rec, int64_t *timeout_s);

/* ---- one step's outcome ------------------------------------------------------------ */

struct orc_traj_step {
	enum orc_traj_verdict verdict;
	const char *why;                /* points to static text or why_buf; NULL: none */
	char why_buf[256];
	struct orc_buf diff;            /* a few lines showing where it diverged */
	json_object *replayed;          /* what the replay saw (owned), or NULL */
};
#define ORC_TRAJ_STEP_INIT { ORC_TRAJ_MATCH, NULL, "", ORC_BUF_INIT, NULL }
void orc_traj_step_release(struct orc_traj_step *s);

/*
 * The body of a file.write, git.apply or git.reset step (the route is the
 * driver's), or for archive.upload {path, content (base64 tar)}, which the
 * driver decodes and PUTs. 1 when the step cannot be replayed (a file or
 * archive without its content): then *s is marked skipped and *out is NULL.
 */
int orc_traj_action_body(json_object **out, struct orc_traj_step *s, json_object *rec,
			 enum orc_traj_kind kind);

void orc_traj_skip(struct orc_traj_step *s, const char *why);
/*
 * The API refused or failed: s is an error "what: detail (HTTP status)";
 * status 0 means no response came ("what" alone). answer may be NULL.
 */
void orc_traj_refused(struct orc_traj_step *s, const char *what, long status, json_object *answer);
/*
 * Judge a replayed exec: job is the finished job object. Compares under
 * mode (exact: timed_out, exit_code, stdout, stderr; exit-code: the first
 * two; none: nothing) and sets s->replayed; a recorded step that had not
 * finished is skipped.
 */
void orc_traj_judge_exec(struct orc_traj_step *s, json_object *rec, json_object *job,
			 enum orc_traj_compare mode);
/*
 * Judge a replayed file, git or archive step from the API's status and
 * JSON answer: "success" compared with the recording (unless mode is
 * none); a status >= 400 other than 409 and 422 is an error.
 */
void orc_traj_judge_action(struct orc_traj_step *s, json_object *rec, long status,
			   json_object *answer, enum orc_traj_compare mode);

/* "--- recorded NAME / +++ replayed NAME / @@ line N @@" and the lines
 * around the first difference of a and b. */
void orc_traj_diff(struct orc_buf *out, const char *name, const char *a, size_t alen, const char *b,
		   size_t blen);
/* The command of a step on one line, shortened, for the report. */
void orc_traj_command_text(char *out, size_t outlen, json_object *command);

/* ---- the report ----------------------------------------------------------------------- */

/* One trajectory's report being built. */
struct orc_traj_report {
	json_object *obj;
	json_object *steps;             /* its "step_results" */
	struct orc_buf *text;           /* the text report too, when not NULL */
	char *replay_id;
	int counts[ORC_TRAJ_NVERDICT];
};
void orc_traj_report_init(struct orc_traj_report *rep, struct orc_buf *text, const char *sandbox_id,
			  const char *image);
/* The sandbox replayed into was created (its id is reported, kept or not). */
void orc_traj_report_sandbox(struct orc_traj_report *rep, const char *replay_id);
/* ... and is ready: the steps follow. */
void orc_traj_report_started(struct orc_traj_report *rep);
/* Add step n (rec is its recorded line) and release s. */
void orc_traj_report_step(struct orc_traj_report *rep, json_object *rec, int64_t n,
			  struct orc_traj_step *s);
/*
 * The report: {sandbox_id, image, replay_sandbox_id, result, steps, matched,
 * diverged, skipped, errors, kept, error?, step_results}. error (NULL: none)
 * says why the replay could not run or stopped; it makes the result
 * "error". The caller owns the object; rep is released.
 */
json_object *orc_traj_report_finish(struct orc_traj_report *rep, const char *error, int kept);
/*
 * {trajectories, matched, diverged, errors, compare, steps: {matched,
 * diverged, skipped, errors}} over n reports; *all_matched is 1 when every
 * trajectory's result is "match".
 */
json_object *orc_traj_summary(json_object *const *reports, size_t n, enum orc_traj_compare mode,
			      int *all_matched);
#endif
