/*
 * A network namespace with egress only (watchdog.h has the why).
 *
 *   1. fork the slirp4netns child; it waits on the "go" pipe, in the
 *      host's network namespace;
 *   2. unshare the network namespace (with a user namespace when we are
 *      not root) and say "go": the child execs slirp4netns aimed at us;
 *   3. wait for slirp4netns to write "1" on the ready pipe: tap0 is up
 *      with 10.0.2.100/24, the default route and lo.
 */
#include "watchdog.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* slirp4netns starts in a few ms; a loaded host can take much longer. */
#define READY_TIMEOUT_MS 30000
/* Where the child's ends of the pipes land: slirp4netns reads exit on
 * EXIT_FD (it ends when the watchdog's end closes) and writes ready to
 * READY_FD. Nothing else of ours stays open in it. */
#define EXIT_FD  3
#define READY_FD 4
#define HIGH_FD  16

static char opt_configure[] = "--configure";
static char opt_mtu[] = "--mtu=65520";
/* Never the host's loopback (issue 19 item 6). */
static char opt_no_loopback[] = "--disable-host-loopback";
static char opt_sandbox[] = "--enable-sandbox";
static char opt_seccomp[] = "--enable-seccomp";
static char tap_name[] = "tap0";

/* A pipe whose ends sit above HIGH_FD, close-on-exec. */
static void high_pipe(int fds[2])
{
	int p[2];

	if (pipe2(p, O_CLOEXEC) < 0)
		watchdog_die("network: pipe2() failed", errno);
	for (int i = 0; i < 2; i++) {
		fds[i] = fcntl(p[i], F_DUPFD_CLOEXEC, HIGH_FD);
		if (fds[i] < 0)
			watchdog_die("network: fcntl() failed", errno);
		close(p[i]);
	}
}

static void write_file(const char *path, const char *data)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	size_t len = strlen(data);
	ssize_t n;

	if (fd < 0)
		watchdog_die("network: open() of a user namespace map failed", errno);
	do
		n = write(fd, data, len);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)len)
		watchdog_die("network: writing a user namespace map failed", errno);
	close(fd);
}

/* Unprivileged: the network namespace needs a user namespace of its own,
 * in which we stay who we are (bubblewrap nests its own inside). */
static int unshare_unprivileged(void)
{
	char map[64];
	uid_t uid = geteuid();
	gid_t gid = getegid();

	if (unshare(CLONE_NEWUSER | CLONE_NEWNET) < 0)
		return -1;
	write_file("/proc/self/setgroups", "deny");
	snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)uid, (unsigned)uid);
	write_file("/proc/self/uid_map", map);
	snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)gid, (unsigned)gid);
	write_file("/proc/self/gid_map", map);
	return 0;
}

/* Between fork and exec: async-signal-safe calls only. */
static void child(char *const argv[], int go, int exit_fd, int ready_fd, int devnull)
{
	char c;
	ssize_t n;

	do
		n = read(go, &c, 1);
	while (n < 0 && errno == EINTR);
	if (n != 1)
		_exit(127);     /* the watchdog gave up before "go" */
	/* Its progress chatter would bury the sandbox log's last line. */
	if (dup2(devnull, 1) < 0 || dup2(exit_fd, EXIT_FD) < 0 || dup2(ready_fd, READY_FD) < 0)
		_exit(127);
	close_range(READY_FD + 1, ~0U, 0);
	execv(argv[0], argv);
	_exit(127);
}

static void wait_ready(int ready, pid_t pid)
{
	struct pollfd pfd = { .fd = ready, .events = POLLIN };
	char c = 0;
	ssize_t n = -1;
	int rc;

	do
		rc = poll(&pfd, 1, READY_TIMEOUT_MS);
	while (rc < 0 && errno == EINTR);
	if (rc == 1)
		do
			n = read(ready, &c, 1);
		while (n < 0 && errno == EINTR);
	if (n == 1 && c == '1')
		return;
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	watchdog_die(rc == 0 ? "network: slirp4netns did not bring the network up in time"
			     : "network: slirp4netns failed (its error is above)", 0);
}

void watchdog_netns_enter(char *slirp4netns)
{
	char target[24], userns[48], exit_arg[16], ready_arg[16];
	char *argv[16];
	int go[2], exitp[2], ready[2], devnull, n = 0, privileged = geteuid() == 0;
	pid_t pid;

	snprintf(target, sizeof(target), "%ld", (long)getpid());
	snprintf(userns, sizeof(userns), "--userns-path=/proc/%ld/ns/user", (long)getpid());
	snprintf(exit_arg, sizeof(exit_arg), "--exit-fd=%d", EXIT_FD);
	snprintf(ready_arg, sizeof(ready_arg), "--ready-fd=%d", READY_FD);
	argv[n++] = slirp4netns;
	argv[n++] = opt_configure;
	argv[n++] = opt_mtu;
	argv[n++] = opt_no_loopback;
	argv[n++] = opt_sandbox;
	argv[n++] = opt_seccomp;
	argv[n++] = exit_arg;
	argv[n++] = ready_arg;
	if (!privileged)
		argv[n++] = userns;
	argv[n++] = target;
	argv[n++] = tap_name;
	argv[n] = NULL;

	high_pipe(go);
	high_pipe(exitp);
	high_pipe(ready);
	if ((devnull = open("/dev/null", O_WRONLY | O_CLOEXEC)) < 0)
		watchdog_die("network: open() \"/dev/null\" failed", errno);
	if ((pid = fork()) < 0)
		watchdog_die("network: fork() failed", errno);
	if (pid == 0)
		child(argv, go[0], exitp[0], ready[1], devnull);
	close(go[0]);
	close(exitp[0]);
	close(ready[1]);
	close(devnull);
	/* exitp[1] stays open (close-on-exec) for as long as we live. */
	if (privileged ? unshare(CLONE_NEWNET) : unshare_unprivileged()) {
		int err = errno;
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		watchdog_die("network: unshare() of a network namespace failed", err);
	}
	if (write(go[1], "1", 1) != 1)
		watchdog_die("network: starting slirp4netns failed", errno);
	close(go[1]);
	wait_ready(ready[0], pid);
	close(ready[0]);
}
