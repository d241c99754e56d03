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
#include "procstat.h"
#include "strutil.h"

int ctl_proc_id_of(struct ctl_proc_id *out, pid_t pid)
{
	struct orc_proc_stat st;
	int err;

	if ((err = orc_proc_stat(&st, pid)) < 0)
		return err;
	out->pid = pid;
	out->starttime = st.starttime;
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
	return orc_proc_is(p->pid, p->starttime);
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
	struct orc_proc_stat st;
	char path[64], cmd[8192], id[64];
	pid_t pid;
	ssize_t n;

	if (!d)
		return;
	while ((de = readdir(d)) != NULL) {
		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		pid = (pid_t)strtol(de->d_name, NULL, 10);
		if (pid <= 1 || orc_proc_stat(&st, pid) < 0)
			continue;
		if (strcmp(st.comm, "bwrap") || st.state == 'Z')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
		if ((n = orc_read_small(path, cmd, sizeof(cmd))) <= 0)
			continue;
		if (cmdline_sandbox(id, sizeof(id), cmd, (size_t)n, state_dir))
			fn(id, pid, arg);
	}
	closedir(d);
}
