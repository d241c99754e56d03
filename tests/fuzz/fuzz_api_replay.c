/*
 * POST /trajectories/replay of the api (api/replay.c, included; the replay
 * itself, replay_run.c, is never reached): the query options (parse_opts:
 * image, compare, keep, ready_timeout) and the body (parse_body: JSON lines
 * split and trimmed, the step limit, orc_traj_set_add and _check with one
 * trajectory at most). lib/traj_compare.c alone is the trajectory target.
 * Input (fuzz_req.h): a query string line, then the body.
 *
 * Properties: a refusal is one 400 or 422 with a message; accepted options
 * are an image of 1-1024 bytes of UTF-8 without whitespace (or none), a
 * known compare mode, keep 0 or 1, a ready timeout of 1..3600 s (300 when
 * absent); an accepted body is exactly one complete trajectory of at most
 * 10000 steps whose first line is its header; nothing leaks.
 */
#include "fuzz_req.h"
#include "../../api/replay.c"

#define BODY_FUZZ_MAX (256u << 10)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct orc_traj_set set = ORC_TRAJ_SET_INIT;
	struct api_replay_opts o;
	struct api_req r;
	json_object *header;
	const char *q;

	memset(&r, 0, sizeof(r));
	if (size > BODY_FUZZ_MAX || fuzz_req_init(&r, data, size) < 0)
		goto done;
	if (parse_opts(&o, &r) == 0) {
		FUZZ_ASSERT(!r.replied);
		q = api_req_query(&r, "image");
		FUZZ_ASSERT(o.image == q);
		FUZZ_ASSERT(!o.image || (*o.image && strlen(o.image) <= IMAGE_MAX &&
					 !strpbrk(o.image, " \t\r\n") &&
					 fuzz_utf8_ok((const unsigned char *)o.image, strlen(o.image))));
		FUZZ_ASSERT((int)o.compare >= 0 && (int)o.compare < ORC_TRAJ_NCOMPARE);
		FUZZ_ASSERT(o.keep == 0 || o.keep == 1);
		FUZZ_ASSERT(o.ready_timeout_s >= 1 && o.ready_timeout_s <= READY_MAX_S);
		if (!api_req_query(&r, "ready_timeout"))
			FUZZ_ASSERT(o.ready_timeout_s == READY_DEFAULT_S);
	} else {
		FUZZ_ASSERT(r.replied && r.status == ORC_EINVALID);
	}
	fuzz_req_rearm(&r);
	if (parse_body(&set, &r) == 0) {
		FUZZ_ASSERT(!r.replied && set.n == 1 && set.v[0].complete && set.v[0].sandbox_id);
		FUZZ_ASSERT(json_object_array_length(set.v[0].lines) >= 2);
		header = json_object_array_get_idx(set.v[0].lines, 0);
		FUZZ_ASSERT(json_object_object_get_ex(header, "format", NULL) &&
			    json_object_object_get_ex(header, "sandbox", NULL));
	} else {
		FUZZ_ASSERT(r.replied && (r.status == API_EBADREQ || r.status == ORC_EINVALID));
	}
done:
	orc_traj_set_release(&set);
	api_req_release(&r);
	return 0;
}
