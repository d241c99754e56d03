/*
 * The driver table and what every driver shares. drivers[] is the one
 * place that knows which drivers exist (curl's vtls.c): cfg->driver
 * (ORCHARD_DRIVER, --driver) picks a row by name, and no driver asks
 * which one was chosen.
 */
#include "driver.h"

#include <stdlib.h>
#include <string.h>

#include "ctl_metrics.h"
#include "err.h"
#include "k8s.h"
#include "log.h"

static const struct ctl_driver_ops *const drivers[] = {
	&ctl_driver_local,
	&ctl_driver_k8s,
};

void ctl_sandbox_release(struct ctl_sandbox *sb)
{
	free(sb->id);
	free(sb->image);
	free(sb->token);
	free(sb->handle);
	free(sb->address);
	free(sb->error);
	free(sb->restore);
	memset(sb, 0, sizeof(*sb));
}

void ctl_sb_status_release(struct ctl_sb_status *st)
{
	free(st->address);
	free(st->message);
	memset(st, 0, sizeof(*st));
}

int ctl_driver_open(struct ctl_driver *d, const struct ctl_config *cfg)
{
	size_t i;

	memset(d, 0, sizeof(*d));
	for (i = 0; i < sizeof(drivers) / sizeof(*drivers); i++) {
		if (!strcmp(drivers[i]->name, cfg->driver)) {
			d->ops = ctl_metrics_driver(drivers[i]);   /* counted */
			d->cfg = cfg;
			return d->ops->init(d);
		}
	}
	orc_log(ORC_LOG_ERROR, "unknown driver", "driver", cfg->driver, NULL);
	return ORC_EINVALID;
}

void ctl_driver_close(struct ctl_driver *d)
{
	if (d->ops && d->ops->release)
		d->ops->release(d);
	d->ops = NULL;
}

int ctl_driver_reap(struct ctl_driver *d)
{
	char **ids = NULL;
	size_t n = 0, i;
	int err, failed = 0;

	if ((err = d->ops->list_owned(d, &ids, &n)) < 0) {
		orc_log(ORC_LOG_ERROR, "reap: cannot list the sandboxes", "driver", d->ops->name, NULL);
		return err;
	}
	for (i = 0; i < n; i++) {
		if ((err = d->ops->destroy(d, ids[i], NULL)) < 0) {
			orc_log(ORC_LOG_ERROR, "reap: destroy failed", "sandbox_id", ids[i], NULL);
			failed = 1;
		} else {
			orc_log(ORC_LOG_INFO, "reap: destroyed", "sandbox_id", ids[i], NULL);
		}
	}
	ctl_ids_free(ids, n);
	return failed ? ORC_ERROR : 0;
}

void ctl_ids_free(char **ids, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		free(ids[i]);
	free(ids);
}
