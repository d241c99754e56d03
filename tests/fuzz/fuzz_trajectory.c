/*
 * A trajectory as POST /v1/trajectories/replay and `orchardctl replay`
 * read it (lib/traj_compare.c): JSON lines into orc_traj_set_add, then
 * orc_traj_set_check, then the bodies a replay would send for the header
 * and every step.
 *
 * Properties: a refused line or set says why; an accepted set holds 1 to
 * max complete trajectories; every body is a JSON object (an exec body has
 * a positive timeout), or the step is marked skipped; nothing leaks.
 */
#include "fuzz.h"
#include "json.h"
#include "traj_compare.h"

#define LINES_MAX 256

static void replay_bodies(const struct orc_traj *t)
{
	size_t i, n = json_object_array_length(t->lines);
	json_object *header = json_object_array_get_idx(t->lines, 0), *spec = NULL, *body;
	int64_t timeout = 0;

	FUZZ_ASSERT(t->complete && n >= 2);
	json_object_object_get_ex(header, "sandbox", &spec);
	body = orc_traj_create_body(spec, NULL, t->sandbox_id);
	FUZZ_ASSERT(body && json_object_is_type(body, json_type_object));
	json_object_put(body);
	for (i = 1; i < n; i++) {
		json_object *rec = json_object_array_get_idx(t->lines, i), *type = NULL;
		struct orc_traj_step s = ORC_TRAJ_STEP_INIT;
		enum orc_traj_kind kind;

		if (!json_object_object_get_ex(rec, "type", &type) || !json_object_is_type(type, json_type_string))
			continue;
		kind = orc_traj_kind_of(json_object_get_string(type));
		if (kind == ORC_TRAJ_KIND_EXEC) {
			body = orc_traj_exec_body(rec, &timeout);
			FUZZ_ASSERT(body && json_object_is_type(body, json_type_object) && timeout > 0);
			json_object_put(body);
		} else if (kind != ORC_TRAJ_KIND_UNKNOWN) {
			body = NULL;
			if (orc_traj_action_body(&body, &s, rec, kind) == 0)
				FUZZ_ASSERT(body && json_object_is_type(body, json_type_object));
			else
				FUZZ_ASSERT(!body && s.verdict == ORC_TRAJ_SKIPPED);
			json_object_put(body);
		}
		orc_traj_step_release(&s);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct orc_traj_set set = ORC_TRAJ_SET_INIT;
	const char *p = (const char *)data, *end = p + size, *nl;
	char msg[256];
	size_t i, nlines = 0;

	set.max = 8;
	while (p < end && nlines < LINES_MAX) {
		json_object *line = NULL;
		nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl)
			nl = end;
		if (nl > p) {
			nlines++;
			if (orc_json_parse_object(&line, p, (size_t)(nl - p), NULL, 0) < 0)
				goto done;
			msg[0] = '\0';
			if (orc_traj_set_add(&set, line, msg, sizeof(msg)) < 0) {
				FUZZ_ASSERT(msg[0]);
				json_object_put(line);
				goto done;
			}
		}
		p = nl + 1;
	}
	msg[0] = '\0';
	if (orc_traj_set_check(&set, msg, sizeof(msg)) < 0) {
		FUZZ_ASSERT(msg[0]);
		goto done;
	}
	FUZZ_ASSERT(set.n >= 1 && set.n <= 8);
	for (i = 0; i < set.n; i++)
		replay_bodies(&set.v[i]);
done:
	orc_traj_set_release(&set);
	return 0;
}
