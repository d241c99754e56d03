#ifndef CTL_RECONCILE_H
#define CTL_RECONCILE_H
#include <libpq-fe.h>

#include "ctl.h"
#include "driver.h"
/*
 * The reconcile loop (docs/controller.md): turns sandbox rows into running
 * sandboxes and back through the driver, woken by NOTIFY orchard_sandbox
 * or every sweep interval, and polls launched sandboxes' agents until they
 * answer /health.
 *
 * Runs until ctl_stopping is set (returns 0) or the leader connection is
 * lost (returns ORC_EUNAVAIL: the caller must exit so that nobody acts
 * without the lock).
 */
int ctl_reconcile_run(const struct ctl_config *cfg, struct ctl_driver *driver, PGconn *leader);
#endif
