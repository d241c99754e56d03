/*
 * The local driver's create operation: check the request, prepare
 * $STATE/<id>/ (driver_local.c has its layout), the image's root, the
 * cgroups, then start bubblewrap under the sandbox's watchdog and record
 * the watchdog's handle.
 */
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
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "buf.h"
#include "err.h"
#include "log.h"
#include "strutil.h"
#include "xalloc.h"

/* The watchdog fires this long after the TTL, so that a running controller
 * always gets there first and records why. */
#define HARD_DEADLINE_GRACE_S 3

static char env_path[] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
static char env_home[] = "HOME=/root";
static char *const bwrap_env[] = { env_path, env_home, NULL };

/* <id>/ and its subdirectories (uid:gid's), the token, and the log
 * (returned open). */
static int prepare_dir(int *log_out, struct ctl_driver *d, const struct ctl_sandbox *sb,
		       uid_t uid, gid_t gid)
{
	static const struct { const char *name; mode_t mode; } subdirs[] = {
		/* Private to the sandbox uid: <id>/ stays 0711 so nginx reaches
		 * run/agent.sock, so these must close themselves (issue 19). */
		{ "run", 0700 }, { "workspace", 0700 }, { "tmp", 0700 },
	};
	const struct ctl_config *cfg = d->cfg;
	int chown_it = cfg->drop_privileges;
	int dfd = -1, rfd = -1, logfd = -1, err = 0, restored = 0;
	size_t i;

	if (local_sandbox_dir_make(&restored, d, sb) < 0 ||
	    (dfd = openat(L(d)->state_fd, sb->id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		goto fail;
	fchmod(dfd, 0711);
	for (i = 0; i < sizeof(subdirs) / sizeof(*subdirs); i++) {
		if (mkdirat(dfd, subdirs[i].name, subdirs[i].mode) < 0) {
			/* A fork's snapshot brought it, its mode and owner too. */
			if (restored && errno == EEXIST)
				continue;
			goto fail;
		}
		if (fchmodat(dfd, subdirs[i].name, subdirs[i].mode, 0) < 0)
			goto fail;
		if (chown_it && fchownat(dfd, subdirs[i].name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
			goto fail;
	}
	if ((rfd = openat(dfd, "run", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		goto fail;
	if (local_write_file_at(rfd, "token", sb->token, 0600, uid, gid, chown_it) < 0)
		goto fail;
	logfd = openat(dfd, "agent.log", O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0640);
	if (logfd < 0)
		goto fail;
	*log_out = logfd;
	logfd = -1;
	goto done;
fail:
	orc_log(ORC_LOG_ERROR, "preparing the sandbox dir failed", "sandbox_id", sb->id,
		"error", strerror(errno), NULL);
	err = ORC_ERROR;
done:
	if (dfd >= 0)
		close(dfd);
	if (rfd >= 0)
		close(rfd);
	if (logfd >= 0)
		close(logfd);
	return err;
}

static int check_request(struct ctl_driver *d, struct ctl_sandbox *sb)
{
	size_t max_path = sizeof(((struct sockaddr_un *)0)->sun_path) - 1;

	if (!orc_is_dns_label(sb->id)) {
		sb->error = xstrdup("invalid sandbox id");
		return ORC_EINVALID;
	}
	if (strcmp(sb->image, "host")) {
		int err = ctl_image_check(&sb->error, d->cfg, sb->image);
		if (err < 0)
			return err;
	}
	if (!local_direct_fits(d, sb->id) &&
	    strlen(d->cfg->state_dir) + strlen("/" LINK_DIR "/") + LINK_KEY_LEN > max_path) {
		sb->error = xasprintf("the agent socket path under state dir \"%s\" is longer than "
				      "a unix socket address allows; use a shorter ORCHARD_STATE_DIR",
				      d->cfg->state_dir);
		return ORC_EINVALID;
	}
	/* Never the host's network namespace instead (issue 19 item 6). */
	if (!sb->block_network && access(d->cfg->slirp4netns, X_OK) < 0) {
		sb->error = xasprintf("block_network false needs slirp4netns, and \"%s\" is missing on "
				      "the host (install it, or set ORCHARD_SLIRP4NETNS)", d->cfg->slirp4netns);
		return ORC_ERROR;
	}
	if (access(d->cfg->agent_bin, X_OK) < 0) {
		sb->error = xasprintf("agent binary \"%s\" is missing on the host", d->cfg->agent_bin);
		return ORC_ERROR;
	}
	return 0;
}

/* The sandbox's cgroups with its limits, recorded in <id>/cgroup first so
 * that a crash right after still lets destroy find them. */
static int make_cgroups(struct ctl_strv *dirs, struct ctl_driver *d, const struct ctl_sandbox *sb)
{
	struct ctl_cg_limits lim = { sb->cpu_millis, sb->memory_bytes, d->cfg->pids_max };
	struct orc_buf rec = ORC_BUF_INIT;
	struct ctl_strv want = CTL_STRV_INIT;
	size_t i;
	int dfd = -1, err;

	if (!ctl_cgroups_any(&L(d)->cg))
		return 0;
	ctl_cgroup_dirs(&want, &L(d)->cg, sb->id);
	for (i = 0; i < want.n; i++)
		orc_buf_addf(&rec, "%s\n", want.v[i]);
	dfd = openat(L(d)->state_fd, sb->id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0 || (err = local_write_file_at(dfd, "cgroup", orc_buf_cstr(&rec), 0600, 0, 0, 0)) < 0) {
		err = ORC_ERROR;
		goto done;
	}
	err = ctl_cgroup_create(dirs, &L(d)->cg, sb->id, &lim);
done:
	if (dfd >= 0)
		close(dfd);
	orc_buf_release(&rec);
	ctl_strv_release(&want);
	return err;
}

/* An imported image: the root with its private layer (image.c) and the
 * bundled agent's command. */
static int image_root(struct ctl_driver *d, struct ctl_sandbox *sb, const char *dir,
		      struct ctl_strv *agent_cmd)
{
	int dfd, err;

	if ((err = ctl_image_agent_cmd(agent_cmd, &sb->error, d->cfg)) < 0)
		return err;
	dfd = openat(L(d)->state_fd, sb->id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0) {
		sb->error = xasprintf("cannot open the sandbox dir: %s", strerror(errno));
		return ORC_ERROR;
	}
	err = ctl_image_layer_make(&sb->error, d->cfg, dfd, dir, sb->image);
	close(dfd);
	return err;
}

/* Launch sb here (in the loop) or in a fork's helper (in_helper: the
 * loop watches its run/ dir once the result is in). */
static int launch(struct ctl_driver *d, struct ctl_sandbox *sb, int in_helper)
{
	struct ctl_strv argv = CTL_STRV_INIT, cgdirs = CTL_STRV_INIT, procs = CTL_STRV_INIT;
	struct ctl_strv agent_cmd = CTL_STRV_INIT;
	struct ctl_proc_id p;
	struct ctl_spawn sp;
	char handle[48], *why, *dir = NULL;
	int logfd = -1, scfd = -1, err, imported = strcmp(sb->image, "host") != 0;
	uid_t uid = d->cfg->sandbox_uid;
	gid_t gid = d->cfg->sandbox_gid;
	pid_t watchdog;

	if ((err = check_request(d, sb)) < 0)
		return err;
	if (local_handle_read(&p, L(d), sb->id) == 0 && ctl_proc_id_alive(&p)) {
		/* Launched by a controller that died before recording it. */
		ctl_proc_id_format(handle, sizeof(handle), &p);
		orc_log(ORC_LOG_INFO, "adopting a running sandbox", "sandbox_id", sb->id,
			"handle", handle, NULL);
		goto out;
	}
	/* Leftovers of an earlier attempt. */
	if (faccessat(L(d)->state_fd, sb->id, F_OK, AT_SYMLINK_NOFOLLOW) == 0 &&
	    (err = local_destroy(d, sb->id, NULL)) < 0) {
		sb->error = xstrdup("could not clean up an earlier attempt");
		return err;
	}
	if (local_uid_own(d, sb->image)) {
		if ((err = local_uid_claim(&uid, d, sb->id)) < 0) {
			sb->error = xstrdup("no free host uid for the sandbox (ORCHARD_SANDBOX_UID_COUNT)");
			goto fail;
		}
		gid = (gid_t)uid;
	}
	if ((err = prepare_dir(&logfd, d, sb, uid, gid)) < 0) {
		sb->error = xstrdup("could not prepare the sandbox directory on the host");
		goto fail;
	}
	if ((err = local_disk_limit(d, sb)) < 0)
		goto fail;
	dir = xasprintf("%s/%s", d->cfg->state_dir, sb->id);
	if (imported && (err = image_root(d, sb, dir, &agent_cmd)) < 0)
		goto fail;
	if (sb->restore && (err = local_checkpoint_restore(d, sb, in_helper)) < 0)
		goto fail;
	if (sb->restore && local_uid_own(d, sb->image) &&
	    (err = local_uid_chown_parts(&sb->error, d, sb->id, uid, gid)) < 0)
		goto fail;
	if (!local_direct_fits(d, sb->id) && (err = local_make_link(L(d), sb->id)) < 0) {
		sb->error = xstrdup("could not create the agent socket's short link on the host");
		goto fail;
	}
	if ((err = make_cgroups(&cgdirs, d, sb)) < 0) {
		sb->error = xstrdup("could not create the sandbox's cgroups (resource limits)");
		goto fail;
	}
	for (size_t i = 0; i < cgdirs.n; i++)
		ctl_strv_pushf(&procs, "%s/cgroup.procs", cgdirs.v[i]);
	if ((scfd = ctl_seccomp_open(L(d)->seccomp_fd)) < 0) {
		sb->error = xstrdup("could not open the seccomp filter");
		err = ORC_ERROR;
		goto fail;
	}
	{
		char *root = imported ? xasprintf("%s/root", dir) : NULL;
		struct ctl_bwrap_spec spec = {
			d->cfg->bwrap_bin, &L(d)->layout, sb->id, dir, d->cfg->agent_bin,
			sb->block_network, CTL_SPAWN_SECCOMP_FD,
			root, d->cfg->agent_bundle, &agent_cmd,
			sb->tools ? L(d)->tools : NULL, d->cfg->tools_mount, &L(d)->tools_profile,
			&cgdirs,
		};
		ctl_bwrap_argv(&argv, &spec);
		free(root);
	}
	sp = (struct ctl_spawn){
		d->cfg->watchdog_bin, sb->ttl_left_s > 0 ? sb->ttl_left_s + HARD_DEADLINE_GRACE_S : 1,
		argv.v, bwrap_env, logfd, d->cfg->drop_privileges,
		uid, gid,
		procs.n ? procs.v : NULL, scfd,
		sb->block_network ? NULL : d->cfg->slirp4netns,
	};
	if (!in_helper)
		local_watch_run_dir(L(d), d->cfg->state_dir, sb->id);
	if ((err = ctl_spawn_sandbox(&watchdog, &sp)) < 0) {
		why = local_diagnose(d, sb->id);
		sb->error = xasprintf("launching bubblewrap failed%s%s", why ? ": " : "", why ? why : "");
		free(why);
		goto fail;
	}
	/* The handle names the watchdog: it lives exactly as long as the
	 * sandbox, and killing it kills the sandbox. */
	if ((err = ctl_proc_id_of(&p, watchdog)) < 0) {
		why = local_diagnose(d, sb->id);
		sb->error = xasprintf("the sandbox exited at once%s%s", why ? ": " : "", why ? why : "");
		free(why);
		goto fail;
	}
	ctl_proc_id_format(handle, sizeof(handle), &p);
	{
		int dfd = openat(L(d)->state_fd, sb->id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (dfd < 0 || local_write_file_at(dfd, "handle", handle, 0600, 0, 0, 0) < 0) {
			if (dfd >= 0)
				close(dfd);
			ctl_proc_id_kill(&p, LOCAL_KILL_TIMEOUT_MS);
			sb->error = xstrdup("could not record the sandbox handle on the host");
			err = ORC_ERROR;
			goto fail;
		}
		close(dfd);
	}
out:
	free(sb->handle);
	sb->handle = xstrdup(handle);
	free(sb->address);
	sb->address = local_agent_address(d, sb->id);
	err = 0;
	goto done;
fail:
	local_destroy(d, sb->id, NULL);
done:
	if (logfd >= 0)
		close(logfd);
	if (scfd >= 0)
		close(scfd);
	ctl_strv_release(&argv);
	ctl_strv_release(&cgdirs);
	ctl_strv_release(&procs);
	ctl_strv_release(&agent_cmd);
	free(dir);
	return err;
}

/*
 * A fork's launch runs in a helper process (local_job.c), at most
 * ORCHARD_FORK_PARALLEL at once, so the k sandboxes of a fork are
 * restored and started concurrently and the loop is never held by a
 * restore's copy. The helper answers "0 <handle>" or "<error> <message>".
 */
struct launch_job {
	struct ctl_driver *d;
	struct ctl_sandbox *sb;
};

static void launch_helper(int wfd, void *arg)
{
	struct launch_job *job = arg;
	struct orc_buf out = ORC_BUF_INIT;
	int err = launch(job->d, job->sb, 1);

	if (err == 0)
		orc_buf_addf(&out, "0 %s", job->sb->handle);
	else
		orc_buf_addf(&out, "%d %s", err < 0 ? err : ORC_ERROR,
			     job->sb->error ? job->sb->error : "launching the sandbox failed");
	local_job_write(wfd, out.ptr, out.len);
	orc_buf_release(&out);
}

/* sb's launch in its helper: the result, or CTL_CREATE_RUNNING. */
static int launch_poll(struct ctl_driver *d, struct ctl_sandbox *sb)
{
	struct orc_buf out = ORC_BUF_INIT;
	int64_t code = ORC_ERROR;
	char *sp = NULL;
	int froze, err = local_job_poll(L(d), &out, &froze, LOCAL_JOB_LAUNCH, sb->id);

	if (err == 1)
		return CTL_CREATE_RUNNING;
	if (out.ptr && (sp = strchr(out.ptr, ' ')) != NULL)
		*sp++ = '\0';
	if (!sp || orc_parse_i64(&code, out.ptr, INT32_MIN, 0) < 0) {
		sb->error = xstrdup("launching the sandbox failed: its helper process died");
		err = ORC_ERROR;
		goto done;
	}
	if (code < 0) {
		sb->error = xstrdup(sp);
		err = (int)code;
		goto done;
	}
	free(sb->handle);
	sb->handle = xstrdup(sp);
	free(sb->address);
	sb->address = local_agent_address(d, sb->id);
	/* After the agent may have started: the loop checks it once at
	 * once (rec_launch.c), the watch covers the rest. */
	local_watch_run_dir(L(d), d->cfg->state_dir, sb->id);
	err = 0;
done:
	orc_buf_release(&out);
	return err;
}

int local_create(struct ctl_driver *d, struct ctl_sandbox *sb)
{
	struct launch_job job = { d, sb };

	if (!sb->restore || d->cfg->fork_parallel <= 0)
		return launch(d, sb, 0);
	if (local_job_busy(L(d), LOCAL_JOB_LAUNCH, sb->id, NULL) == 1)
		return launch_poll(d, sb);
	/* At the bound: asked again (queued) until a helper is free. */
	if (local_job_count(L(d), LOCAL_JOB_LAUNCH) >= (size_t)d->cfg->fork_parallel)
		return CTL_CREATE_RUNNING;
	if (local_job_start(L(d), &sb->error, LOCAL_JOB_LAUNCH, sb->id, sb->id, 0, launch_helper,
			    &job) < 0)
		return ORC_ERROR;
	return CTL_CREATE_RUNNING;
}
