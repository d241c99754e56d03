/*
 * Scenario 2, create latency: sequential create + wait + delete of the
 * `host` image. Each step is timed on its own and the cycle as a whole;
 * issue 8's targets apply to the whole cycle (create -> ready -> delete
 * answered). The controller tears a deleted sandbox down in the
 * background, so that work overlaps the next cycles, as it would in use.
 */
#include "bench.h"

#include "json.h"

static int is_ready(struct bench_http *c)
{
	json_object *o = bench_http_json(c);
	const char *st = NULL;
	int ok = o && !orc_json_get_str(o, "status", &st, NULL, 0) && !strcmp(st, "ready");

	json_object_put(o);
	return ok;
}

int bench_create_latency(const struct bench_cfg *cfg, struct bench_report *r)
{
	struct bench_http c;
	struct bench_op ops[5];
	struct bench_stats s;
	double deadline = bench_now_ms() + cfg->max_seconds * 1e3, t_start;
	long i;
	size_t k;

	bench_op_init(&ops[0], "create (POST)");
	bench_op_init(&ops[1], "wait until ready");
	bench_op_init(&ops[2], "create -> ready");
	bench_op_init(&ops[3], "delete");
	bench_op_init(&ops[4], "cycle create+wait+delete");
	if (bench_http_init_api(&c, cfg) < 0)
		return -1;
	t_start = bench_now_ms();
	for (i = 0; i < cfg->n + cfg->warmup && bench_now_ms() < deadline; i++) {
		int record = i >= cfg->warmup;
		char id[64], path[128];
		const char *sid = NULL;
		json_object *o;
		double t0 = bench_now_ms(), t1, t2, t3;

		if (i == cfg->warmup)
			t_start = t0;
		if (bench_http_do(&c, "POST", "/v1/sandboxes", "{\"image\":\"host\"}", 30000) < 0 ||
		    (c.status != 200 && c.status != 201) || !(o = bench_http_json(&c))) {
			if (record)
				bench_op_fail(&ops[0], "HTTP %ld %s %.100s", c.status, c.err,
					      orc_buf_cstr(&c.body));
			continue;
		}
		if (orc_json_get_str(o, "sandbox_id", &sid, NULL, 0) || !bench_valid_id(sid)) {
			json_object_put(o);
			if (record)
				bench_op_fail(&ops[0], "no sandbox_id in %.100s", orc_buf_cstr(&c.body));
			continue;
		}
		snprintf(id, sizeof(id), "%s", sid);
		json_object_put(o);
		t1 = bench_now_ms();
		snprintf(path, sizeof(path), "/v1/sandboxes/%s/wait?timeout=60", id);
		if (bench_http_do(&c, "GET", path, NULL, 70000) < 0 || c.status != 200 ||
		    !is_ready(&c)) {
			if (record)
				bench_op_fail(&ops[1], "HTTP %ld %s %.100s", c.status, c.err,
					      orc_buf_cstr(&c.body));
			bench_sandbox_delete(&c, id);
			continue;
		}
		t2 = bench_now_ms();
		if (bench_sandbox_delete(&c, id) < 0) {
			if (record)
				bench_op_fail(&ops[3], "%s", c.err);
			continue;
		}
		t3 = bench_now_ms();
		if (!record)
			continue;
		bench_op_ok(&ops[0], t1 - t0);
		bench_op_ok(&ops[1], t2 - t1);
		bench_op_ok(&ops[2], t2 - t0);
		bench_op_ok(&ops[3], t3 - t2);
		bench_op_ok(&ops[4], t3 - t0);
	}
	if (i < cfg->n + cfg->warmup)
		bench_report_note(r, "deadline of %.0f s reached after %ld cycles", cfg->max_seconds, i);
	for (k = 0; k < 5; k++)
		ops[k].busy_s = (bench_now_ms() - t_start) / 1e3;
	bench_report_ops(r, ops, 5);
	bench_op_stats(&s, &ops[4]);
	bench_report_target(r, "cycle p50", s.p50, 1, 30, "ms");
	bench_report_target(r, "cycle p99", s.p99, 1, 100, "ms");
	bench_op_stats(&s, &ops[2]);
	bench_report_note(r, "create -> ready alone: p50 %.1f ms, p99 %.1f ms", s.p50, s.p99);
	for (k = 0; k < 5; k++)
		bench_op_release(&ops[k]);
	bench_http_release(&c);
	return 0;
}
