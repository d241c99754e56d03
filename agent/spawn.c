#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buf.h"
#include "err.h"
#include "xalloc.h"

#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* What the child writes to the error pipe when it cannot exec. */
enum child_stage { STAGE_SETUP = 1, STAGE_CHDIR, STAGE_EXEC };
struct child_report {
	int stage;
	int err;
};

/* Everything the child needs, prepared before fork. */
struct child_plan {
	const struct agent_spawn *sp;
	const char *path;          /* resolved program */
	char **sh_argv;            /* /bin/sh PATH ARGS... for ENOEXEC, like execvp */
	sigset_t empty_mask;
	int report_fd;
	int max_fd;                /* for the close_range fallback */
};

static const char *env_get(char *const *envp, const char *name)
{
	size_t n = strlen(name);

	for (; envp && *envp; envp++)
		if (!strncmp(*envp, name, n) && (*envp)[n] == '=')
			return *envp + n + 1;
	return NULL;
}

static int is_executable_file(const char *path, int *eacces)
{
	struct stat st;

	if (stat(path, &st) < 0 || !S_ISREG(st.st_mode))
		return 0;
	if (access(path, X_OK) == 0)
		return 1;
	*eacces = 1;
	return 0;
}

/*
 * The PATH search of execvp, done in the parent so the child need not
 * allocate. Relative PATH entries are skipped: the child changes directory
 * first, so the parent cannot check them truthfully.
 */
static int resolve_program(char **out, int *eacces, const char *name, char *const *envp)
{
	const char *path = env_get(envp, "PATH"), *p, *end;
	struct orc_buf b = ORC_BUF_INIT;

	if (!*name)
		return ORC_ENOTFOUND;
	if (strchr(name, '/')) {
		*out = xstrdup(name);
		return 0;
	}
	if (!path)
		path = DEFAULT_PATH;
	for (p = path; *p; p = *end ? end + 1 : end) {
		end = strchrnul(p, ':');
		if (*p != '/')
			continue;
		orc_buf_reset(&b);
		orc_buf_add(&b, p, (size_t)(end - p));
		orc_buf_addc(&b, '/');
		orc_buf_adds(&b, name);
		if (is_executable_file(b.ptr, eacces)) {
			*out = orc_buf_detach(&b, NULL);
			return 0;
		}
	}
	orc_buf_release(&b);
	return ORC_ENOTFOUND;
}

static char **make_sh_argv(char *path, char *const *argv)
{
	static char sh[] = "/bin/sh";
	size_t n = 0, i;
	char **v;

	while (argv[n])
		n++;
	v = xcalloc(orc_add_size(n, 2), sizeof(*v));
	v[0] = sh;
	v[1] = path;
	for (i = 1; i < n; i++)
		v[i + 1] = argv[i];
	return v;
}

static void write_report(int fd, int stage, int err)
{
	struct child_report r = { stage, err };
	ssize_t w;

	do
		w = write(fd, &r, sizeof(r));
	while (w < 0 && errno == EINTR);
}

/* Make the descriptors at and above `from` close on exec. */
static int cloexec_from(int from, int max_fd)
{
	int fd;

	if (close_range((unsigned)from, ~0U, CLOSE_RANGE_CLOEXEC) == 0)
		return 0;
	for (fd = from; fd < max_fd; fd++)
		fcntl(fd, F_SETFD, FD_CLOEXEC);
	return 0;
}

/* Between fork and exec: async-signal-safe calls only. */
__attribute__((noreturn)) static void child_run(const struct child_plan *pl)
{
	const struct agent_spawn *sp = pl->sp;
	int src[4] = { sp->stdin_fd, sp->stdout_fd, sp->stderr_fd, sp->fd3 };
	int nfd = sp->fd3 >= 0 ? 4 : 3;
	struct sigaction dfl;
	int i;

	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	/* The agent ignores SIGPIPE and blocks SIGCHLD; the command must not
	 * inherit either (an ignored disposition survives exec). */
	sigaction(SIGPIPE, &dfl, NULL);
	sigaction(SIGCHLD, &dfl, NULL);
	sigprocmask(SIG_SETMASK, &pl->empty_mask, NULL);
	if (setsid() < 0)
		goto setup_failed;
	/* Move the sources above 3 first so no dup2 below overwrites one. */
	for (i = 0; i < nfd; i++)
		if ((src[i] = fcntl(src[i], F_DUPFD, 4)) < 0)
			goto setup_failed;
	for (i = 0; i < nfd; i++) {
		int r;
		do
			r = dup2(src[i], i);
		while (r < 0 && errno == EINTR);
		if (r < 0)
			goto setup_failed;
	}
	/* A PTY session: the new session takes the terminal on fd 0 as its
	 * controlling terminal (job control, ^C, SIGWINCH, hangup). */
	if (sp->ctty && ioctl(0, TIOCSCTTY, 0) < 0)
		goto setup_failed;
	cloexec_from(nfd, pl->max_fd);
	if (sp->cwd) {
		if (chdir(sp->cwd) < 0) {
			write_report(pl->report_fd, STAGE_CHDIR, errno);
			_exit(127);
		}
	} else if (chdir("/workspace") < 0 && chdir("/") < 0) {
		write_report(pl->report_fd, STAGE_CHDIR, errno);
		_exit(127);
	}
	execve(pl->path, sp->argv, sp->envp);
	if (errno == ENOEXEC)
		execve("/bin/sh", pl->sh_argv, sp->envp);
	write_report(pl->report_fd, STAGE_EXEC, errno);
	_exit(errno == ENOENT ? 127 : 126);
setup_failed:
	write_report(pl->report_fd, STAGE_SETUP, errno);
	_exit(127);
}

static void failure_message(char **msg_out, int *code_out, const struct agent_spawn *sp,
			    const struct child_report *r)
{
	const char *cwd = sp->cwd ? sp->cwd : "/workspace";

	switch (r->stage) {
	case STAGE_CHDIR:
		*msg_out = xasprintf("cannot change directory to \"%s\": %s", cwd, strerror(r->err));
		*code_out = 127;
		break;
	case STAGE_EXEC:
		*msg_out = xasprintf("cannot execute \"%s\": %s", sp->argv[0], strerror(r->err));
		*code_out = r->err == ENOENT ? 127 : 126;
		break;
	default:
		*msg_out = xasprintf("cannot set up the command: %s", strerror(r->err));
		*code_out = 127;
		break;
	}
}

/*
 * The common case, without a controlling terminal: posix_spawn, which
 * glibc runs as clone(CLONE_VM|CLONE_VFORK). Unlike fork it copies no page
 * tables and sends no TLB-shootdown IPIs to the agent's other threads (a
 * third of an exec's CPU in bench/README.md's profile). The sources of the
 * dup2s are pipes and files above 2 (main.c keeps 0-2 open), so doing them
 * in order overwrites none. Returns 0 or the errno of the failed step.
 */
static int spawn_vfork(pid_t *pid, const struct child_plan *pl, const char *cwd)
{
	const struct agent_spawn *sp = pl->sp;
	int src[4] = { sp->stdin_fd, sp->stdout_fd, sp->stderr_fd, sp->fd3 };
	int nfd = sp->fd3 >= 0 ? 4 : 3, i, rc;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t all;

	posix_spawnattr_init(&at);
	sigfillset(&all);
	posix_spawnattr_setsigdefault(&at, &all);     /* SIGPIPE is ignored here */
	posix_spawnattr_setsigmask(&at, &pl->empty_mask);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGDEF |
				 POSIX_SPAWN_SETSIGMASK);
	posix_spawn_file_actions_init(&fa);
	for (i = 0; i < nfd; i++)
		posix_spawn_file_actions_adddup2(&fa, src[i], i);
	posix_spawn_file_actions_addclosefrom_np(&fa, nfd);
	posix_spawn_file_actions_addchdir_np(&fa, cwd);
	rc = posix_spawn(pid, pl->path, &fa, &at, sp->argv, sp->envp);
	if (rc == ENOEXEC)
		rc = posix_spawn(pid, "/bin/sh", &fa, &at, pl->sh_argv, sp->envp);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	return rc;
}

/* What went wrong in a posix_spawn that answered rc: the chdir or the exec. */
static void spawn_vfork_report(struct child_report *r, const char *cwd, int rc)
{
	struct stat st;

	if (stat(cwd, &st) < 0) {
		*r = (struct child_report){ STAGE_CHDIR, errno };
	} else if (!S_ISDIR(st.st_mode)) {
		*r = (struct child_report){ STAGE_CHDIR, ENOTDIR };
	} else if (access(cwd, X_OK) < 0) {
		*r = (struct child_report){ STAGE_CHDIR, errno };
	} else {
		*r = (struct child_report){ STAGE_EXEC, rc };
	}
}

static int can_vfork(const struct agent_spawn *sp)
{
	return !sp->ctty && sp->stdin_fd > 2 && sp->stdout_fd > 2 && sp->stderr_fd > 2 &&
	       (sp->fd3 < 0 || sp->fd3 > 2);
}

static const char *default_cwd(void)
{
	struct stat st;

	return stat("/workspace", &st) == 0 && S_ISDIR(st.st_mode) ? "/workspace" : "/";
}

int agent_spawn_start(struct agent_child *c, char **failure_out, int *failure_code_out,
		      const struct agent_spawn *sp)
{
	struct child_plan pl;
	struct child_report rep;
	char *path = NULL;
	int report[2] = { -1, -1 };
	int eacces = 0, err = 0;
	size_t got = 0;
	ssize_t n;
	pid_t pid;

	memset(&pl, 0, sizeof(pl));
	if (sp->path)
		path = xstrdup(sp->path);
	else if (resolve_program(&path, &eacces, sp->argv[0], sp->envp) < 0) {
		*failure_out = eacces ?
			xasprintf("cannot execute \"%s\": %s", sp->argv[0], strerror(EACCES)) :
			xasprintf("command not found: \"%s\"", sp->argv[0]);
		*failure_code_out = eacces ? 126 : 127;
		return 0;
	}
	pl.sp = sp;
	pl.path = path;
	pl.sh_argv = make_sh_argv(path, sp->argv);
	sigemptyset(&pl.empty_mask);
	if (can_vfork(sp)) {
		const char *cwd = sp->cwd ? sp->cwd : default_cwd();
		int rc;

		agent_reaper_lock();
		rc = spawn_vfork(&pid, &pl, cwd);
		if (rc == 0 && agent_child_watch_locked(c, pid) < 0) {
			kill(pid, SIGKILL); /* reaped later as an orphan */
			err = ORC_ERROR;
		}
		agent_reaper_unlock();
		if (rc != 0) {
			/* glibc has reaped the child that could not exec */
			spawn_vfork_report(&rep, cwd, rc);
			failure_message(failure_out, failure_code_out, sp, &rep);
		}
		goto done;
	}

	if (pipe2(report, O_CLOEXEC) < 0) {
		err = ORC_ERROR;
		goto done;
	}
	pl.report_fd = report[1];
	pl.max_fd = (int)sysconf(_SC_OPEN_MAX);
	if (pl.max_fd < 0 || pl.max_fd > 65536)
		pl.max_fd = 65536;
	agent_reaper_lock();
	pid = fork();
	if (pid == 0)
		child_run(&pl);
	if (pid < 0 || agent_child_watch_locked(c, pid) < 0) {
		if (pid > 0)
			kill(pid, SIGKILL); /* reaped later as an orphan */
		agent_reaper_unlock();
		err = ORC_ERROR;
		goto done;
	}
	agent_reaper_unlock();

	close(report[1]);
	report[1] = -1;
	/* EOF means exec succeeded (the CLOEXEC end closed). */
	while (got < sizeof(rep)) {
		n = read(report[0], (char *)&rep + got, sizeof(rep) - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	if (got == sizeof(rep))
		failure_message(failure_out, failure_code_out, sp, &rep);
done:
	if (report[0] >= 0)
		close(report[0]);
	if (report[1] >= 0)
		close(report[1]);
	free(pl.sh_argv);
	free(path);
	return err;
}
