/*
 * The local driver reads a sandbox's host state back ($STATE/<id>/, see
 * driver_local.c): its handle file, whether it runs, which sandboxes have
 * anything on the host, and its log's last line for a failure's reason.
 * Nothing is kept in memory, so all of this works after a restart.
 */
#include "local.h"
#include "local_driver.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "strutil.h"
#include "xalloc.h"

/* The handle recorded in <id>/handle, if any. */
int local_handle_read(struct ctl_proc_id *out, struct local *l, const char *id)
{
	char path[128], buf[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/handle", id);
	if ((fd = openat(l->state_fd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return ORC_ENOTFOUND;
	do
		n = read(fd, buf, sizeof(buf) - 1);
	while (n < 0 && errno == EINTR);
	close(fd);
	if (n <= 0)
		return ORC_ENOTFOUND;
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	return ctl_proc_id_parse(out, buf);
}

int local_write_file_at(int dfd, const char *name, const char *data, mode_t mode,
			uid_t uid, gid_t gid, int chown_it)
{
	size_t len = strlen(data), off = 0;
	ssize_t w;
	int fd, err = 0;

	fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode);
	if (fd < 0)
		return ORC_ERROR;
	if (chown_it && fchown(fd, uid, gid) < 0)
		err = ORC_ERROR;
	while (!err && off < len) {
		w = write(fd, data + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			err = ORC_ERROR;
			break;
		}
		off += (size_t)w;
	}
	if (close(fd) < 0)
		err = ORC_ERROR;
	return err;
}

char *local_diagnose(struct ctl_driver *d, const char *id)
{
	char path[128], buf[1024];
	ssize_t n;
	off_t size;
	char *end, *line;
	int fd;

	snprintf(path, sizeof(path), "%s/agent.log", id);
	if ((fd = openat(L(d)->state_fd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return NULL;
	size = lseek(fd, 0, SEEK_END);
	if (size > (off_t)sizeof(buf) - 1)
		lseek(fd, size - (off_t)(sizeof(buf) - 1), SEEK_SET);
	else
		lseek(fd, 0, SEEK_SET);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return NULL;
	buf[n] = '\0';
	/* The last non-empty line, bounded and made printable. */
	end = buf + n;
	while (end > buf && (end[-1] == '\n' || end[-1] == '\r'))
		*--end = '\0';
	line = end;
	while (line > buf && line[-1] != '\n')
		line--;
	if (!*line)
		return NULL;
	for (char *p = line; *p; p++)
		if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f)
			*p = ' ';
	if (!orc_utf8_valid(line, strlen(line)))
		return NULL;
	return xstrndup(line, 300);
}

int local_alive(struct ctl_driver *d, const char *id, const char *handle)
{
	struct ctl_proc_id p;

	if (handle && ctl_proc_id_parse(&p, handle) == 0)
		return ctl_proc_id_alive(&p);
	if (local_handle_read(&p, L(d), id) == 0)
		return ctl_proc_id_alive(&p);
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

struct id_list {
	char **v;
	size_t n, alloc;
};

static void id_list_add(struct id_list *l, const char *id)
{
	if (l->n == l->alloc) {
		l->alloc = l->alloc ? orc_mul_size(l->alloc, 2) : 32;
		l->v = xrealloc(l->v, orc_mul_size(l->alloc, sizeof(*l->v)));
	}
	l->v[l->n++] = xstrdup(id);
}

static void scan_list_fn(const char *id, pid_t pid, void *arg)
{
	(void)pid;
	id_list_add(arg, id);
}

static void id_list_fn(const char *id, void *arg)
{
	id_list_add(arg, id);
}

int local_list_owned(struct ctl_driver *d, char ***out, size_t *nout)
{
	struct id_list l = { NULL, 0, 0 };
	struct dirent *de;
	size_t i, j;
	int fd;
	DIR *dir;

	ctl_spawn_reap();
	if ((fd = dup(L(d)->state_fd)) < 0)
		return ORC_ERROR;
	if (!(dir = fdopendir(fd))) {
		close(fd);
		return ORC_ERROR;
	}
	rewinddir(dir);
	while ((de = readdir(dir)) != NULL)
		if (orc_is_dns_label(de->d_name))
			id_list_add(&l, de->d_name);
	closedir(dir);
	/* Every process of a sandbox is in its cgroup, so with cgroups the
	 * cgroup dirs find what lost its host dir; the /proc scan (every
	 * bwrap on the host, costly with thousands) is the fallback. */
	if (ctl_cgroups_any(&L(d)->cg))
		ctl_cgroups_list(&L(d)->cg, id_list_fn, &l);
	else
		ctl_proc_scan_bwrap(d->cfg->state_dir, scan_list_fn, &l);
	/* A claimed uid whose sandbox left nothing else (a crash mid-launch). */
	local_uid_list(d, id_list_fn, &l);
	/* Sort and drop duplicates (a sandbox has a dir and two processes). */
	if (l.n)
		qsort(l.v, l.n, sizeof(*l.v), cmp_str);
	for (i = 0, j = 0; i < l.n; i++) {
		if (j && !strcmp(l.v[j - 1], l.v[i])) {
			free(l.v[i]);
			continue;
		}
		l.v[j++] = l.v[i];
	}
	*out = l.v;
	*nout = j;
	return 0;
}
