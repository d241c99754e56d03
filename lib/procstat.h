#ifndef ORC_PROCSTAT_H
#define ORC_PROCSTAT_H
/*
 * Reading /proc/<pid>: what the local driver and the local stack's
 * supervisor need to tell one process from another that later got the
 * same pid. A process is identified by its pid plus its start time
 * (field 22 of /proc/<pid>/stat, clock ticks since boot), which no later
 * process with that pid can share.
 */
#include <stdint.h>
#include <sys/types.h>

struct orc_proc_stat {
	char state;             /* R, S, D, Z (zombie), X (dead), ... */
	pid_t ppid;
	pid_t session;          /* its session id */
	uint64_t starttime;
	char comm[64];          /* the command name, cut to fit */
};

/* /proc/<pid>/stat parsed into out: 0, ORC_ENOTFOUND when there is no
 * such process, ORC_ERROR when the file does not parse. */
int orc_proc_stat(struct orc_proc_stat *out, pid_t pid);

/* Up to len - 1 bytes of a (small, /proc) file, NUL-terminated: the byte
 * count, or -1 with errno set. */
ssize_t orc_read_small(const char *path, char *buf, size_t len);

/* 1 when pid is a live process (not a zombie) started at starttime. */
int orc_proc_is(pid_t pid, uint64_t starttime);
#endif
