/* The sandbox's OOM-kill and refused-fork counters (cglimits.h). */
#include "cglimits.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BOUND_DIR "/run/orchard/cgroup"
#define OWN_DIR "/sys/fs/cgroup"

/* The value of "key N" in a flat-keyed cgroup file; 0 when absent. */
static int64_t counter(int dfd, const char *file, const char *key)
{
	char buf[1024], *line, *save = NULL;
	size_t klen = strlen(key);
	int64_t v = 0;
	ssize_t n;
	int fd;

	if ((fd = openat(dfd, file, O_RDONLY | O_CLOEXEC)) < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		if (!strncmp(line, key, klen) && line[klen] == ' ')
			v = strtoll(line + klen + 1, NULL, 10);
	return v;
}

/* Add what the cgroup dir dfd counts. */
static void add_dir(struct agent_cglimits *c, int dfd)
{
	int64_t oom = counter(dfd, "memory.events", "oom_kill");

	c->oom_kills += oom ? oom : counter(dfd, "memory.oom_control", "oom_kill");
	c->pids_refused += counter(dfd, "pids.events", "max");
}

/* Every subdirectory of path (one per v1 hierarchy); 0 when none. */
static int read_bound(struct agent_cglimits *c, const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;
	int n = 0, fd;

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if ((fd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
			continue;
		add_dir(c, fd);
		close(fd);
		n++;
	}
	closedir(d);
	return n;
}

void agent_cglimits_read(struct agent_cglimits *out)
{
	static const char *const own[] = { OWN_DIR, OWN_DIR "/memory", OWN_DIR "/pids" };
	struct agent_cglimits c = { 0, 0 };
	size_t i;
	int fd;

	if (!read_bound(&c, BOUND_DIR)) {
		for (i = 0; i < sizeof(own) / sizeof(*own); i++) {
			if ((fd = open(own[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
				continue;
			add_dir(&c, fd);
			close(fd);
		}
	}
	*out = c;
}
