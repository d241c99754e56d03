#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>

#include "err.h"
#include "metrics.h"
#include "unit.h"

static const char *const route_status[] = { "route", "status", NULL };

/* The rendered text of reg (the caller frees). */
static char *render(struct orc_metrics *reg)
{
	struct orc_buf b = ORC_BUF_INIT;
	size_t len;

	CHECK(orc_metrics_render(&b, reg) == 0);
	return orc_buf_detach(&b, &len);
}

static void metrics_counter_renders_help_type_and_labelled_samples(void)
{
	struct orc_metrics reg = ORC_METRICS_INIT;
	struct orc_metric *c = NULL;
	char *text;

	CHECK(orc_metric_new(&c, &reg, ORC_METRIC_COUNTER, "x_requests_total",
			     "Requests \\ served.\nSecond line.", route_status, NULL, 0, 16) == 0);
	CHECK(orc_metric_inc(c, ORC_LABELS("/jobs/{id}", "200")) == 0);
	CHECK(orc_metric_add(c, ORC_LABELS("/jobs/{id}", "200"), 2) == 0);
	CHECK(orc_metric_inc(c, ORC_LABELS("a\"b\\c\nd", "404")) == 0);
	text = render(&reg);
	CHECK_STR(text,
		  "# HELP x_requests_total Requests \\\\ served.\\nSecond line.\n"
		  "# TYPE x_requests_total counter\n"
		  "x_requests_total{route=\"/jobs/{id}\",status=\"200\"} 3\n"
		  "x_requests_total{route=\"a\\\"b\\\\c\\nd\",status=\"404\"} 1\n");
	CHECK(orc_metric_get(c, ORC_LABELS("/jobs/{id}", "200")) == 3);
	CHECK(orc_metric_get(c, ORC_LABELS("/nope", "200")) == 0);
	free(text);
	orc_metrics_release(&reg);
	orc_metrics_release(&reg); /* twice is harmless */
}

static void metrics_histogram_buckets_are_cumulative_and_le_inclusive(void)
{
	static const double bounds[] = { 0.005, 0.5, 1 };
	struct orc_metrics reg = ORC_METRICS_INIT;
	struct orc_metric *h = NULL;
	char *text;

	CHECK(orc_metric_new(&h, &reg, ORC_METRIC_HISTOGRAM, "x_seconds", "Durations.",
			     ORC_LABELS("op"), bounds, 3, 4) == 0);
	CHECK(orc_metric_observe(h, ORC_LABELS("run"), 0.005) == 0);   /* le is inclusive */
	CHECK(orc_metric_observe(h, ORC_LABELS("run"), 0.25) == 0);
	CHECK(orc_metric_observe(h, ORC_LABELS("run"), 0.25) == 0);
	CHECK(orc_metric_observe(h, ORC_LABELS("run"), 7) == 0);       /* only in +Inf */
	text = render(&reg);
	CHECK_STR(text,
		  "# HELP x_seconds Durations.\n"
		  "# TYPE x_seconds histogram\n"
		  "x_seconds_bucket{op=\"run\",le=\"0.005\"} 1\n"
		  "x_seconds_bucket{op=\"run\",le=\"0.5\"} 3\n"
		  "x_seconds_bucket{op=\"run\",le=\"1\"} 3\n"
		  "x_seconds_bucket{op=\"run\",le=\"+Inf\"} 4\n"
		  "x_seconds_sum{op=\"run\"} 7.505\n"
		  "x_seconds_count{op=\"run\"} 4\n");
	CHECK(orc_metric_get(h, ORC_LABELS("run")) == 4);
	free(text);
	orc_metrics_release(&reg);
}

static void metrics_unlabelled_family_shows_zero_before_any_observation(void)
{
	static const double bounds[] = { 1 };
	struct orc_metrics reg = ORC_METRICS_INIT;
	struct orc_metric *g = NULL, *h = NULL, *l = NULL;
	char *text;

	CHECK(orc_metric_new(&g, &reg, ORC_METRIC_GAUGE, "x_leader", "Leader.", NULL, NULL, 0, 1) == 0);
	CHECK(orc_metric_new(&h, &reg, ORC_METRIC_HISTOGRAM, "x_h", "H.", NULL, bounds, 1, 1) == 0);
	CHECK(orc_metric_new(&l, &reg, ORC_METRIC_GAUGE, "x_l", "L.", ORC_LABELS("state"), NULL, 0, 4) == 0);
	text = render(&reg);
	CHECK_STR(text,
		  "# HELP x_leader Leader.\n# TYPE x_leader gauge\nx_leader 0\n"
		  "# HELP x_h H.\n# TYPE x_h histogram\n"
		  "x_h_bucket{le=\"1\"} 0\nx_h_bucket{le=\"+Inf\"} 0\nx_h_sum 0\nx_h_count 0\n"
		  "# HELP x_l L.\n# TYPE x_l gauge\n");
	free(text);
	CHECK(orc_metric_set(g, NULL, 1) == 0);
	CHECK(orc_metric_set(g, NULL, -2.5) == 0);
	CHECK(orc_metric_set(l, ORC_LABELS("ready"), 3) == 0);
	orc_metric_clear(l);
	CHECK(orc_metric_set(l, ORC_LABELS("pending"), 1) == 0);
	text = render(&reg);
	CHECK(strstr(text, "\nx_leader -2.5\n") != NULL);
	CHECK(strstr(text, "x_l{state=\"pending\"} 1\n") != NULL);
	CHECK(strstr(text, "ready") == NULL);   /* cleared */
	free(text);
	orc_metrics_release(&reg);
}

static void metrics_values_round_trip(void)
{
	struct orc_metrics reg = ORC_METRICS_INIT;
	struct orc_metric *g = NULL;
	char *text;

	CHECK(orc_metric_new(&g, &reg, ORC_METRIC_GAUGE, "g", "", ORC_LABELS("k"), NULL, 0, 8) == 0);
	orc_metric_set(g, ORC_LABELS("a"), 0.1);
	orc_metric_set(g, ORC_LABELS("b"), 1e-7);
	orc_metric_set(g, ORC_LABELS("c"), INFINITY);
	orc_metric_set(g, ORC_LABELS("d"), NAN);
	orc_metric_set(g, ORC_LABELS("e"), 1.0 / 3);
	orc_metric_set(g, ORC_LABELS("f"), 123456789012.0);
	text = render(&reg);
	CHECK(strstr(text, "g{k=\"a\"} 0.1\n") != NULL);
	CHECK(strstr(text, "g{k=\"b\"} 1e-07\n") != NULL);
	CHECK(strstr(text, "g{k=\"c\"} +Inf\n") != NULL);
	CHECK(strstr(text, "g{k=\"d\"} NaN\n") != NULL);
	CHECK(strstr(text, "g{k=\"e\"} 0.33333333333333331\n") != NULL);
	CHECK(strstr(text, "g{k=\"f\"} 123456789012\n") != NULL);
	free(text);
	orc_metrics_release(&reg);
}

static void metrics_rejects_bad_families_and_updates(void)
{
	static const double good[] = { 1, 2 }, unsorted[] = { 2, 1 }, inf[] = { 1, INFINITY };
	struct orc_metrics reg = ORC_METRICS_INIT;
	struct orc_metric *m = NULL, *c = NULL, *h = NULL;
	char longv[ORC_METRIC_VALUE_MAX + 1];

	CHECK(orc_metric_new(&m, &reg, ORC_METRIC_COUNTER, "1x", "", NULL, NULL, 0, 1) == ORC_EINVALID);
	CHECK(orc_metric_new(&m, &reg, ORC_METRIC_COUNTER, "x-y", "", NULL, NULL, 0, 1) == ORC_EINVALID);
	CHECK(orc_metric_new(&m, &reg, ORC_METRIC_COUNTER, "", "", NULL, NULL, 0, 1) == ORC_EINVALID);
	CHECK(orc_metric_new(&m, &reg, ORC_METRIC_COUNTER, "x", "", ORC_LABELS("a:b"), NULL, 0, 1) == ORC_EINVALID);
	CHECK(orc_metric_new(&m, &reg, ORC_METRIC_COUNTER, "x", "", ORC_LABELS("__a"), NULL, 0, 1) == ORC_EINVALID);
	CHECK(orc_metric_new(&m, &reg, ORC_METRIC_COUNTER, "x", "", ORC_LABELS("a", "a"), NULL, 0, 1) == ORC_EINVALID);
	CHECK(orc_metric_new(&m, &reg, ORC_METRIC_COUNTER, "x", "", ORC_LABELS("a", "b", "c", "d", "e"),
			     NULL, 0, 1) == ORC_EINVALID);
	CHECK(orc_metric_new(&m, &reg, ORC_METRIC_COUNTER, "x", "", NULL, NULL, 0, 0) == ORC_EINVALID);
	CHECK(orc_metric_new(&m, &reg, ORC_METRIC_COUNTER, "x", "", NULL, good, 2, 1) == ORC_EINVALID);
	CHECK(orc_metric_new(&m, &reg, ORC_METRIC_HISTOGRAM, "h", "", ORC_LABELS("le"), good, 2, 1) == ORC_EINVALID);
	CHECK(orc_metric_new(&m, &reg, ORC_METRIC_HISTOGRAM, "h", "", NULL, unsorted, 2, 1) == ORC_EINVALID);
	CHECK(orc_metric_new(&m, &reg, ORC_METRIC_HISTOGRAM, "h", "", NULL, inf, 2, 1) == ORC_EINVALID);
	CHECK(orc_metric_new(&m, &reg, ORC_METRIC_HISTOGRAM, "h", "", NULL, NULL, 0, 1) == ORC_EINVALID);
	CHECK(m == NULL);   /* out untouched on failure */
	CHECK(orc_metric_new(&c, &reg, ORC_METRIC_COUNTER, "ns:x_total", "", ORC_LABELS("a"), NULL, 0, 2) == 0);
	CHECK(orc_metric_new(&m, &reg, ORC_METRIC_GAUGE, "ns:x_total", "", NULL, NULL, 0, 1) == ORC_ECONFLICT);
	CHECK(orc_metric_new(&h, &reg, ORC_METRIC_HISTOGRAM, "h", "", NULL, good, 2, 1) == 0);

	CHECK(orc_metric_add(c, ORC_LABELS("v"), -1) == ORC_EINVALID);
	CHECK(orc_metric_add(c, ORC_LABELS("v"), NAN) == ORC_EINVALID);
	CHECK(orc_metric_observe(c, ORC_LABELS("v"), 1) == ORC_EINVALID);
	CHECK(orc_metric_add(h, NULL, 1) == ORC_EINVALID);
	CHECK(orc_metric_observe(h, NULL, NAN) == ORC_EINVALID);
	CHECK(orc_metric_inc(c, NULL) == ORC_EINVALID);
	CHECK(orc_metric_inc(c, ORC_LABELS(NULL)) == ORC_EINVALID);
	CHECK(orc_metric_inc(c, ORC_LABELS("\xff")) == ORC_EINVALID);
	memset(longv, 'a', sizeof(longv) - 1);
	longv[sizeof(longv) - 1] = '\0';
	CHECK(orc_metric_inc(c, ORC_LABELS(longv)) == ORC_EINVALID);
	CHECK(orc_metric_get(c, ORC_LABELS("v")) == 0);   /* nothing was recorded */
	/* No metrics set up: hooks are no-ops. */
	CHECK(orc_metric_inc(NULL, ORC_LABELS("x")) == 0);
	CHECK(orc_metric_observe(NULL, NULL, 1) == 0);
	orc_metric_clear(NULL);
	orc_metrics_release(&reg);
}

static void metrics_cardinality_is_capped_by_an_overflow_series(void)
{
	struct orc_metrics reg = ORC_METRICS_INIT;
	struct orc_metric *c = NULL;
	char v[16], *text;
	int i;

	CHECK(orc_metric_new(&c, &reg, ORC_METRIC_COUNTER, "c_total", "", ORC_LABELS("path"), NULL, 0, 3) == 0);
	for (i = 0; i < 100; i++) {
		snprintf(v, sizeof(v), "/p%d", i % 10);
		CHECK(orc_metric_inc(c, ORC_LABELS(v)) == 0);
	}
	text = render(&reg);
	CHECK(strstr(text, "c_total{path=\"/p0\"} 10\n") != NULL);
	CHECK(strstr(text, "c_total{path=\"/p2\"} 10\n") != NULL);
	CHECK(strstr(text, "/p3") == NULL);
	CHECK(strstr(text, "c_total{path=\"_other\"} 70\n") != NULL);
	free(text);
	orc_metrics_release(&reg);
}

static void metrics_render_respects_the_buffer_maximum(void)
{
	struct orc_metrics reg = ORC_METRICS_INIT;
	struct orc_metric *c = NULL;
	struct orc_buf b;

	CHECK(orc_metric_new(&c, &reg, ORC_METRIC_COUNTER, "c_total", "A counter.", NULL, NULL, 0, 1) == 0);
	orc_buf_init(&b, 20);
	CHECK(orc_metrics_render(&b, &reg) == ORC_ETOOBIG);
	orc_buf_release(&b);
	orc_metrics_release(&reg);
}

#define THREADS 4
#define PER_THREAD 20000

static void *hammer(void *arg)
{
	struct orc_metric **m = arg;
	int i;

	for (i = 0; i < PER_THREAD; i++) {
		orc_metric_inc(m[0], ORC_LABELS(i % 2 ? "odd" : "even"));
		orc_metric_observe(m[1], NULL, 0.5);
	}
	return NULL;
}

static void metrics_updates_from_threads_are_not_lost(void)
{
	static const double bounds[] = { 1 };
	struct orc_metrics reg = ORC_METRICS_INIT;
	struct orc_metric *m[2] = { NULL, NULL };
	pthread_t t[THREADS];
	int i;

	CHECK(orc_metric_new(&m[0], &reg, ORC_METRIC_COUNTER, "c_total", "", ORC_LABELS("k"), NULL, 0, 4) == 0);
	CHECK(orc_metric_new(&m[1], &reg, ORC_METRIC_HISTOGRAM, "h", "", NULL, bounds, 1, 1) == 0);
	for (i = 0; i < THREADS; i++)
		CHECK(pthread_create(&t[i], NULL, hammer, m) == 0);
	for (i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	CHECK(orc_metric_get(m[0], ORC_LABELS("odd")) == THREADS * PER_THREAD / 2);
	CHECK(orc_metric_get(m[0], ORC_LABELS("even")) == THREADS * PER_THREAD / 2);
	CHECK(orc_metric_get(m[1], NULL) == THREADS * PER_THREAD);
	orc_metrics_release(&reg);
}

const struct unit_test metrics_tests[] = {
	{ "metrics_counter_renders_help_type_and_labelled_samples",
	  metrics_counter_renders_help_type_and_labelled_samples },
	{ "metrics_histogram_buckets_are_cumulative_and_le_inclusive",
	  metrics_histogram_buckets_are_cumulative_and_le_inclusive },
	{ "metrics_unlabelled_family_shows_zero_before_any_observation",
	  metrics_unlabelled_family_shows_zero_before_any_observation },
	{ "metrics_values_round_trip", metrics_values_round_trip },
	{ "metrics_rejects_bad_families_and_updates", metrics_rejects_bad_families_and_updates },
	{ "metrics_cardinality_is_capped_by_an_overflow_series",
	  metrics_cardinality_is_capped_by_an_overflow_series },
	{ "metrics_render_respects_the_buffer_maximum", metrics_render_respects_the_buffer_maximum },
	{ "metrics_updates_from_threads_are_not_lost", metrics_updates_from_threads_are_not_lost },
	{ NULL, NULL },
};
