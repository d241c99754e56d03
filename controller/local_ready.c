/*
 * Readiness hints of the local driver: an inotify watch on each launched
 * sandbox's run/ dir reports the agent's socket appearing, so launched
 * sandboxes need not be polled.
 */
#include "local_driver.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "xalloc.h"

/* ---- readiness: the agent's socket appearing in <id>/run/ ---------------- */

void local_watch_run_dir(struct local *l, const char *state_dir, const char *id)
{
	char *path;
	int wd;

	if (l->ino_fd < 0)
		return;
	path = xasprintf("%s/%s/run", state_dir, id);
	wd = inotify_add_watch(l->ino_fd, path, IN_CREATE | IN_MOVED_TO | IN_ONLYDIR);
	free(path);
	if (wd < 0)
		return;   /* e.g. out of watches: polling finds it */
	if (l->nwatches == l->awatches) {
		l->awatches = l->awatches ? orc_mul_size(l->awatches, 2) : 16;
		l->watches = xrealloc(l->watches, orc_mul_size(l->awatches, sizeof(*l->watches)));
	}
	l->watches[l->nwatches].wd = wd;
	l->watches[l->nwatches].id = xstrdup(id);
	l->nwatches++;
}

static void unwatch_at(struct local *l, size_t i, int rm)
{
	if (rm)
		inotify_rm_watch(l->ino_fd, l->watches[i].wd);
	free(l->watches[i].id);
	l->watches[i] = l->watches[--l->nwatches];
}

void local_unwatch(struct ctl_driver *d, const char *id)
{
	struct local *l = L(d);
	size_t i;

	for (i = 0; i < l->nwatches; i++) {
		if (!strcmp(l->watches[i].id, id)) {
			unwatch_at(l, i, 1);
			return;
		}
	}
}

int local_events_fd(struct ctl_driver *d)
{
	return L(d)->ino_fd;
}

void local_drain(struct ctl_driver *d, ctl_ready_fn fn, void *arg)
{
	struct local *l = L(d);
	char buf[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
	const struct inotify_event *ev;
	ssize_t n;
	size_t i;
	char *p;

	if (l->ino_fd < 0)
		return;
	for (;;) {
		n = read(l->ino_fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		for (p = buf; p < buf + n; p += sizeof(*ev) + ev->len) {
			ev = (const struct inotify_event *)p;
			if (ev->mask & IN_Q_OVERFLOW) {
				for (i = 0; i < l->nwatches; i++)
					fn(l->watches[i].id, arg);
				continue;
			}
			for (i = 0; i < l->nwatches; i++) {
				if (l->watches[i].wd != ev->wd)
					continue;
				if (ev->mask & IN_IGNORED)
					unwatch_at(l, i, 0);   /* the dir is gone */
				else if (ev->len && !strcmp(ev->name, "agent.sock"))
					fn(l->watches[i].id, arg);
				break;
			}
		}
	}
}
