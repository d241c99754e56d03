/*
 * Prometheus metrics (metrics.h): families of labelled series in small
 * tables, rendered in the text exposition format 0.0.4.
 */
#include "metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "log.h"
#include "strutil.h"
#include "xalloc.h"

struct orc_metric_series {
	char values[ORC_METRIC_MAX_LABELS][ORC_METRIC_VALUE_MAX];
	double value;                 /* counter and gauge; a histogram's sum */
	uint64_t count;               /* histogram observations */
	uint64_t buckets[ORC_METRIC_MAX_BUCKETS + 1];   /* per bucket; the last is +Inf */
};

static const char other_value[] = "_other";

/* ---- names ---------------------------------------------------------------- */

static int name_char(char c, int first, int colon)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':'))
		return 1;
	return !first && c >= '0' && c <= '9';
}

static int valid_name(const char *s, int colon)
{
	size_t i;

	if (!s || !*s || strlen(s) > 200)
		return 0;
	for (i = 0; s[i]; i++)
		if (!name_char(s[i], i == 0, colon))
			return 0;
	return 1;
}

static int valid_labels(const char *const *labels, size_t *nout, enum orc_metric_type type)
{
	size_t n, j;

	for (n = 0; labels && labels[n]; n++) {
		if (n == ORC_METRIC_MAX_LABELS || !valid_name(labels[n], 0) ||
		    !strncmp(labels[n], "__", 2) || strlen(labels[n]) >= ORC_METRIC_VALUE_MAX)
			return 0;
		if (type == ORC_METRIC_HISTOGRAM && !strcmp(labels[n], "le"))
			return 0;
		for (j = 0; j < n; j++)
			if (!strcmp(labels[j], labels[n]))
				return 0;
	}
	*nout = n;
	return 1;
}

static int valid_bounds(const double *b, size_t n, enum orc_metric_type type)
{
	size_t i;

	if (type != ORC_METRIC_HISTOGRAM)
		return n == 0;
	if (!b || n == 0 || n > ORC_METRIC_MAX_BUCKETS)
		return 0;
	for (i = 0; i < n; i++)
		if (!isfinite(b[i]) || (i && b[i] <= b[i - 1]))
			return 0;
	return 1;
}

/* ---- registry ------------------------------------------------------------- */

static void metric_free(struct orc_metric *m)
{
	size_t i;

	for (i = 0; i < m->nlabels; i++)
		free(m->labels[i]);
	free(m->name);
	free(m->help);
	free(m->series);
	free(m->other);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

int orc_metric_new(struct orc_metric **out, struct orc_metrics *reg, enum orc_metric_type type,
		   const char *name, const char *help, const char *const *labels,
		   const double *bounds, size_t nbounds, size_t max_series)
{
	struct orc_metric *m, *it;
	size_t nlabels = 0, i;
	int err = 0;

	if ((type != ORC_METRIC_COUNTER && type != ORC_METRIC_GAUGE && type != ORC_METRIC_HISTOGRAM) ||
	    !valid_name(name, 1) || !valid_labels(labels, &nlabels, type) ||
	    !valid_bounds(bounds, nbounds, type) || max_series < 1 ||
	    max_series > ORC_METRIC_SERIES_MAX)
		return ORC_EINVALID;
	m = xcalloc(1, sizeof(*m));
	m->name = xstrdup(name);
	m->help = xstrdup(help ? help : "");
	m->type = type;
	m->nlabels = nlabels;
	for (i = 0; i < nlabels; i++)
		m->labels[i] = xstrdup(labels[i]);
	for (i = 0; i < nbounds; i++)
		m->bounds[i] = bounds[i];
	m->nbounds = nbounds;
	m->max_series = max_series;
	pthread_mutex_init(&m->lock, NULL);

	pthread_mutex_lock(&reg->lock);
	for (it = reg->first; it; it = it->next)
		if (!strcmp(it->name, name))
			err = ORC_ECONFLICT;
	if (!err) {
		if (reg->last)
			reg->last->next = m;
		else
			reg->first = m;
		reg->last = m;
	}
	pthread_mutex_unlock(&reg->lock);
	if (err < 0) {
		metric_free(m);
		return err;
	}
	*out = m;
	return 0;
}

void orc_metrics_release(struct orc_metrics *reg)
{
	struct orc_metric *m, *next;

	pthread_mutex_lock(&reg->lock);
	for (m = reg->first; m; m = next) {
		next = m->next;
		metric_free(m);
	}
	reg->first = reg->last = NULL;
	pthread_mutex_unlock(&reg->lock);
}

/* ---- updates -------------------------------------------------------------- */

static int valid_values(const struct orc_metric *m, const char *const *values)
{
	size_t i;

	for (i = 0; i < m->nlabels; i++)
		if (!values || !values[i] || strlen(values[i]) >= ORC_METRIC_VALUE_MAX ||
		    !orc_utf8_valid(values[i], strlen(values[i])))
			return 0;
	return 1;
}

/* The series of values, created when new (or the overflow one). Locked. */
static struct orc_metric_series *series_get(struct orc_metric *m, const char *const *values,
					    int create)
{
	struct orc_metric_series *s;
	size_t i, j;

	for (i = 0; i < m->nseries; i++) {
		s = &m->series[i];
		for (j = 0; j < m->nlabels && !strcmp(s->values[j], values[j]); j++)
			;
		if (j == m->nlabels)
			return s;
	}
	if (!create)
		return NULL;
	if (m->nseries == m->max_series) {
		if (!m->other) {
			m->other = xcalloc(1, sizeof(*m->other));
			for (j = 0; j < m->nlabels; j++)
				memcpy(m->other->values[j], other_value, sizeof(other_value));
		}
		return m->other;
	}
	if (m->nseries == m->aseries) {
		m->aseries = m->aseries ? m->aseries * 2 : 8;
		if (m->aseries > m->max_series)
			m->aseries = m->max_series;
		m->series = xrealloc(m->series, m->aseries * sizeof(*m->series));
	}
	s = &m->series[m->nseries++];
	memset(s, 0, sizeof(*s));
	for (j = 0; j < m->nlabels; j++)
		memcpy(s->values[j], values[j], strlen(values[j]) + 1);
	return s;
}

enum op { OP_ADD, OP_SET, OP_OBSERVE };

static int update(struct orc_metric *m, const char *const *values, double v, enum op op)
{
	struct orc_metric_series *s;
	size_t i;

	if (!m)
		return 0;
	if (!valid_values(m, values))
		return ORC_EINVALID;
	if ((op == OP_OBSERVE) != (m->type == ORC_METRIC_HISTOGRAM))
		return ORC_EINVALID;
	if (m->type == ORC_METRIC_COUNTER && (isnan(v) || (op == OP_ADD && v < 0)))
		return ORC_EINVALID;
	if (op == OP_OBSERVE && isnan(v))
		return ORC_EINVALID;
	pthread_mutex_lock(&m->lock);
	s = series_get(m, values, 1);
	if (op == OP_ADD) {
		s->value += v;
	} else if (op == OP_SET) {
		s->value = v;
	} else {
		for (i = 0; i < m->nbounds && v > m->bounds[i]; i++)
			;
		s->buckets[i]++;
		s->count++;
		s->value += v;
	}
	pthread_mutex_unlock(&m->lock);
	return 0;
}

int orc_metric_inc(struct orc_metric *m, const char *const *values)
{
	return update(m, values, 1, OP_ADD);
}

int orc_metric_add(struct orc_metric *m, const char *const *values, double v)
{
	return update(m, values, v, OP_ADD);
}

int orc_metric_set(struct orc_metric *m, const char *const *values, double v)
{
	return update(m, values, v, OP_SET);
}

int orc_metric_observe(struct orc_metric *m, const char *const *values, double v)
{
	return update(m, values, v, OP_OBSERVE);
}

void orc_metric_clear(struct orc_metric *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	m->nseries = 0;
	free(m->other);
	m->other = NULL;
	pthread_mutex_unlock(&m->lock);
}

double orc_metric_get(struct orc_metric *m, const char *const *values)
{
	struct orc_metric_series *s;
	double v = 0;

	if (!m || !valid_values(m, values))
		return 0;
	pthread_mutex_lock(&m->lock);
	if ((s = series_get(m, values, 0)) != NULL)
		v = m->type == ORC_METRIC_HISTOGRAM ? (double)s->count : s->value;
	pthread_mutex_unlock(&m->lock);
	return v;
}

/* ---- rendering ------------------------------------------------------------ */

/* A float as Prometheus reads it: integers plainly, others round-tripping. */
static void fmt_value(char *out, size_t n, double v)
{
	double back;

	if (isnan(v)) {
		snprintf(out, n, "NaN");
	} else if (isinf(v)) {
		snprintf(out, n, v > 0 ? "+Inf" : "-Inf");
	} else if (v == floor(v) && fabs(v) < 9007199254740992.0) {
		snprintf(out, n, "%.0f", v);
	} else {
		snprintf(out, n, "%.15g", v);
		back = strtod(out, NULL);
		if (back != v)
			snprintf(out, n, "%.17g", v);
	}
}

/* Escape for a HELP line (\ and newline) or a label value (also "). */
static int add_escaped(struct orc_buf *b, const char *s, int quote)
{
	int err = 0;

	for (; *s && !err; s++) {
		if (*s == '\\')
			err = orc_buf_adds(b, "\\\\");
		else if (*s == '\n')
			err = orc_buf_adds(b, "\\n");
		else if (quote && *s == '"')
			err = orc_buf_adds(b, "\\\"");
		else
			err = orc_buf_addc(b, *s);
	}
	return err;
}

/* name+suffix{labels[,le="le"]} value\n */
static int add_sample(struct orc_buf *b, const struct orc_metric *m, const char *suffix,
		      const struct orc_metric_series *s, const char *le, double v)
{
	char num[40];
	size_t i;
	int err;

	if ((err = orc_buf_addf(b, "%s%s", m->name, suffix)) < 0)
		return err;
	if (m->nlabels || le) {
		err = orc_buf_addc(b, '{');
		for (i = 0; i < m->nlabels && !err; i++) {
			err = orc_buf_addf(b, "%s%s=\"", i ? "," : "", m->labels[i]);
			if (!err)
				err = add_escaped(b, s->values[i], 1);
			if (!err)
				err = orc_buf_addc(b, '"');
		}
		if (!err && le)
			err = orc_buf_addf(b, "%sle=\"%s\"", m->nlabels ? "," : "", le);
		if (!err)
			err = orc_buf_addc(b, '}');
		if (err < 0)
			return err;
	}
	fmt_value(num, sizeof(num), v);
	return orc_buf_addf(b, " %s\n", num);
}

static int add_series(struct orc_buf *b, const struct orc_metric *m,
		      const struct orc_metric_series *s)
{
	char le[40];
	uint64_t cum = 0;
	size_t i;
	int err = 0;

	if (m->type != ORC_METRIC_HISTOGRAM)
		return add_sample(b, m, "", s, NULL, s->value);
	for (i = 0; i <= m->nbounds && !err; i++) {
		cum += s->buckets[i];
		if (i < m->nbounds)
			fmt_value(le, sizeof(le), m->bounds[i]);
		else
			snprintf(le, sizeof(le), "+Inf");
		err = add_sample(b, m, "_bucket", s, le, (double)cum);
	}
	if (!err)
		err = add_sample(b, m, "_sum", s, NULL, s->value);
	if (!err)
		err = add_sample(b, m, "_count", s, NULL, (double)s->count);
	return err;
}

static const char *type_name(enum orc_metric_type t)
{
	return t == ORC_METRIC_COUNTER ? "counter" : t == ORC_METRIC_GAUGE ? "gauge" : "histogram";
}

static int add_family(struct orc_buf *b, struct orc_metric *m)
{
	static const struct orc_metric_series zero;
	size_t i;
	int err;

	if ((err = orc_buf_addf(b, "# HELP %s ", m->name)) < 0 ||
	    (err = add_escaped(b, m->help, 0)) < 0 ||
	    (err = orc_buf_addf(b, "\n# TYPE %s %s\n", m->name, type_name(m->type))) < 0)
		return err;
	pthread_mutex_lock(&m->lock);
	if (!m->nlabels && !m->nseries)
		err = add_series(b, m, &zero);
	for (i = 0; i < m->nseries && !err; i++)
		err = add_series(b, m, &m->series[i]);
	if (!err && m->other)
		err = add_series(b, m, m->other);
	pthread_mutex_unlock(&m->lock);
	return err;
}

int orc_metrics_render(struct orc_buf *out, struct orc_metrics *reg)
{
	struct orc_metric *m;
	int err = 0;

	pthread_mutex_lock(&reg->lock);
	for (m = reg->first; m && !err; m = m->next)
		err = add_family(out, m);
	pthread_mutex_unlock(&reg->lock);
	return err;
}

int orc_metrics_register(struct orc_metrics *reg, const struct orc_metric_def *defs, size_t n)
{
	size_t i;
	int err;

	for (i = 0; i < n; i++) {
		const struct orc_metric_def *d = &defs[i];
		if ((err = orc_metric_new(d->out, reg, d->type, d->name, d->help, d->labels, d->bounds,
					  d->nbounds, d->max_series)) < 0) {
			orc_log(ORC_LOG_ERROR, "cannot register a metric", "metric", d->name, NULL);
			return err;
		}
	}
	return 0;
}
