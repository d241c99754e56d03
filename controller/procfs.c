/*
 * /proc lookups for the local driver: stable process identities (pid +
 * start time, so a recycled pid is never mistaken for a sandbox) and a scan
 * for bubblewrap processes that belong to our state directory.
 */
#include "local.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "strutil.h"

static ssize_t read_small(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t r, total = 0;

	if (fd < 0)
		return -1;
	while ((size_t)total < len - 1) {
		r = read(fd, buf + total, len - 1 - (size_t)total);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		total += r;
	}
	close(fd);
	buf[total] = '\0';
	return total;
}

/* State letter, ppid and start time from /proc/<pid>/stat. The command
 * name is in parentheses and may contain anything, so parse after the
 * last ')'. */
static int proc_stat(pid_t pid, char *state, pid_t *ppid, uint64_t *starttime, char *comm, size_t commlen)
{
	char path[64], buf[1024];
	char *open_p, *close_p, *p, *end;
	unsigned long long v;
	int field;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (read_small(path, buf, sizeof(buf)) <= 0)
		return ORC_ENOTFOUND;
	open_p = strchr(buf, '(');
	close_p = strrchr(buf, ')');
	if (!open_p || !close_p || close_p < open_p || close_p[1] != ' ')
		return ORC_ERROR;
	if (comm) {
		size_t n = (size_t)(close_p - open_p - 1);
		if (n >= commlen)
			n = commlen - 1;
		memcpy(comm, open_p + 1, n);
		comm[n] = '\0';
	}
	p = close_p + 2;
	/* p is at field 3 (state). */
	*state = *p;
	for (field = 3; field < 22; field++) {
		p = strchr(p, ' ');
		if (!p)
			return ORC_ERROR;
		p++;
		if (field + 1 == 4 && ppid) {
			errno = 0;
			v = strtoull(p, &end, 10);
			if (errno || end == p)
				return ORC_ERROR;
			*ppid = (pid_t)v;
		}
	}
	errno = 0;
	v = strtoull(p, &end, 10);
	if (errno || end == p)
		return ORC_ERROR;
	*starttime = v;
	return 0;
}

int ctl_proc_id_of(struct ctl_proc_id *out, pid_t pid)
{
	uint64_t st;
	char state;
	int err;

	if ((err = proc_stat(pid, &state, NULL, &st, NULL, 0)) < 0)
		return err;
	out->pid = pid;
	out->starttime = st;
	return 0;
}

int ctl_proc_id_parse(struct ctl_proc_id *out, const char *s)
{
	const char *colon;
	char pidbuf[16];
	int64_t pid, st;
	size_t n;

	if (!s || !(colon = strchr(s, ':')))
		return ORC_EINVALID;
	n = (size_t)(colon - s);
	if (n == 0 || n >= sizeof(pidbuf))
		return ORC_EINVALID;
	memcpy(pidbuf, s, n);
	pidbuf[n] = '\0';
	if (orc_parse_i64(&pid, pidbuf, 2, 0x3fffffff) < 0 ||
	    orc_parse_i64(&st, colon + 1, 0, INT64_MAX) < 0)
		return ORC_EINVALID;
	out->pid = (pid_t)pid;
	out->starttime = (uint64_t)st;
	return 0;
}

void ctl_proc_id_format(char *buf, size_t len, const struct ctl_proc_id *p)
{
	snprintf(buf, len, "%d:%" PRIu64, (int)p->pid, p->starttime);
}

int ctl_proc_id_alive(const struct ctl_proc_id *p)
{
	uint64_t st;
	char state;

	if (proc_stat(p->pid, &state, NULL, &st, NULL, 0) < 0)
		return 0;
	return st == p->starttime && state != 'Z' && state != 'X';
}

int ctl_proc_id_kill(const struct ctl_proc_id *p, int64_t timeout_ms)
{
	int64_t deadline = orc_mono_ms() + timeout_ms;
	struct timespec ts = { 0, 2 * 1000 * 1000 };

	if (!ctl_proc_id_alive(p))
		return 0;
	/* pid namespace init: SIGKILL takes the whole namespace with it. */
	kill(p->pid, SIGKILL);
	while (ctl_proc_id_alive(p)) {
		if (orc_mono_ms() >= deadline)
			return ORC_ETIMEOUT;
		nanosleep(&ts, NULL);
	}
	return 0;
}

/* If the NUL-separated cmdline binds "<state_dir>/<id>/run", return id. */
static int cmdline_sandbox(char *id, size_t idlen, const char *cmd, size_t len, const char *state_dir)
{
	size_t sl = strlen(state_dir), n;
	const char *p = cmd, *end = cmd + len, *rest, *slash;

	for (; p < end; p += strlen(p) + 1) {
		if (strncmp(p, state_dir, sl) || p[sl] != '/')
			continue;
		rest = p + sl + 1;
		slash = strchr(rest, '/');
		if (!slash || strcmp(slash, "/run"))
			continue;
		n = (size_t)(slash - rest);
		if (n == 0 || n >= idlen)
			continue;
		memcpy(id, rest, n);
		id[n] = '\0';
		if (!orc_is_dns_label(id))
			continue;
		return 1;
	}
	return 0;
}

void ctl_proc_scan_bwrap(const char *state_dir, ctl_proc_scan_fn fn, void *arg)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	char comm[32], path[64], cmd[8192], id[64];
	uint64_t st;
	pid_t pid, ppid;
	ssize_t n;
	char state;

	if (!d)
		return;
	while ((de = readdir(d)) != NULL) {
		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		pid = (pid_t)strtol(de->d_name, NULL, 10);
		if (pid <= 1 || proc_stat(pid, &state, &ppid, &st, comm, sizeof(comm)) < 0)
			continue;
		if (strcmp(comm, "bwrap") || state == 'Z')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
		if ((n = read_small(path, cmd, sizeof(cmd))) <= 0)
			continue;
		if (cmdline_sandbox(id, sizeof(id), cmd, (size_t)n, state_dir))
			fn(id, pid, arg);
	}
	closedir(d);
}
