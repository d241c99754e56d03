/*
 * The step loop of a replay, shared by orchardctl and the api
 * (traj_replay.h).
 */
#include <stdio.h>

#include "base64.h"
#include "buf.h"
#include "err.h"
#include "json.h"
#include "traj_replay.h"

/* archive.upload: the recorded tar (base64) decoded, then the driver's PUT. */
static void step_archive(const struct orc_traj_replayer *ops, void *ctx, json_object *rec,
			 struct orc_traj_step *s)
{
	struct orc_buf tar = ORC_BUF_INIT;
	json_object *body = NULL, *content;
	size_t n;

	if (orc_traj_action_body(&body, s, rec, ORC_TRAJ_KIND_ARCHIVE))
		return;
	content = orc_json_field(body, "content");
	n = content ? (size_t)json_object_get_string_len(content) : 0;
	if (!content || !json_object_is_type(content, json_type_string) ||
	    n > 4 * ((size_t)ORC_TRAJ_ARCHIVE_MAX / 3 + 1) ||
	    orc_base64_decode(&tar, json_object_get_string(content), n) < 0) {
		orc_traj_refused(s, "the recorded archive content is not valid base64 of at most 1 MiB",
				 0, NULL);
		goto done;
	}
	ops->archive(ctx, rec, orc_json_str_or(rec, "path", ""), tar.ptr ? tar.ptr : "", tar.len, s);
done:
	orc_buf_release(&tar);
	json_object_put(body);
}

static void step_action(const struct orc_traj_replayer *ops, void *ctx, json_object *rec,
			enum orc_traj_kind kind, struct orc_traj_step *s)
{
	json_object *body = NULL;

	if (orc_traj_action_body(&body, s, rec, kind))
		return;
	ops->action(ctx, rec, kind, body, s);
	json_object_put(body);
}

static void replay_step(const struct orc_traj_replayer *ops, void *ctx, json_object *rec,
			struct orc_traj_step *s)
{
	enum orc_traj_kind kind = orc_traj_kind_of(orc_json_str_or(rec, "type", ""));

	if (ops->late && ops->late(ctx)) {
		orc_traj_refused(s, "not run: the replay passed its time limit", 0, NULL);
		return;
	}
	switch (kind) {
	case ORC_TRAJ_KIND_EXEC:
		ops->exec(ctx, rec, s);
		break;
	case ORC_TRAJ_KIND_FILE_WRITE:
	case ORC_TRAJ_KIND_GIT_APPLY:
	case ORC_TRAJ_KIND_GIT_RESET:
		step_action(ops, ctx, rec, kind, s);
		break;
	case ORC_TRAJ_KIND_ARCHIVE:
		step_archive(ops, ctx, rec, s);
		break;
	default:
		snprintf(s->why_buf, sizeof(s->why_buf), "%s does not know this kind of step",
			 ops->reader);
		orc_traj_skip(s, s->why_buf);
	}
}

const char *orc_traj_replay_steps(struct orc_traj_report *rep, const struct orc_traj *t,
				  const struct orc_traj_replayer *ops, void *ctx)
{
	size_t i, n = json_object_array_length(t->lines);
	const char *why = NULL;

	for (i = 1; i < n; i++) {
		struct orc_traj_step s = ORC_TRAJ_STEP_INIT;
		json_object *line = json_object_array_get_idx(t->lines, i);
		json_object *v = orc_json_field(line, "step");

		/* Lines without a step number are context (events, deletion, end). */
		if (!v || !json_object_is_type(v, json_type_int))
			continue;
		if (ops->stop && ops->stop(ctx, &why))
			return why;
		replay_step(ops, ctx, line, &s);
		orc_traj_report_step(rep, line, json_object_get_int64(v), &s);
	}
	return NULL;
}
