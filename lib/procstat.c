#include "procstat.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"

ssize_t orc_read_small(const char *path, char *buf, size_t len)
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

/* The command name is in parentheses and may contain anything, so the
 * fields are parsed after the last ')'. */
int orc_proc_stat(struct orc_proc_stat *out, pid_t pid)
{
	char path[64], buf[1024];
	char *open_p, *close_p, *p, *end;
	unsigned long long v;
	size_t n;
	int field;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (orc_read_small(path, buf, sizeof(buf)) <= 0)
		return ORC_ENOTFOUND;
	open_p = strchr(buf, '(');
	close_p = strrchr(buf, ')');
	if (!open_p || !close_p || close_p < open_p || close_p[1] != ' ')
		return ORC_ERROR;
	n = (size_t)(close_p - open_p - 1);
	if (n >= sizeof(out->comm))
		n = sizeof(out->comm) - 1;
	memcpy(out->comm, open_p + 1, n);
	out->comm[n] = '\0';
	p = close_p + 2;
	/* p is at field 3 (state). */
	out->state = *p;
	for (field = 3; field < 22; field++) {
		if (!(p = strchr(p, ' ')))
			return ORC_ERROR;
		p++;
		if (field + 1 == 4 || field + 1 == 6) {
			errno = 0;
			v = strtoull(p, &end, 10);
			if (errno || end == p)
				return ORC_ERROR;
			if (field + 1 == 4)
				out->ppid = (pid_t)v;
			else
				out->session = (pid_t)v;
		}
	}
	errno = 0;
	v = strtoull(p, &end, 10);
	if (errno || end == p)
		return ORC_ERROR;
	out->starttime = v;
	return 0;
}

int orc_proc_is(pid_t pid, uint64_t starttime)
{
	struct orc_proc_stat st;

	if (pid <= 0 || orc_proc_stat(&st, pid) < 0)
		return 0;
	return st.starttime == starttime && st.state != 'Z' && st.state != 'X';
}
