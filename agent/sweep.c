/* Killing what a timed-out or cancelled command left behind (sweep.h). */
#include "sweep.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "strutil.h"
#include "xalloc.h"

#define ENVIRON_READ (256 * 1024)  /* more than a command's environment ever is */
#define MAX_PASSES 5

void agent_sweep_entry(char out[AGENT_SWEEP_ENTRY_MAX])
{
	char hex[AGENT_SWEEP_TAG_LEN + 1];

	orc_random_hex(hex, AGENT_SWEEP_TAG_LEN / 2);
	snprintf(out, AGENT_SWEEP_ENTRY_MAX, "%s=%s", AGENT_SWEEP_VAR, hex);
}

char **agent_sweep_envp(char *entry, char *const *envp)
{
	size_t n = 0, i;
	char **out;

	while (envp && envp[n])
		n++;
	out = xcalloc(orc_add_size(n, 2), sizeof(*out));
	out[0] = entry;
	for (i = 0; i < n; i++)
		out[i + 1] = envp[i];
	return out;
}

/* 1 when the environment of process dfd (a /proc/<pid> dir) holds entry.
 * A shell passes its children its variables in its own order, so the
 * whole environ is searched (up to buflen bytes of it). */
static int has_entry(int dfd, const char *entry, char *buf, size_t buflen)
{
	size_t len = strlen(entry) + 1, got = 0, i;
	ssize_t n;
	int fd;

	if ((fd = openat(dfd, "environ", O_RDONLY | O_CLOEXEC)) < 0)
		return 0;
	while (got < buflen) {
		n = read(fd, buf + got, buflen - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	/* entry and its NUL, at the start of a variable */
	for (i = 0; i + len <= got; i += strnlen(buf + i, got - i) + 1)
		if (!memcmp(buf + i, entry, len))
			return 1;
	return 0;
}

static int is_pid(const char *s)
{
	for (; *s; s++)
		if (!isdigit((unsigned char)*s))
			return 0;
	return 1;
}

/* One pass over /proc; how many processes it killed. */
static int sweep_pass(const char *entry, pid_t self, char *buf)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	int killed = 0, fd;
	long pid;

	if (!d) {
		orc_logf(ORC_LOG_WARN, "opendir() \"/proc\" failed: %s", strerror(errno));
		return 0;
	}
	while ((de = readdir(d))) {
		if (!is_pid(de->d_name) || (pid = strtol(de->d_name, NULL, 10)) <= 1 || pid == self)
			continue;
		if ((fd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
			continue;
		if (has_entry(fd, entry, buf, ENVIRON_READ) && kill((pid_t)pid, SIGKILL) == 0)
			killed++;
		close(fd);
	}
	closedir(d);
	return killed;
}

int agent_sweep_kill(const char *entry)
{
	char *buf = xmalloc(ENVIRON_READ);
	pid_t self = getpid();
	int total = 0, n, pass;

	/* A process may fork while a pass reads /proc: pass again until
	 * one finds nothing (one killed earlier may still be exiting). */
	for (pass = 0; pass < MAX_PASSES; pass++) {
		if (!(n = sweep_pass(entry, self, buf)))
			break;
		total += n;
		usleep(20000);
	}
	free(buf);
	return total;
}
