/*
 * Scenario 5, the API read path, as a ladder of four GETs through nginx and
 * TLS, each adding one layer to the one before:
 *
 *   nginx static   GET /_error/404        nginx answers itself (an internal
 *                                         location asked from outside: 404)
 *   api root       GET /                  + FastCGI hop + api thread, no auth
 *   auth only      GET /v1/sandboxes/-x-  + auth_request subrequest (a key
 *                                         cache hit); the api refuses the
 *                                         malformed id before the database
 *   get sandbox    GET /v1/sandboxes/ID   + the database read and the view
 *
 * Each runs sequentially (latency) and at the configured concurrency
 * (throughput). Differences between neighbours price one layer each.
 */
#include "bench.h"

#include "multi.h"

struct rung {
	const char *name;
	const char *path;     /* NULL: the sandbox's own path */
	long expect;
};

static const struct rung rungs[] = {
	{ "nginx static",  "/_error/404",        404 },
	{ "api root",      "/",                  200 },
	{ "auth only",     "/v1/sandboxes/-x-",  404 },
	{ "get sandbox",   NULL,                 200 },
};
#define NRUNGS (sizeof(rungs) / sizeof(*rungs))

static int run_ladder(const struct bench_cfg *cfg, struct bench_report *r, const char *id,
		      size_t nrungs)
{
	struct bench_op seq[NRUNGS], par[NRUNGS];
	struct bench_stats ss[NRUNGS], sp[NRUNGS];
	struct bench_multi_result mr;
	json_object *cpu = json_object_new_object();
	char own[128], name[48];
	long nseq = cfg->n < 1000 ? cfg->n : 1000;
	double slice = cfg->max_seconds / (double)(2 * nrungs);
	size_t i;

	snprintf(own, sizeof(own), "/v1/sandboxes/%s", id ? id : "none");
	for (i = 0; i < nrungs; i++) {
		const char *path = rungs[i].path ? rungs[i].path : own;

		snprintf(name, sizeof(name), "%s c=1", rungs[i].name);
		bench_op_init(&seq[i], name);
		snprintf(name, sizeof(name), "%s c=%ld", rungs[i].name, cfg->concurrency);
		bench_op_init(&par[i], name);
		bench_multi_get(&mr, &seq[i], cfg, path, rungs[i].expect, nseq, 20, 1, slice);
		bench_multi_get(&mr, &par[i], cfg, path, rungs[i].expect, cfg->n,
				cfg->concurrency * 2, cfg->concurrency, slice);
		json_object_object_add(cpu, rungs[i].name,
				       json_object_new_double(mr.wall_s > 0 ?
							      mr.client_cpu_s / mr.wall_s : 0));
	}
	bench_report_ops(r, seq, nrungs);
	bench_report_ops(r, par, nrungs);
	bench_report_extra(r, "client_cpu_cores_at_concurrency", cpu);
	for (i = 0; i < nrungs; i++) {
		bench_op_stats(&ss[i], &seq[i]);
		bench_op_stats(&sp[i], &par[i]);
	}
	if (nrungs == NRUNGS) {
		bench_report_ratio(r, "get p50 / nginx static p50 (c=1)", ss[3].p50, ss[0].p50,
				   "the whole read path vs nginx+TLS alone");
		bench_report_ratio(r, "nginx static / get req/s", sp[0].tput, sp[3].tput,
				   "throughput lost to auth+api+database");
		bench_report_delta(r, "auth cache hit (c=1 p50)", ss[2].p50 - ss[1].p50, "ms",
				   "auth only p50 - api root p50: one auth_request subrequest");
		bench_report_delta(r, "auth cache hit (saturated)",
				   1e6 / sp[2].tput - 1e6 / sp[1].tput, "us/req",
				   "1/throughput(auth only) - 1/throughput(api root)");
		bench_report_delta(r, "database read (c=1 p50)", ss[3].p50 - ss[2].p50, "ms",
				   "get sandbox p50 - auth only p50");
		bench_report_delta(r, "database read (saturated)",
				   1e6 / sp[3].tput - 1e6 / sp[2].tput, "us/req",
				   "1/throughput(get sandbox) - 1/throughput(auth only)");
		bench_report_target(r, "GET /sandboxes/{id} req/s", sp[3].tput, 0, 5000, "req/s");
	}
	for (i = 0; i < nrungs; i++) {
		bench_op_release(&seq[i]);
		bench_op_release(&par[i]);
	}
	return 0;
}

int bench_read_path(const struct bench_cfg *cfg, struct bench_report *r)
{
	struct bench_http c;
	char id[64];
	int err = -1;

	if (bench_http_init_api(&c, cfg) < 0)
		return -1;
	if (bench_sandbox_create_ready(id, sizeof(id), &c, cfg->image, 60) < 0) {
		fprintf(stderr, "orchard-bench: sandbox for the read path: %s\n", c.err);
		goto done;
	}
	err = run_ladder(cfg, r, id, NRUNGS);
	bench_sandbox_delete(&c, id);
done:
	bench_http_release(&c);
	return err;
}

int bench_nginx_baseline(const struct bench_cfg *cfg, struct bench_report *r)
{
	/* The first rung alone: nginx and TLS, nothing of ours behind them. */
	return run_ladder(cfg, r, NULL, 1);
}
