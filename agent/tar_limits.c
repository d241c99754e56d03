#include "tar.h"

#include <pthread.h>
#include <stdlib.h>

#include "strutil.h"

/* The expansion bound of PUT /archive (tar.h), read once. */

static struct agent_tar_limits limits = {
	.bytes = 2ull << 30,
	.entries = 200000,
	.ratio = 100,
	.ratio_floor = 64ull << 20,
};
static pthread_once_t limits_once = PTHREAD_ONCE_INIT;

static void read_one(uint64_t *out, const char *name)
{
	const char *v = getenv(name);
	int64_t n;

	if (v && orc_parse_i64(&n, v, 0, INT64_MAX) == 0)
		*out = (uint64_t)n;
}

static void read_limits(void)
{
	read_one(&limits.bytes, "ORCHARD_AGENT_ARCHIVE_MAX_BYTES");
	read_one(&limits.entries, "ORCHARD_AGENT_ARCHIVE_MAX_ENTRIES");
	read_one(&limits.ratio, "ORCHARD_AGENT_ARCHIVE_MAX_RATIO");
	read_one(&limits.ratio_floor, "ORCHARD_AGENT_ARCHIVE_RATIO_FLOOR");
}

const struct agent_tar_limits *agent_tar_limits(void)
{
	pthread_once(&limits_once, read_limits);
	return &limits;
}
