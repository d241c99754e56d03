#ifndef AGENT_CGLIMITS_H
#define AGENT_CGLIMITS_H
#include <stdint.h>
/*
 * The sandbox's resource-limit counters, to tell what ended a command
 * (sql/migrations/023_failure_class.sql): how many processes the OOM
 * killer killed in the sandbox's memory cgroup and how many forks its pids
 * limit refused. Read from the sandbox's own cgroup dirs, which the local
 * driver binds read-only at /run/orchard/cgroup/<n> (controller/bwrap.c),
 * else from /sys/fs/cgroup (a container's own cgroup under Kubernetes).
 * cgroup v1: memory.oom_control "oom_kill", pids.events "max"; v2:
 * memory.events "oom_kill", pids.events "max". A counter that cannot be
 * read counts 0, so without cgroups nothing is attributed to a limit.
 */
struct agent_cglimits {
	int64_t oom_kills;
	int64_t pids_refused;
};

void agent_cglimits_read(struct agent_cglimits *out);
#endif
