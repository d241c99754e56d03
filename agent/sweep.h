#ifndef AGENT_SWEEP_H
#define AGENT_SWEEP_H
#include <stddef.h>
/*
 * What a killed command left behind (issue 19, item 11).
 *
 * A timeout or a cancel kills the command's process group, but a child
 * that called setsid() (`(setsid sleep 300 &)`) has left that group and,
 * re-parented to the agent, its ancestry too. The agent cannot make a
 * cgroup per command (its cgroup dirs are bound read-only, and the
 * sandbox's user namespace owns none), so each command gets a tag in its
 * environment (AGENT_SWEEP_VAR=<32 hex>) that its
 * descendants inherit, and after a timeout or cancel every process of the
 * sandbox whose environment holds the tag is killed. A command that
 * empties its environment (env -i) or makes itself undumpable escapes the
 * sweep; the sandbox's own end (its cgroup, its pid namespace) still
 * bounds it. A command that ended by itself leaves its background
 * processes alone: servers started by one exec for the next are normal.
 */
#define AGENT_SWEEP_VAR "ORCHARD_JOB_TAG"
#define AGENT_SWEEP_TAG_LEN 32          /* hex digits */
#define AGENT_SWEEP_ENTRY_MAX (sizeof(AGENT_SWEEP_VAR) + AGENT_SWEEP_TAG_LEN + 1)

/* A new tag's environment entry "ORCHARD_JOB_TAG=<hex>" into out. */
void agent_sweep_entry(char out[AGENT_SWEEP_ENTRY_MAX]);
/* envp with entry first, malloc'd (the strings are borrowed); free() it. */
char **agent_sweep_envp(char *entry, char *const *envp);
/* SIGKILL every process but the agent whose environment holds entry, until
 * a pass finds none (a few passes at most); returns how many were killed. */
int agent_sweep_kill(const char *entry);
#endif
