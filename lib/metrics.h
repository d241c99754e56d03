#ifndef ORC_METRICS_H
#define ORC_METRICS_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
/*
 * Prometheus metrics: counters, gauges and histograms with labels, kept in
 * a registry and rendered in the text exposition format 0.0.4
 * (docs/observability.md lists ours).
 *
 *   static struct orc_metrics reg = ORC_METRICS_INIT;
 *   static const char *const labels[] = { "route", "status", NULL };
 *   struct orc_metric *req;
 *   orc_metric_new(&req, &reg, ORC_METRIC_COUNTER, "x_requests_total",
 *                  "Requests served.", labels, NULL, 0, 256);
 *   orc_metric_inc(req, ORC_LABELS("/jobs/{id}", "200"));
 *   orc_metrics_render(&buf, &reg);
 *
 * Thread-safe: each family has its own mutex, held only for a lookup and an
 * update (or while it is rendered). Cardinality is bounded: a family holds
 * at most max_series label combinations; observations of further ones go
 * to one overflow series whose every label value is "_other", so the
 * output stays bounded whatever callers pass. Label values are copied;
 * callers must still pass values from small fixed sets (route patterns,
 * methods, statuses), never raw input.
 *
 * Every update function accepts m == NULL and then does nothing, so hooks
 * cost nothing in a process (or a unit test) that set no metrics up.
 */

#define ORC_METRIC_MAX_LABELS 4
#define ORC_METRIC_MAX_BUCKETS 16
#define ORC_METRIC_VALUE_MAX 64     /* bytes of a label value, NUL included */
#define ORC_METRIC_SERIES_MAX 4096  /* largest max_series accepted */

enum orc_metric_type { ORC_METRIC_COUNTER, ORC_METRIC_GAUGE, ORC_METRIC_HISTOGRAM };

struct orc_metric_series;

/* One metric family; created by orc_metric_new, owned by its registry. */
struct orc_metric {
	char *name;
	char *help;
	enum orc_metric_type type;
	size_t nlabels;
	char *labels[ORC_METRIC_MAX_LABELS];
	double bounds[ORC_METRIC_MAX_BUCKETS];   /* histogram upper bounds, without +Inf */
	size_t nbounds;
	size_t max_series;
	pthread_mutex_t lock;
	struct orc_metric_series *series;        /* nseries of aseries used */
	size_t nseries, aseries;
	struct orc_metric_series *other;         /* the overflow series, once needed */
	struct orc_metric *next;
};

struct orc_metrics {
	pthread_mutex_t lock;       /* guards the list, not the values */
	struct orc_metric *first, *last;
};

#define ORC_METRICS_INIT { PTHREAD_MUTEX_INITIALIZER, NULL, NULL }

/* A label-value list for the calls below: ORC_LABELS("GET", "200"). */
#define ORC_LABELS(...) ((const char *const[]){ __VA_ARGS__, NULL })

/*
 * Register a family. name matches [a-zA-Z_:][a-zA-Z0-9_:]*; labels is a
 * NULL-terminated list of up to ORC_METRIC_MAX_LABELS names matching
 * [a-zA-Z_][a-zA-Z0-9_]* (not "__"-prefixed, not "le" in a histogram), or
 * NULL for none. Histograms take nbounds finite, strictly increasing upper
 * bounds (+Inf is implicit); other types pass NULL, 0. max_series is
 * 1..ORC_METRIC_SERIES_MAX. ORC_EINVALID for a bad argument,
 * ORC_ECONFLICT when the name is taken.
 */
int orc_metric_new(struct orc_metric **out, struct orc_metrics *reg, enum orc_metric_type type,
		   const char *name, const char *help, const char *const *labels,
		   const double *bounds, size_t nbounds, size_t max_series);

/* A process's families as a table: one orc_metric_new per entry. */
struct orc_metric_def {
	struct orc_metric **out;
	enum orc_metric_type type;
	const char *name, *help;
	const char *const *labels;
	const double *bounds;
	size_t nbounds, max_series;
};
/* Register every entry of defs[0..n); stops at the first error (logged). */
int orc_metrics_register(struct orc_metrics *reg, const struct orc_metric_def *defs, size_t n);

/*
 * Updates. values holds one string per label of the family, in order (NULL
 * for a family without labels); a NULL or too long value is ORC_EINVALID
 * and nothing is recorded. A counter only goes up (a negative or NaN
 * increment is ORC_EINVALID). orc_metric_set works on gauges, and on
 * counters that mirror a monotonic count kept elsewhere.
 */
int orc_metric_inc(struct orc_metric *m, const char *const *values);
int orc_metric_add(struct orc_metric *m, const char *const *values, double v);
int orc_metric_set(struct orc_metric *m, const char *const *values, double v);
int orc_metric_observe(struct orc_metric *m, const char *const *values, double v);
/* Forget every series (for gauges recomputed from scratch at scrape time). */
void orc_metric_clear(struct orc_metric *m);

/*
 * The current value of a counter or gauge series, or a histogram series'
 * count; 0 when the series does not exist. For tests and for hooks that
 * need to read back.
 */
double orc_metric_get(struct orc_metric *m, const char *const *values);

/*
 * Append every family in registration order: "# HELP" and "# TYPE" lines,
 * then its samples (histograms as cumulative _bucket{le=...} including
 * +Inf, then _sum and _count). A family without labels and without
 * observations shows a zero sample. ORC_ETOOBIG when out's maximum is hit
 * (out then holds a truncated text: do not serve it).
 */
int orc_metrics_render(struct orc_buf *out, struct orc_metrics *reg);

/* The Content-Type of the rendered text. */
#define ORC_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* Free every family (they must no longer be used); harmless twice. */
void orc_metrics_release(struct orc_metrics *reg);
#endif
