#ifndef CTL_CGROUP_H
#define CTL_CGROUP_H
#include <stdint.h>

#include "local.h"
/*
 * Per-sandbox resource limits through cgroups: cgroup v2 where it is
 * delegated to us, v1 otherwise (per controller: each of cpu, memory and
 * pids is bound to exactly one of them on a host). See docs/controller.md.
 *
 * A sandbox's cgroup is "<base>/<name>", where base is "orchard-<tag>"
 * under the controller's own cgroup in that hierarchy (so the sandboxes
 * stay inside whatever contains the controller). Bases exist only while
 * they hold sandboxes. On a v1 host that is up
 * to three directories (one per hierarchy); on v2 one.
 */

/* The freezer is no limit: it stops and restarts a sandbox's processes
 * (checkpoints and pause/resume, docs/checkpoints.md). On v2 it is
 * cgroup.freeze, built into every cgroup. */
enum ctl_cg_ctrl { CTL_CG_CPU, CTL_CG_MEMORY, CTL_CG_PIDS, CTL_CG_FREEZER, CTL_CG_NCTRL };

struct ctl_cgroups {
	struct {
		int version;        /* 1 or 2; 0: this limit is not enforced */
		char *base;         /* absolute parent dir of the sandbox cgroups */
		char *why;          /* when not enforced: why not */
	} c[CTL_CG_NCTRL];
};

#define CTL_CGROUPS_INIT { { { 0, NULL, NULL }, { 0, NULL, NULL }, { 0, NULL, NULL }, { 0, NULL, NULL } } }

struct ctl_cg_limits {
	int64_t cpu_millis;         /* cpu quota: millicores (1000 = one core) */
	int64_t memory_bytes;       /* memory limit, swap included */
	int64_t pids_max;           /* tasks (processes and threads) */
};

/* Probe the host and create the bases. Never fatal: what cannot be
 * enforced is recorded with a reason and logged once. */
void ctl_cgroups_probe(struct ctl_cgroups *cg, const char *tag);
/* Frees; removes the bases when they are empty. */
void ctl_cgroups_release(struct ctl_cgroups *cg);
/* Remove the bases that hold no sandbox (they are made on demand). */
void ctl_cgroups_tidy(const struct ctl_cgroups *cg);
/* 1 when at least one limit is enforced. */
int ctl_cgroups_any(const struct ctl_cgroups *cg);

/*
 * Create <base>/<name> for every enforced controller and write the
 * limits. dirs gets each distinct directory (to join: write to
 * <dir>/cgroup.procs; to record). On failure whatever was created is
 * removed again.
 */
int ctl_cgroup_create(struct ctl_strv *dirs, const struct ctl_cgroups *cg, const char *name,
		      const struct ctl_cg_limits *lim);

/* The directories <base>/<name> would have (whether or not they exist). */
void ctl_cgroup_dirs(struct ctl_strv *dirs, const struct ctl_cgroups *cg, const char *name);

/*
 * SIGKILL every process left in dir, wait until it is empty and remove
 * it. 0 when dir is gone (or never existed). Refuses (ORC_EINVALID) a
 * path that is not a sandbox cgroup called name under a cgroup mount.
 */
int ctl_cgroup_remove(const char *dir, const char *name, int64_t timeout_ms);

/*
 * Freeze (frozen 1) or thaw (0) every process of sandbox name with the
 * freezer, waiting up to timeout_ms for the kernel to finish. ORC_EUNAVAIL
 * when there is no freezer (or the sandbox has no freezer cgroup: launched
 * before it was used), ORC_ETIMEOUT when it did not settle (thawed again).
 */
int ctl_cgroup_freeze(const struct ctl_cgroups *cg, const char *name, int frozen, int64_t timeout_ms);
/* 1 when the sandbox's processes are frozen now, 0 when not (or no freezer). */
int ctl_cgroup_frozen(const struct ctl_cgroups *cg, const char *name);
/*
 * How many sessions the processes of sandbox name's freezer cgroup are
 * in, counted up to limit + 1 (enough to tell "at most limit"); negative
 * when it cannot be read (no freezer, or no freezer cgroup for it).
 */
int ctl_cgroup_nsessions(const struct ctl_cgroups *cg, const char *name, int limit);

/* Calls fn for every sandbox-named directory under the bases. */
typedef void (*ctl_cgroup_list_fn)(const char *name, void *arg);
void ctl_cgroups_list(const struct ctl_cgroups *cg, ctl_cgroup_list_fn fn, void *arg);
#endif
