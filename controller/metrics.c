/*
 * The controller's metrics: reconcile pass durations, create-to-ready and
 * launch-to-ready times, driver operations and their errors, sandboxes by
 * state as the last sweep saw them, the leader flag, and the process
 * (lib/metrics_process.h).
 */
#include "ctl_metrics.h"

#include <string.h>

#include "metrics.h"
#include "metrics_process.h"
#include "strutil.h"

static struct orc_metrics reg = ORC_METRICS_INIT;
static struct orc_metric *pass_seconds, *create_ready, *launch_ready, *states, *leader;
static struct orc_metric *driver_ops, *driver_errors, *driver_seconds;

static const double pass_bounds[] = {
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
};
static const double ready_bounds[] = {
	0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600,
};
static const double driver_bounds[] = {
	0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
};

/* The states the reconcile query reads (reconcile.c, select_rows). */
static const char *const seen_states[] = { "pending", "ready", "deleting" };
#define NSTATES (sizeof(seen_states) / sizeof(*seen_states))
static int64_t tally[NSTATES];   /* reconcile thread only */

#define NB(a) (sizeof(a) / sizeof(*(a)))

static const struct orc_metric_def families[] = {
	{ &pass_seconds, ORC_METRIC_HISTOGRAM, "orchard_controller_reconcile_duration_seconds",
	  "Reconcile passes by kind: sweep (every row, every sweep interval) or notified (rows named by NOTIFY).",
	  ORC_LABELS("kind"), pass_bounds, NB(pass_bounds), 2 },
	{ &create_ready, ORC_METRIC_HISTOGRAM, "orchard_controller_create_to_ready_seconds",
	  "From a sandbox row's created_at (database clock) to its agent answering /health (controller clock).",
	  NULL, ready_bounds, NB(ready_bounds), 1 },
	{ &launch_ready, ORC_METRIC_HISTOGRAM, "orchard_controller_launch_to_ready_seconds",
	  "From the driver's create (or adoption) to the agent answering /health.",
	  NULL, ready_bounds, NB(ready_bounds), 1 },
	{ &driver_ops, ORC_METRIC_COUNTER, "orchard_controller_driver_operations_total",
	  "Driver operations called, by op.", ORC_LABELS("driver", "op"), NULL, 0, 16 },
	{ &driver_errors, ORC_METRIC_COUNTER, "orchard_controller_driver_errors_total",
	  "Driver operations that failed, by op.", ORC_LABELS("driver", "op"), NULL, 0, 16 },
	{ &driver_seconds, ORC_METRIC_HISTOGRAM, "orchard_controller_driver_operation_duration_seconds",
	  "Time spent in driver operations, by op.", ORC_LABELS("driver", "op"),
	  driver_bounds, NB(driver_bounds), 16 },
	{ &states, ORC_METRIC_GAUGE, "orchard_controller_sandboxes",
	  "Sandbox rows of this controller's driver by state, as the last sweep read them.",
	  ORC_LABELS("state"), NULL, 0, 4 },
	{ &leader, ORC_METRIC_GAUGE, "orchard_controller_leader",
	  "1 while this process holds the leader lock and acts, 0 while it is a standby.",
	  NULL, NULL, 0, 1 },
};

int ctl_metrics_init(void)
{
	int err;

	if ((err = orc_metrics_register(&reg, families, NB(families))) < 0)
		return err;
	return orc_metrics_process_register(&reg, "controller");
}

void ctl_metrics_state_seen(const char *state)
{
	size_t i;

	for (i = 0; i < NSTATES; i++)
		if (!strcmp(state, seen_states[i]))
			tally[i]++;
}

void ctl_metrics_pass(int full, int64_t ms)
{
	size_t i;

	orc_metric_observe(pass_seconds, ORC_LABELS(full ? "sweep" : "notified"), (double)ms / 1000);
	if (!full)
		return;
	for (i = 0; i < NSTATES; i++) {
		orc_metric_set(states, ORC_LABELS(seen_states[i]), (double)tally[i]);
		tally[i] = 0;
	}
}

void ctl_metrics_ready(double created_at, int64_t launched_ms)
{
	double since_create = orc_now() - created_at;

	/* Clocks of two hosts: never a negative duration. */
	orc_metric_observe(create_ready, NULL, since_create > 0 ? since_create : 0);
	orc_metric_observe(launch_ready, NULL, (double)(orc_mono_ms() - launched_ms) / 1000);
}

void ctl_metrics_leader(int on)
{
	orc_metric_set(leader, NULL, on ? 1 : 0);
}

int ctl_metrics_render(struct orc_buf *out)
{
	orc_metrics_process_refresh();
	return orc_metrics_render(out, &reg);
}

/* ---- the driver, counted ------------------------------------------------- */

/*
 * A copy of the driver's table whose fallible operations go through the
 * wrappers below; every other entry (and any added later) is the driver's
 * own. One driver per process, so the real table is a static.
 */
static const struct ctl_driver_ops *real_ops;
static struct ctl_driver_ops counted_ops;

static void count(const char *op, int err, int64_t t0)
{
	const char *const v[] = { real_ops->name, op, NULL };

	orc_metric_inc(driver_ops, v);
	if (err < 0)
		orc_metric_inc(driver_errors, v);
	orc_metric_observe(driver_seconds, v, (double)(orc_mono_ms() - t0) / 1000);
}

static int counted_create(struct ctl_driver *d, struct ctl_sandbox *sb)
{
	int64_t t0 = orc_mono_ms();
	int err = real_ops->create(d, sb);

	count("create", err, t0);
	return err;
}

static int counted_destroy(struct ctl_driver *d, const char *id, const char *handle)
{
	int64_t t0 = orc_mono_ms();
	int err = real_ops->destroy(d, id, handle);

	count("destroy", err, t0);
	return err;
}

static int counted_list_owned(struct ctl_driver *d, char ***out, size_t *nout)
{
	int64_t t0 = orc_mono_ms();
	int err = real_ops->list_owned(d, out, nout);

	count("list_owned", err, t0);
	return err;
}

const struct ctl_driver_ops *ctl_metrics_driver(const struct ctl_driver_ops *real)
{
	real_ops = real;
	counted_ops = *real;
	counted_ops.create = counted_create;
	counted_ops.destroy = counted_destroy;
	counted_ops.list_owned = counted_list_owned;
	return &counted_ops;
}
