#ifndef BENCH_MULTI_H
#define BENCH_MULTI_H
/*
 * bench_multi_get: `n` GETs of cfg->url + path (after `warmup` unrecorded
 * ones) with `conc` always in flight on one thread, each on its own
 * kept-alive connection. An answer with another status than `expect` is a
 * failure. op->busy_s is the measured wall time; out gets it and the
 * client's own CPU seconds (the client shares the machine's cores).
 */
struct bench_multi_result {
	double wall_s;
	double client_cpu_s;
};

int bench_multi_get(struct bench_multi_result *out, struct bench_op *op,
		    const struct bench_cfg *cfg, const char *path, long expect,
		    long n, long warmup, long conc, double max_s);
#endif
