#ifndef CTL_METRICS_H
#define CTL_METRICS_H
#include <stdint.h>

#include "buf.h"
#include "driver.h"
/*
 * The controller's Prometheus metrics (docs/observability.md) and the tiny
 * loopback HTTP responder that serves them (ORCHARD_CONTROLLER_METRICS).
 *
 * The hooks are called from the reconcile thread only; the responder runs
 * in a thread of its own and touches nothing but the metrics registry
 * (lib/metrics.h, which locks), so the rest of the controller stays
 * single-threaded.
 */

/* Register the families; called once, before any hook. */
int ctl_metrics_init(void);

/* A reconcile pass (full: a sweep) took ms. A full pass publishes the
 * states counted by ctl_metrics_state_seen since the previous one. */
void ctl_metrics_pass(int full, int64_t ms);
/* One row read by the current full pass, in state. */
void ctl_metrics_state_seen(const char *state);
/* A sandbox became ready: created_at in epoch seconds (database clock),
 * launched_ms the orc_mono_ms() of its launch or adoption. */
void ctl_metrics_ready(double created_at, int64_t launched_ms);
/* 1 once this process holds the leader lock, 0 while standby. */
void ctl_metrics_leader(int leader);
/* The driver's operations, counted (calls, errors, time) by op. */
const struct ctl_driver_ops *ctl_metrics_driver(const struct ctl_driver_ops *real);

/* Append the exposition text (lib/metrics.h). */
int ctl_metrics_render(struct orc_buf *out);

/*
 * Serve GET /metrics on addr ("127.0.0.1:PORT" or "[::1]:PORT"; loopback
 * only) from a thread. NULL or "" does nothing. ORC_EINVALID for an
 * address that is malformed or not loopback, ORC_ERROR when it cannot be
 * bound; both are logged.
 */
int ctl_metrics_serve(const char *addr);
#endif
