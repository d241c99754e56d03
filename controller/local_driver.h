#ifndef CTL_LOCAL_DRIVER_H
#define CTL_LOCAL_DRIVER_H
#include <stddef.h>

#include "cgroup.h"
#include "driver.h"
#include "local.h"
/*
 * The local driver's state (ctl_driver.priv), shared by its files
 * (driver_local.c, local_*.c, checkpoint_*.c). Not in local.h because it
 * holds a struct ctl_cgroups, and cgroup.h includes local.h.
 */

struct watch {
	int wd;
	char *id;
};

struct local {
	int state_fd;
	int ino_fd;                 /* inotify: agents' sockets appearing in run/ */
	struct watch *watches;      /* per launched sandbox not yet ready */
	size_t nwatches, awatches;
	struct ctl_strv layout;
	const char *tools;          /* cfg->tools_dir when usable, else NULL (off) */
	struct ctl_strv tools_profile;  /* host layout: its login-shell hook */
	struct ctl_cgroups cg;
	int seccomp_fd;             /* the compiled filter (memfd) */
	int btrfs;                  /* checkpoint backend btrfs: sandbox dirs are subvolumes,
				     * checkpoints snapshots (checkpoint_local.c) */
	int disk;                   /* disk limits are enforced (local_disk.c) */
	struct local_job *jobs;     /* copies and fork launches off the loop (local_job.c) */
	size_t njobs, ajobs;
	int wake[2];                /* a helper ended: a byte on wake[0] (ops->jobs_fd) */
};

static inline struct local *L(struct ctl_driver *d)
{
	return d->priv;
}
#endif
