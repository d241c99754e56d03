/*
 * Launching a sandbox: posix_spawn of orchard-watchdog in a new session.
 *
 * posix_spawn (glibc: clone with CLONE_VM|CLONE_VFORK) shares our address
 * space until the exec instead of copying its page tables; the old fork,
 * setsid, fork of the whole controller cost about 18 ms of CPU per sandbox
 * (bench/README.md). Everything that is slow or needs the sandbox's own
 * process (joining cgroups, dropping privileges) happens in the watchdog
 * after the exec, so we never wait for it.
 *
 * The watchdog is our child: when we die it is reparented to init (or the
 * nearest subreaper) and the sandbox lives on; while we live we reap it.
 */
#include "local.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "err.h"
#include "log.h"

#define HIGH_FD 16

/* orchard-watchdog --ttl N [--user U:G] [--cgroup P]... [--slirp4netns S] -- argv... */
static void watchdog_argv(struct ctl_strv *out, const struct ctl_spawn *sp)
{
	ctl_strv_push(out, sp->watchdog);
	ctl_strv_push(out, "--ttl");
	ctl_strv_pushf(out, "%lld", (long long)(sp->ttl_s > 0 ? sp->ttl_s : 1));
	if (sp->drop_privileges) {
		ctl_strv_push(out, "--user");
		ctl_strv_pushf(out, "%u:%u", (unsigned)sp->uid, (unsigned)sp->gid);
	}
	for (char *const *cg = sp->cgroup_procs; cg && *cg; cg++) {
		ctl_strv_push(out, "--cgroup");
		ctl_strv_push(out, *cg);
	}
	if (sp->slirp4netns) {
		ctl_strv_push(out, "--slirp4netns");
		ctl_strv_push(out, sp->slirp4netns);
	}
	ctl_strv_push(out, "--");
	for (char *const *a = sp->argv; *a; a++)
		ctl_strv_push(out, *a);
}

/* The child's fds: 0 /dev/null, 1 and 2 the log, 3 the seccomp filter,
 * nothing else. Sources are moved above HIGH_FD first so that no dup2
 * can clobber another's source. */
static int plan_fds(posix_spawn_file_actions_t *fa, int hi[3], const struct ctl_spawn *sp)
{
	int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);

	if (devnull < 0)
		return -1;
	hi[0] = fcntl(devnull, F_DUPFD_CLOEXEC, HIGH_FD);
	close(devnull);
	hi[1] = fcntl(sp->log_fd, F_DUPFD_CLOEXEC, HIGH_FD);
	hi[2] = sp->seccomp_fd >= 0 ? fcntl(sp->seccomp_fd, F_DUPFD_CLOEXEC, HIGH_FD) : -1;
	if (hi[0] < 0 || hi[1] < 0 || (sp->seccomp_fd >= 0 && hi[2] < 0))
		return -1;
	if (posix_spawn_file_actions_adddup2(fa, hi[0], 0) ||
	    posix_spawn_file_actions_adddup2(fa, hi[1], 1) ||
	    posix_spawn_file_actions_adddup2(fa, hi[1], 2) ||
	    (hi[2] >= 0 ? posix_spawn_file_actions_adddup2(fa, hi[2], CTL_SPAWN_SECCOMP_FD)
			: posix_spawn_file_actions_addclose(fa, CTL_SPAWN_SECCOMP_FD)) ||
	    posix_spawn_file_actions_addclosefrom_np(fa, CTL_SPAWN_SECCOMP_FD + 1))
		return -1;
	return 0;
}

int ctl_spawn_sandbox(pid_t *out, const struct ctl_spawn *sp)
{
	struct ctl_strv argv = CTL_STRV_INIT;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t all, none;
	int hi[3] = { -1, -1, -1 }, rc, err = 0;
	pid_t pid;

	watchdog_argv(&argv, sp);
	/* Both fail only without memory, which aborts (xalloc.h's rule). */
	if (posix_spawn_file_actions_init(&fa) != 0 || posix_spawnattr_init(&attr) != 0)
		abort();
	if (plan_fds(&fa, hi, sp) < 0) {
		orc_log(ORC_LOG_ERROR, "sandbox launch: preparing its fds failed", "error", strerror(errno), NULL);
		err = ORC_ERROR;
		goto done;
	}
	/* We block SIGTERM/SIGINT and ignore SIGPIPE; none of that may leak
	 * into the sandbox. */
	sigfillset(&all);
	sigemptyset(&none);
	if (posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK |
				     POSIX_SPAWN_SETSID) != 0 ||
	    posix_spawnattr_setsigdefault(&attr, &all) != 0 ||
	    posix_spawnattr_setsigmask(&attr, &none) != 0)
		abort();
	rc = posix_spawn(&pid, sp->watchdog, &fa, &attr, argv.v, sp->envp);
	if (rc != 0) {
		orc_log(ORC_LOG_ERROR, "sandbox launch: posix_spawn() failed", "path", sp->watchdog,
			"error", strerror(rc), NULL);
		err = ORC_ERROR;
		goto done;
	}
	*out = pid;
done:
	for (int i = 0; i < 3; i++)
		if (hi[i] >= 0)
			close(hi[i]);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	ctl_strv_release(&argv);
	return err;
}

void ctl_spawn_reap(void)
{
	int status;

	while (waitpid(-1, &status, WNOHANG) > 0)
		;
}
