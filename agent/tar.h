#ifndef AGENT_TAR_H
#define AGENT_TAR_H
/*
 * Directories as tar streams (libarchive): GET /archive writes one, PUT
 * /archive extracts one (handlers in files.h).
 */

#include <stddef.h>
#include <stdint.h>

#define AGENT_TAR_MAX_DEPTH 256    /* directory levels archived */

/* Load libarchive on first use (dl_archive.c): 0, or ORC_ERROR and msg
 * naming the library. Before any libarchive function. */
int agent_archive_load(char *msg, size_t msglen);

/*
 * The expansion bound of PUT /archive (tar_limits.c): at most `bytes` of
 * file data and `entries` entries, and once past `ratio_floor` expanded
 * bytes, at most `ratio` times the bytes received (a gzip bomb). Expanded
 * bytes count 512 per entry besides the data. From the agent's
 * environment: ORCHARD_AGENT_ARCHIVE_MAX_BYTES (default 2 GiB),
 * ORCHARD_AGENT_ARCHIVE_MAX_ENTRIES (200 000), ORCHARD_AGENT_ARCHIVE_MAX_RATIO
 * (100; 0 turns the ratio check off), ORCHARD_AGENT_ARCHIVE_RATIO_FLOOR
 * (64 MiB).
 */
struct agent_tar_limits {
	uint64_t bytes, entries, ratio, ratio_floor;
};
const struct agent_tar_limits *agent_tar_limits(void);

/* Move everything under the staging directory stage into dir (its real
 * path, "" for "/"), then remove stage. 0, or an orc_err code and msg;
 * what was moved before a failure stays. (tar_merge.c) */
int agent_tar_merge(const char *stage, const char *dir, char *msg, size_t msglen);
/* Remove the staging directory stage and all under it, best effort. */
void agent_tar_discard(const char *stage);
#endif
