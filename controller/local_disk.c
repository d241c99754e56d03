/*
 * Per-sandbox disk limits under the local driver (docs/controller.md,
 * "Disk"). The filesystem enforces them, not the agent: with the btrfs
 * backend each sandbox dir ($STATE/<id>: upper/, workspace/, tmp/, run/)
 * is a subvolume, and its qgroup's max_rfer is the sandbox's disk_bytes,
 * so a write past it fails with EDQUOT inside the sandbox and no other
 * sandbox is touched. A fork's dir is a snapshot, a subvolume of its own,
 * and gets its row's limit the same way. Simple quotas where the kernel
 * has them: full qgroups re-account shared blocks at every commit, which
 * grows with the number of snapshots (every_step checkpoints). Elsewhere (ext4, the copy
 * backend) nothing enforces it: the start-up log says so and the limit is
 * only recorded.
 */
#include "local.h"
#include "local_driver.h"

#include "btrfs.h"

#include <errno.h>
#include <string.h>

#include "err.h"
#include "log.h"
#include "xalloc.h"

void local_disk_init(struct local *l)
{
	const char *mode = NULL;

	if (!l->btrfs) {
		orc_log(ORC_LOG_WARN, "disk limits are not enforced: they need the btrfs checkpoint "
			"backend (a state dir on btrfs)", "enforced", "disk=off", NULL);
		return;
	}
	if (ctl_btrfs_quota_enable(&mode, l->state_fd) < 0) {
		orc_log(ORC_LOG_ERROR, "disk limits are not enforced: turning btrfs quotas on failed",
			"enforced", "disk=off", "error", strerror(errno), NULL);
		return;
	}
	l->disk = 1;
	orc_log(ORC_LOG_INFO, "disk limits", "enforced", "disk=btrfs-qgroup", "quotas", mode, NULL);
}

int local_disk_limit(struct ctl_driver *d, struct ctl_sandbox *sb)
{
	struct local *l = L(d);

	if (sb->disk_bytes <= 0 || !l->btrfs)
		return 0;
	if (!l->disk || !ctl_btrfs_is_subvol(l->state_fd, sb->id)) {
		sb->error = xstrdup("cannot limit the sandbox's disk: btrfs quotas are off on the "
				    "state dir (see the controller's start-up log)");
		return ORC_ERROR;
	}
	if (ctl_btrfs_qgroup_limit(l->state_fd, sb->id, sb->disk_bytes) < 0) {
		sb->error = xasprintf("setting the sandbox's disk limit (btrfs qgroup) failed: %s",
				      strerror(errno));
		return ORC_ERROR;
	}
	return 0;
}
