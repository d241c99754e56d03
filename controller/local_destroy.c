/*
 * The local driver's destroy operation: kill the sandbox (by its handle,
 * else by a /proc scan), empty and remove its cgroups, its socket link,
 * its image overlay and $STATE/<id>/. Idempotent, and works from nothing
 * but the id after a crash mid-launch.
 */
#include "btrfs.h"
#include "cgroup.h"
#include "driver.h"
#include "image.h"
#include "local.h"
#include "local_driver.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "log.h"
#include "strutil.h"
#include "xalloc.h"

#define CGROUP_FILE_MAX 4096

struct scan_kill {
	const char *id;
	int found;
};

static void scan_kill_fn(const char *id, pid_t pid, void *arg)
{
	struct scan_kill *sk = arg;
	struct ctl_proc_id p;

	if (strcmp(id, sk->id) || ctl_proc_id_of(&p, pid) < 0)
		return;
	sk->found++;
	ctl_proc_id_kill(&p, LOCAL_KILL_TIMEOUT_MS);
}

/* The cgroup dirs recorded in <id>/cgroup, plus where they would be now. */
static void sandbox_cgroups(struct ctl_strv *out, struct local *l, const char *id)
{
	char path[128], buf[CGROUP_FILE_MAX], *line, *save;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/cgroup", id);
	if ((fd = openat(l->state_fd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) >= 0) {
		do
			n = read(fd, buf, sizeof(buf) - 1);
		while (n < 0 && errno == EINTR);
		close(fd);
		if (n > 0) {
			buf[n] = '\0';
			for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
				ctl_strv_push(out, line);
		}
	}
	ctl_cgroup_dirs(out, &l->cg, id);
}

/* Empty (SIGKILL) and remove the sandbox's cgroups. */
static int remove_cgroups(struct local *l, const char *id)
{
	struct ctl_strv dirs = CTL_STRV_INIT;
	size_t i;
	int err = 0;

	sandbox_cgroups(&dirs, l, id);
	for (i = 0; i < dirs.n; i++)
		if (ctl_cgroup_remove(dirs.v[i], id, LOCAL_KILL_TIMEOUT_MS) < 0)
			err = ORC_ERROR;
	ctl_strv_release(&dirs);
	return err;
}

int local_destroy(struct ctl_driver *d, const char *id, const char *handle)
{
	struct ctl_proc_id row_p, file_p;
	int have_row, have_file, err = 0;

	int froze;

	if (!orc_is_dns_label(id))
		return ORC_EINVALID;
	/* A fork still launching in its helper: stop that first. */
	free(local_job_cancel(L(d), &froze, LOCAL_JOB_LAUNCH, id));
	local_unwatch(d, id);
	/* A paused sandbox: frozen processes do not die of SIGKILL. */
	if (ctl_cgroup_frozen(&L(d)->cg, id))
		ctl_cgroup_freeze(&L(d)->cg, id, 0, LOCAL_KILL_TIMEOUT_MS);
	have_row = handle && ctl_proc_id_parse(&row_p, handle) == 0;
	have_file = local_handle_read(&file_p, L(d), id) == 0;
	if (have_row && ctl_proc_id_kill(&row_p, LOCAL_KILL_TIMEOUT_MS) < 0)
		err = ORC_ETIMEOUT;
	if (have_file && (!have_row || file_p.pid != row_p.pid) &&
	    ctl_proc_id_kill(&file_p, LOCAL_KILL_TIMEOUT_MS) < 0)
		err = ORC_ETIMEOUT;
	if (!have_row && !have_file && !ctl_cgroups_any(&L(d)->cg)) {
		/* Lost track of it (a crash mid-launch) and no cgroup to empty:
		 * look in /proc. */
		struct scan_kill sk = { id, 0 };
		ctl_proc_scan_bwrap(d->cfg->state_dir, scan_kill_fn, &sk);
	}
	/* A killed watchdog is our zombie (spawn.c) until reaped. */
	ctl_spawn_reap();
	if (err < 0) {
		orc_log(ORC_LOG_ERROR, "sandbox did not die after SIGKILL", "sandbox_id", id, NULL);
		return err;
	}
	/* Also kills what is left outside the pid namespace (the watchdog,
	 * bwrap's monitor). Before the dir, which records the cgroups. */
	if (remove_cgroups(L(d), id) < 0)
		return ORC_ERROR;
	ctl_cgroups_tidy(&L(d)->cg);
	local_remove_link(L(d), id);
	{
		/* An imported image's overlay, mounted on the host. */
		char *dir = xasprintf("%s/%s", d->cfg->state_dir, id);
		int uerr = ctl_image_layer_unmount(dir);
		free(dir);
		if (uerr < 0)
			return uerr;
	}
	if (ctl_btrfs_remove(L(d)->state_fd, id) < 0) {
		orc_log(ORC_LOG_ERROR, "removing the sandbox dir failed", "sandbox_id", id, NULL);
		return ORC_ERROR;
	}
	/* Last: nothing of the sandbox's uid is left to a next owner. */
	return local_uid_release(d, id);
}
