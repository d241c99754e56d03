/* Latency samples, percentiles, the printed table and the JSON report. */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <time.h>
#include <unistd.h>

#include "xalloc.h"

double bench_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void bench_op_init(struct bench_op *op, const char *name)
{
	memset(op, 0, sizeof(*op));
	snprintf(op->name, sizeof(op->name), "%s", name);
}

void bench_op_release(struct bench_op *op)
{
	free(op->ms);
	op->ms = NULL;
	op->n_ok = op->alloc = 0;
}

void bench_op_ok(struct bench_op *op, double ms)
{
	if (op->n_ok == op->alloc) {
		op->alloc = op->alloc ? orc_mul_size(op->alloc, 2) : 256;
		op->ms = xrealloc(op->ms, orc_mul_size(op->alloc, sizeof(double)));
	}
	op->ms[op->n_ok++] = ms;
}

void bench_op_fail(struct bench_op *op, const char *fmt, ...)
{
	va_list ap;

	if (!op->n_fail++ ) {
		va_start(ap, fmt);
		vsnprintf(op->first_error, sizeof(op->first_error), fmt, ap);
		va_end(ap);
	}
}

void bench_op_merge(struct bench_op *dst, const struct bench_op *src)
{
	size_t i;

	for (i = 0; i < src->n_ok; i++)
		bench_op_ok(dst, src->ms[i]);
	if (src->n_fail && !dst->n_fail)
		memcpy(dst->first_error, src->first_error, sizeof(dst->first_error));
	dst->n_fail += src->n_fail;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted samples. */
static double pct(const double *v, size_t n, double p)
{
	size_t rank;

	if (!n)
		return NAN;
	rank = (size_t)ceil(p / 100.0 * (double)n);
	if (rank < 1)
		rank = 1;
	return v[rank - 1];
}

void bench_op_stats(struct bench_stats *out, struct bench_op *op)
{
	struct bench_stats s;
	double sum = 0;
	size_t i, total = op->n_ok + op->n_fail;

	qsort(op->ms, op->n_ok, sizeof(double), cmp_double);
	for (i = 0; i < op->n_ok; i++)
		sum += op->ms[i];
	s.min = op->n_ok ? op->ms[0] : NAN;
	s.max = op->n_ok ? op->ms[op->n_ok - 1] : NAN;
	s.p50 = pct(op->ms, op->n_ok, 50);
	s.p90 = pct(op->ms, op->n_ok, 90);
	s.p99 = pct(op->ms, op->n_ok, 99);
	s.mean = op->n_ok ? sum / (double)op->n_ok : NAN;
	s.tput = op->busy_s > 0 ? (double)op->n_ok / op->busy_s : NAN;
	s.success = total ? (double)op->n_ok / (double)total : NAN;
	*out = s;
}

/* ---- report ----------------------------------------------------------- */

static json_object *jnum(double v)
{
	/* JSON has no NaN: absent figures are null. */
	if (isnan(v) || isinf(v))
		return NULL;
	return json_object_new_double(round(v * 1000.0) / 1000.0);
}

void bench_report_init(struct bench_report *r, const char *scenario,
		       const struct bench_cfg *cfg)
{
	json_object *p = json_object_new_object();

	r->scenario = scenario;
	r->root = json_object_new_object();
	json_object_object_add(r->root, "scenario", json_object_new_string(scenario));
	json_object_object_add(p, "n", json_object_new_int64(cfg->n));
	json_object_object_add(p, "concurrency", json_object_new_int64(cfg->concurrency));
	json_object_object_add(p, "execs_per_sandbox", json_object_new_int64(cfg->execs));
	json_object_object_add(p, "warmup", json_object_new_int64(cfg->warmup));
	json_object_object_add(p, "max_seconds", jnum(cfg->max_seconds));
	json_object_object_add(p, "image", json_object_new_string(cfg->image));
	json_object_object_add(r->root, "params", p);
	json_object_object_add(r->root, "ops", json_object_new_array());
	json_object_object_add(r->root, "ratios", json_object_new_array());
	json_object_object_add(r->root, "deltas", json_object_new_array());
	json_object_object_add(r->root, "targets", json_object_new_array());
	json_object_object_add(r->root, "extra", json_object_new_object());
	json_object_object_add(r->root, "notes", json_object_new_array());
	printf("\n== %s\n", scenario);
}

void bench_report_release(struct bench_report *r)
{
	json_object_put(r->root);
	r->root = NULL;
}

static json_object *field(struct bench_report *r, const char *key)
{
	json_object *v = NULL;

	json_object_object_get_ex(r->root, key, &v);
	return v;
}

void bench_report_ops(struct bench_report *r, struct bench_op *ops, size_t n)
{
	json_object *arr = field(r, "ops");
	size_t i;

	printf("%-26s %6s %6s %8s %8s %8s %8s %8s %9s %7s\n", "op (ms)", "n", "ok",
	       "min", "p50", "p90", "p99", "max", "ops/s", "ok%");
	for (i = 0; i < n; i++) {
		struct bench_stats s;
		json_object *o = json_object_new_object();
		size_t total = ops[i].n_ok + ops[i].n_fail;

		bench_op_stats(&s, &ops[i]);
		printf("%-26s %6zu %6zu %8.3f %8.3f %8.3f %8.3f %8.3f %9.1f %6.1f%%\n",
		       ops[i].name, total, ops[i].n_ok, s.min, s.p50, s.p90, s.p99,
		       s.max, s.tput, s.success * 100.0);
		if (ops[i].n_fail)
			printf("    %zu failed; first: %s\n", ops[i].n_fail, ops[i].first_error);
		json_object_object_add(o, "op", json_object_new_string(ops[i].name));
		json_object_object_add(o, "n", json_object_new_int64((int64_t)total));
		json_object_object_add(o, "ok", json_object_new_int64((int64_t)ops[i].n_ok));
		json_object_object_add(o, "min_ms", jnum(s.min));
		json_object_object_add(o, "p50_ms", jnum(s.p50));
		json_object_object_add(o, "p90_ms", jnum(s.p90));
		json_object_object_add(o, "p99_ms", jnum(s.p99));
		json_object_object_add(o, "max_ms", jnum(s.max));
		json_object_object_add(o, "mean_ms", jnum(s.mean));
		json_object_object_add(o, "throughput_per_s", jnum(s.tput));
		json_object_object_add(o, "success_rate", jnum(s.success));
		json_object_object_add(o, "first_error", ops[i].n_fail ?
				       json_object_new_string(ops[i].first_error) : NULL);
		json_object_array_add(arr, o);
	}
	fflush(stdout);
}

void bench_report_ratio(struct bench_report *r, const char *name, double a,
			double b, const char *what)
{
	json_object *o = json_object_new_object();
	double v = b > 0 ? a / b : NAN;

	printf("ratio %-32s %8.3f / %8.3f = %6.2fx  (%s)\n", name, a, b, v, what);
	json_object_object_add(o, "name", json_object_new_string(name));
	json_object_object_add(o, "value", jnum(v));
	json_object_object_add(o, "numerator", jnum(a));
	json_object_object_add(o, "denominator", jnum(b));
	json_object_object_add(o, "what", json_object_new_string(what));
	json_object_array_add(field(r, "ratios"), o);
	fflush(stdout);
}

void bench_report_delta(struct bench_report *r, const char *name, double v,
			const char *unit, const char *what)
{
	json_object *o = json_object_new_object();

	printf("delta %-32s %10.3f %-5s (%s)\n", name, v, unit, what);
	json_object_object_add(o, "name", json_object_new_string(name));
	json_object_object_add(o, "value", jnum(v));
	json_object_object_add(o, "unit", json_object_new_string(unit));
	json_object_object_add(o, "what", json_object_new_string(what));
	json_object_array_add(field(r, "deltas"), o);
	fflush(stdout);
}

void bench_report_target(struct bench_report *r, const char *name, double value,
			 int le, double limit, const char *unit)
{
	json_object *o = json_object_new_object();
	int met = !isnan(value) && (le ? value <= limit : value >= limit);

	printf("target %-31s %10.3f %s %g %-6s %s\n", name, value, le ? "<=" : ">=",
	       limit, unit, met ? "met" : "NOT MET");
	json_object_object_add(o, "name", json_object_new_string(name));
	json_object_object_add(o, "value", jnum(value));
	json_object_object_add(o, "cmp", json_object_new_string(le ? "<=" : ">="));
	json_object_object_add(o, "limit", jnum(limit));
	json_object_object_add(o, "unit", json_object_new_string(unit));
	json_object_object_add(o, "met", json_object_new_boolean(met));
	json_object_array_add(field(r, "targets"), o);
	fflush(stdout);
}

void bench_report_extra(struct bench_report *r, const char *key, json_object *v)
{
	json_object_object_add(field(r, "extra"), key, v);
}

void bench_report_note(struct bench_report *r, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	printf("note: %s\n", msg);
	fflush(stdout);
	json_object_array_add(field(r, "notes"), json_object_new_string(msg));
}

int bench_report_write(struct bench_report *r, const char *path)
{
	char *tmp = xasprintf("%s.tmp", path);
	const char *s = json_object_to_json_string_ext(r->root, JSON_C_TO_STRING_PRETTY |
						       JSON_C_TO_STRING_NOSLASHESCAPE);
	size_t len = strlen(s), off = 0;
	int fd, err = -1;

	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		fprintf(stderr, "orchard-bench: open() \"%s\" failed: %s\n", tmp, strerror(errno));
		goto done;
	}
	while (off < len) {
		ssize_t w = write(fd, s + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			fprintf(stderr, "orchard-bench: write() \"%s\" failed: %s\n", tmp,
				strerror(errno));
			goto done;
		}
		off += (size_t)w;
	}
	if (write(fd, "\n", 1) != 1 || close(fd) < 0) {
		fd = -1;
		fprintf(stderr, "orchard-bench: writing \"%s\" failed\n", tmp);
		goto done;
	}
	fd = -1;
	if (rename(tmp, path) < 0) {
		fprintf(stderr, "orchard-bench: rename() \"%s\" failed: %s\n", path, strerror(errno));
		goto done;
	}
	err = 0;
done:
	if (fd >= 0)
		close(fd);
	free(tmp);
	return err;
}
