/*
 * orchard_build_info and process_* (metrics_process.h), read at scrape time.
 */
#include "metrics_process.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "strutil.h"
#include "version.h"

static struct orc_metric *build_info, *cpu, *rss, *vsz, *open_fds, *max_fds, *start_time;

#define NB(a) (sizeof(a) / sizeof(*(a)))

static const struct orc_metric_def families[] = {
	{ &build_info, ORC_METRIC_GAUGE, "orchard_build_info",
	  "1, labelled with the release and the program that serves these metrics.",
	  ORC_LABELS("version", "component"), NULL, 0, 1 },
	{ &cpu, ORC_METRIC_COUNTER, "process_cpu_seconds_total",
	  "User and system CPU time spent, in seconds.", NULL, NULL, 0, 1 },
	{ &rss, ORC_METRIC_GAUGE, "process_resident_memory_bytes",
	  "Resident memory size in bytes.", NULL, NULL, 0, 1 },
	{ &vsz, ORC_METRIC_GAUGE, "process_virtual_memory_bytes",
	  "Virtual memory size in bytes.", NULL, NULL, 0, 1 },
	{ &open_fds, ORC_METRIC_GAUGE, "process_open_fds",
	  "Open file descriptors.", NULL, NULL, 0, 1 },
	{ &max_fds, ORC_METRIC_GAUGE, "process_max_fds",
	  "Maximum number of open file descriptors (RLIMIT_NOFILE, soft).", NULL, NULL, 0, 1 },
	{ &start_time, ORC_METRIC_GAUGE, "process_start_time_seconds",
	  "Start time of the process since the epoch, in seconds.", NULL, NULL, 0, 1 },
};

/* The boot time (/proc/stat btime) plus the process's start in clock ticks
 * since boot (/proc/self/stat, field 22); 0 when either is unreadable. */
static double read_start_time(void)
{
	char buf[4096], *p;
	unsigned long long btime = 0, ticks = 0;
	long hz = sysconf(_SC_CLK_TCK);
	FILE *f;
	int i;

	if ((f = fopen("/proc/stat", "re")) != NULL) {
		while (fgets(buf, sizeof(buf), f))
			if (sscanf(buf, "btime %llu", &btime) == 1)
				break;
		fclose(f);
	}
	if ((f = fopen("/proc/self/stat", "re")) == NULL)
		return 0;
	p = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
	fclose(f);
	/* After "pid (comm)": state is field 3, starttime field 22. */
	for (i = 2; p && i < 22; i++)
		p = strchr(p + 1, ' ');
	if (!p || !btime || hz <= 0 || sscanf(p + 1, "%llu", &ticks) != 1)
		return 0;
	return (double)btime + (double)ticks / (double)hz;
}

int orc_metrics_process_register(struct orc_metrics *reg, const char *component)
{
	int err;

	if ((err = orc_metrics_register(reg, families, NB(families))) < 0)
		return err;
	orc_metric_set(build_info, ORC_LABELS(ORC_VERSION, component), 1);
	orc_metric_set(start_time, NULL, read_start_time());
	return 0;
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1;   /* the directory's own descriptor */
}

void orc_metrics_process_refresh(void)
{
	unsigned long long size = 0, resident = 0;
	long page = sysconf(_SC_PAGESIZE);
	struct rusage ru;
	struct rlimit rl;
	FILE *f;
	int n;

	if (getrusage(RUSAGE_SELF, &ru) == 0)
		orc_metric_set(cpu, NULL, (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
			       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6);
	if ((f = fopen("/proc/self/statm", "re")) != NULL) {
		if (fscanf(f, "%llu %llu", &size, &resident) == 2 && page > 0) {
			orc_metric_set(vsz, NULL, (double)size * (double)page);
			orc_metric_set(rss, NULL, (double)resident * (double)page);
		}
		fclose(f);
	}
	if ((n = count_fds()) >= 0)
		orc_metric_set(open_fds, NULL, n);
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		orc_metric_set(max_fds, NULL, (double)rl.rlim_cur);
}
