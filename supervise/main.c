/*
 * orchard-supervise: the local stack's supervisor (docs/operations.md,
 * "The supervisor").
 *
 *   orchard-supervise --run-dir DIR
 *       --component NAME --start PATH [--stop SIG] [--grace SECONDS] [--group]
 *                        [--adopt PIDFILE MATCH]
 *       --component ...
 *
 * Components start in the order given (each adopted instead when it is
 * already running) and stop in the reverse order. One that dies is
 * restarted after ORCHARD_SUPERVISE_BACKOFF_MS, doubling up to
 * ORCHARD_SUPERVISE_BACKOFF_MAX_MS for each death in a row that came
 * sooner than ORCHARD_SUPERVISE_STABLE_MS after its start; one that exits
 * 0 (its clean exit on a stop signal) is left stopped. SIGHUP starts
 * every stopped component now (scripts/stack.sh up); SIGTERM or SIGINT
 * stops them all and exits. Log lines (lib/log.h) go to stderr.
 */
#include "supervise.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "err.h"
#include "log.h"
#include "procstat.h"
#include "strutil.h"
#include "xalloc.h"

#define MAX_COMPONENTS 16
#define ADOPT_POLL_MS 1000

struct sv_config sv_config = {
	.backoff_ms = 500,
	.backoff_max_ms = 30000,
	.stable_ms = 10000,
};

static struct sv_component comps[MAX_COMPONENTS];
static size_t ncomps;

/* ---- command line ------------------------------------------------------- */

static const struct {
	const char *name;
	int sig;
} signals[] = {
	{ .name = "TERM", .sig = SIGTERM },
	{ .name = "INT", .sig = SIGINT },
	{ .name = "QUIT", .sig = SIGQUIT },
	{ .name = "HUP", .sig = SIGHUP },
	{ .name = "KILL", .sig = SIGKILL },
};

static struct sv_component *current(void)
{
	return ncomps ? &comps[ncomps - 1] : NULL;
}

static int opt_run_dir(char **v)
{
	sv_config.run_dir = v[0];
	return 0;
}

static int opt_component(char **v)
{
	if (ncomps == MAX_COMPONENTS)
		return ORC_EINVALID;
	comps[ncomps++] = (struct sv_component){
		.name = v[0], .stop_signal = SIGTERM, .grace_ms = 10000, .pidfd = -1,
	};
	return 0;
}

static int opt_start(char **v)
{
	if (!current())
		return ORC_EINVALID;
	current()->start = v[0];
	return 0;
}

static int opt_stop(char **v)
{
	size_t i;

	for (i = 0; current() && i < sizeof(signals) / sizeof(*signals); i++) {
		if (!strcmp(v[0], signals[i].name)) {
			current()->stop_signal = signals[i].sig;
			return 0;
		}
	}
	return ORC_EINVALID;
}

static int opt_grace(char **v)
{
	int64_t s;

	if (!current() || orc_parse_i64(&s, v[0], 1, 3600) < 0)
		return ORC_EINVALID;
	current()->grace_ms = s * 1000;
	return 0;
}

static int opt_group(char **v)
{
	(void)v;
	if (!current())
		return ORC_EINVALID;
	current()->group = 1;
	return 0;
}

static int opt_adopt(char **v)
{
	if (!current())
		return ORC_EINVALID;
	current()->adopt_file = v[0];
	current()->adopt_match = v[1];
	return 0;
}

static const struct {
	const char *name;
	int nargs;
	int (*fn)(char **v);
} options[] = {
	{ .name = "--run-dir", .nargs = 1, .fn = opt_run_dir },
	{ .name = "--component", .nargs = 1, .fn = opt_component },
	{ .name = "--start", .nargs = 1, .fn = opt_start },
	{ .name = "--stop", .nargs = 1, .fn = opt_stop },
	{ .name = "--grace", .nargs = 1, .fn = opt_grace },
	{ .name = "--group", .nargs = 0, .fn = opt_group },
	{ .name = "--adopt", .nargs = 2, .fn = opt_adopt },
};

static int parse_args(int argc, char **argv)
{
	int i = 1;
	size_t o, c;

	while (i < argc) {
		for (o = 0; o < sizeof(options) / sizeof(*options); o++)
			if (!strcmp(argv[i], options[o].name))
				break;
		if (o == sizeof(options) / sizeof(*options) || i + options[o].nargs >= argc) {
			orc_logf(ORC_LOG_ERROR, "bad or incomplete option \"%s\"", argv[i]);
			return ORC_EINVALID;
		}
		if (options[o].fn(argv + i + 1) < 0) {
			orc_logf(ORC_LOG_ERROR, "bad value for \"%s\"", argv[i]);
			return ORC_EINVALID;
		}
		i += 1 + options[o].nargs;
	}
	if (!sv_config.run_dir || !ncomps) {
		orc_logf(ORC_LOG_ERROR, "usage: orchard-supervise --run-dir DIR --component NAME "
			 "--start PATH [--stop SIG] [--grace S] [--group] [--adopt PIDFILE MATCH] ...");
		return ORC_EINVALID;
	}
	for (c = 0; c < ncomps; c++) {
		if (!comps[c].start || !strcmp(comps[c].name, "supervise") ||
		    !orc_is_dns_label(comps[c].name)) {
			orc_logf(ORC_LOG_ERROR, "component \"%s\" needs --start and a plain name",
				 comps[c].name);
			return ORC_EINVALID;
		}
	}
	return 0;
}

static int64_t env_ms(const char *name, int64_t def)
{
	const char *s = getenv(name);
	int64_t v;

	if (!s || !*s)
		return def;
	if (orc_parse_i64(&v, s, 10, 3600 * 1000) < 0) {
		orc_logf(ORC_LOG_WARN, "%s \"%s\" is not 10..3600000; using %lld", name, s,
			 (long long)def);
		return def;
	}
	return v;
}

/* ---- the loop ----------------------------------------------------------- */

/* Our own pid file: refuse to run beside another supervisor of the stack. */
static int claim_pidfile(void)
{
	struct orc_proc_stat st;
	uint64_t t;
	pid_t pid;

	if (sv_pidfile_read("supervise", &pid, &t) == 0 && pid != getpid() && t && orc_proc_is(pid, t)) {
		orc_log(ORC_LOG_ERROR, "another supervisor runs this stack", ORC_LOG_INT("pid", pid), NULL);
		return ORC_ECONFLICT;
	}
	if (orc_proc_stat(&st, getpid()) < 0)
		return ORC_ERROR;
	return sv_pidfile_write("supervise", getpid(), st.starttime);
}

static void start_due(int64_t now, int *timeout)
{
	struct sv_component *c;
	int64_t wait;
	size_t i;

	*timeout = -1;
	for (i = 0; i < ncomps; i++) {
		c = &comps[i];
		/* A held component that someone else starts again (pg_ctl
		 * start after pg_ctl stop) is watched again within a second. */
		if (c->held && c->adopt_file && !sv_component_adopt(c) &&
		    (*timeout < 0 || *timeout > ADOPT_POLL_MS))
			*timeout = ADOPT_POLL_MS;
		if (c->pid || c->held)
			continue;
		if (now >= c->next_start_ms && !sv_component_adopt(c))
			sv_component_start(c);
		if (c->pid || c->held)
			continue;
		wait = c->next_start_ms - now;
		if (wait < 0)
			wait = 0;
		if (*timeout < 0 || wait < *timeout)
			*timeout = (int)wait;
	}
}

/* SIGHUP: every stopped component now, its backoff forgotten. */
static void wake_all(void)
{
	size_t i;

	orc_log(ORC_LOG_INFO, "SIGHUP: starting whatever is stopped", NULL);
	for (i = 0; i < ncomps; i++) {
		if (comps[i].pid)
			continue;
		comps[i].held = 0;
		comps[i].failures = 0;
		comps[i].next_start_ms = 0;
	}
}

static int read_signal(int sfd)
{
	struct signalfd_siginfo si;
	ssize_t n;

	while ((n = read(sfd, &si, sizeof(si))) < 0 && errno == EINTR)
		;
	return n == (ssize_t)sizeof(si) ? (int)si.ssi_signo : 0;
}

static int run(int sfd)
{
	struct pollfd pfd[MAX_COMPONENTS + 1];
	struct sv_component *owner[MAX_COMPONENTS + 1];
	int timeout, sig;
	size_t i, n;

	for (;;) {
		start_due(orc_mono_ms(), &timeout);
		n = 0;
		pfd[n++] = (struct pollfd){ sfd, POLLIN, 0 };
		for (i = 0; i < ncomps; i++) {
			if (!comps[i].pid)
				continue;
			owner[n] = &comps[i];
			pfd[n++] = (struct pollfd){ comps[i].pidfd, POLLIN, 0 };
		}
		if (poll(pfd, n, timeout) < 0) {
			if (errno == EINTR)
				continue;
			orc_logf(ORC_LOG_ERROR, "poll() failed: %s", strerror(errno));
			return ORC_ERROR;
		}
		if (pfd[0].revents & POLLIN) {
			sig = read_signal(sfd);
			if (sig == SIGTERM || sig == SIGINT)
				return 0;
			if (sig == SIGHUP)
				wake_all();
		}
		for (i = 1; i < n; i++)
			if (pfd[i].revents & (POLLIN | POLLHUP | POLLERR))
				sv_component_exited(owner[i]);
	}
}

int main(int argc, char **argv)
{
	sigset_t sigs;
	int sfd = -1, status = 2;
	size_t i;

	orc_log_init("supervise");
	if (parse_args(argc, argv) < 0)
		return 2;
	sv_config.backoff_ms = env_ms("ORCHARD_SUPERVISE_BACKOFF_MS", sv_config.backoff_ms);
	sv_config.backoff_max_ms = env_ms("ORCHARD_SUPERVISE_BACKOFF_MAX_MS", sv_config.backoff_max_ms);
	if (sv_config.backoff_max_ms < sv_config.backoff_ms)
		sv_config.backoff_max_ms = sv_config.backoff_ms;
	sv_config.stable_ms = env_ms("ORCHARD_SUPERVISE_STABLE_MS", sv_config.stable_ms);

	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	sigprocmask(SIG_BLOCK, &sigs, NULL);
	if ((sfd = signalfd(-1, &sigs, SFD_CLOEXEC)) < 0) {
		orc_logf(ORC_LOG_ERROR, "signalfd() failed: %s", strerror(errno));
		goto done;
	}
	if (claim_pidfile() < 0) {
		status = 1;
		goto done;
	}
	orc_log(ORC_LOG_INFO, "supervising", "run_dir", sv_config.run_dir,
		ORC_LOG_INT("components", ncomps), ORC_LOG_INT("backoff_ms", sv_config.backoff_ms),
		ORC_LOG_INT("backoff_max_ms", sv_config.backoff_max_ms),
		ORC_LOG_INT("stable_ms", sv_config.stable_ms), NULL);
	status = run(sfd) < 0 ? 1 : 0;
	orc_log(ORC_LOG_INFO, "stopping every component", NULL);
	for (i = ncomps; i > 0; i--)
		sv_component_stop(&comps[i - 1]);
	sv_pidfile_remove("supervise");
	orc_log(ORC_LOG_INFO, "stopped", NULL);
done:
	if (sfd >= 0)
		close(sfd);
	return status;
}
