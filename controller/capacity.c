/*
 * Capacity as the admission step sees it (rec_admit.c): a driver's raw
 * node sizes less the configured reserve, times the overcommit ratios.
 *
 *   ORCHARD_CAPACITY_CPU_RESERVE     cpu kept for the host, per node ("0")
 *   ORCHARD_CAPACITY_MEMORY_RESERVE  memory kept for the host, per node ("1Gi")
 *   ORCHARD_CPU_OVERCOMMIT           ratio, 1..1000 (8: cpu is shared well)
 *   ORCHARD_MEMORY_OVERCOMMIT        ratio, 1..100 (1: memory is not, opt in)
 *   ORCHARD_CAPACITY_CPU, ..._MEMORY the local driver's host size instead of
 *                                    this host's (a smaller share of it)
 *
 * Read on every call (once per sweep), so nothing is cached.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver.h"
#include "err.h"
#include "log.h"
#include "strutil.h"

static int env_quantity(int64_t *out, const char *name, const char *dflt,
			int (*parse)(int64_t *, const char *))
{
	const char *v = getenv(name);

	if (!v || !*v)
		v = dflt;
	if (!strcmp(v, "0")) {   /* no reserve (the quantity parsers want > 0) */
		*out = 0;
		return 0;
	}
	if (parse(out, v) < 0) {
		orc_log(ORC_LOG_ERROR, "invalid quantity in the environment", "variable", name,
			"value", v, NULL);
		return ORC_EINVALID;
	}
	return 0;
}

static int env_ratio(double *out, const char *name, double dflt, double max)
{
	const char *v = getenv(name);

	*out = dflt;
	if (!v || !*v)
		return 0;
	if (orc_parse_double(out, v, 1.0, max) < 0) {
		orc_log(ORC_LOG_ERROR, "invalid overcommit ratio in the environment (at least 1)",
			"variable", name, "value", v, NULL);
		return ORC_EINVALID;
	}
	return 0;
}

static int64_t scaled(int64_t raw, int64_t reserve, double ratio)
{
	return raw > reserve ? (int64_t)((double)(raw - reserve) * ratio) : 0;
}

int ctl_capacity_overcommit(double *cpu_ratio, double *mem_ratio)
{
	int err;

	if ((err = env_ratio(cpu_ratio, "ORCHARD_CPU_OVERCOMMIT", 8.0, 1000.0)) < 0 ||
	    (err = env_ratio(mem_ratio, "ORCHARD_MEMORY_OVERCOMMIT", 1.0, 100.0)) < 0)
		return err;
	return 0;
}

int ctl_capacity_scale(struct ctl_capacity *out, int nodes, int64_t cpu_millis,
		       int64_t memory_bytes, int64_t node_cpu_millis, int64_t node_memory_bytes)
{
	int64_t cpu_reserve, mem_reserve;
	double cpu_ratio, mem_ratio;
	int err;

	if ((err = env_quantity(&cpu_reserve, "ORCHARD_CAPACITY_CPU_RESERVE", "0", orc_parse_cpu)) < 0 ||
	    (err = env_quantity(&mem_reserve, "ORCHARD_CAPACITY_MEMORY_RESERVE", "1Gi",
				orc_parse_memory)) < 0 ||
	    (err = ctl_capacity_overcommit(&cpu_ratio, &mem_ratio)) < 0)
		return err;
	out->nodes = nodes;
	out->cpu_millis = scaled(cpu_millis, cpu_reserve * nodes, cpu_ratio);
	out->memory_bytes = scaled(memory_bytes, mem_reserve * nodes, mem_ratio);
	out->node_cpu_millis = scaled(node_cpu_millis, cpu_reserve, cpu_ratio);
	out->node_memory_bytes = scaled(node_memory_bytes, mem_reserve, mem_ratio);
	return 0;
}

int ctl_capacity_host(struct ctl_driver *d, struct ctl_capacity *out)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_PHYS_PAGES);
	long page = sysconf(_SC_PAGESIZE);
	int64_t cpu = (ncpu > 0 ? ncpu : 1) * 1000;
	int64_t mem = pages > 0 && page > 0 ? (int64_t)pages * page : 0;
	int err;

	(void)d;
	if (getenv("ORCHARD_CAPACITY_CPU") &&
	    (err = env_quantity(&cpu, "ORCHARD_CAPACITY_CPU", "1", orc_parse_cpu)) < 0)
		return err;
	if (getenv("ORCHARD_CAPACITY_MEMORY") &&
	    (err = env_quantity(&mem, "ORCHARD_CAPACITY_MEMORY", "1Gi", orc_parse_memory)) < 0)
		return err;
	return ctl_capacity_scale(out, 1, cpu, mem, cpu, mem);
}
