#ifndef ORC_METRICS_PROCESS_H
#define ORC_METRICS_PROCESS_H
#include "metrics.h"
/*
 * The families every Orchard service exports besides its own
 * (docs/observability.md): orchard_build_info{version, component} 1, and
 * the process_* gauges and counter of Prometheus' client libraries, read
 * from getrusage(2), getrlimit(2) and /proc/self:
 *
 *   process_cpu_seconds_total       user + system CPU time
 *   process_resident_memory_bytes   resident set size
 *   process_virtual_memory_bytes    virtual memory size
 *   process_open_fds                open file descriptors
 *   process_max_fds                 RLIMIT_NOFILE's soft limit
 *   process_start_time_seconds      start time, seconds since the epoch
 *
 * Register once per process; call orc_metrics_process_refresh just before
 * each render (it reads the current values).
 */
int orc_metrics_process_register(struct orc_metrics *reg, const char *component);
void orc_metrics_process_refresh(void);
#endif
