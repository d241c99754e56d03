#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <pthread.h>
#include <unistd.h>

#include "buf.h"
#include "dl.h"
#include "err.h"
#include "exec.h"
#include "log.h"
#include "pty.h"
#include "reaper.h"
#include "server.h"
#include "version.h"

/* orchard-agent: the daemon inside each sandbox (docs/agent-protocol.md). */

#define TOKEN_MAX 4096

static const char usage[] =
	"usage: orchard-agent --listen unix:PATH|tcp:HOST:PORT --token-file FILE\n"
	"       orchard-agent --version | --help | --lazy-libs\n"
	"\n"
	"Serves the Orchard agent protocol (docs/agent-protocol.md). Every request\n"
	"needs \"Authorization: Bearer TOKEN\", TOKEN being the file's contents\n"
	"without the trailing newline. Logs are JSON lines on stderr\n"
	"(ORCHARD_LOG_LEVEL=debug|info|warn|error). --lazy-libs loads the libraries\n"
	"the agent opens on first use (libgit2, libarchive) and prints their paths.\n";

struct options {
	const char *listen;
	const char *token_file;
};

static int parse_args(struct options *o, int argc, char **argv)
{
	int i;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(usage, stdout);
			exit(0);
		} else if (!strcmp(a, "--version")) {
			printf("orchard-agent %s\n", ORC_VERSION);
			exit(0);
		} else if (!strcmp(a, "--lazy-libs")) {
			exit(agent_dl_print_paths() < 0 ? 1 : 0);
		} else if (!strcmp(a, "--listen") && i + 1 < argc) {
			o->listen = argv[++i];
		} else if (!strncmp(a, "--listen=", 9)) {
			o->listen = a + 9;
		} else if (!strcmp(a, "--token-file") && i + 1 < argc) {
			o->token_file = argv[++i];
		} else if (!strncmp(a, "--token-file=", 13)) {
			o->token_file = a + 13;
		} else {
			fprintf(stderr, "orchard-agent: unknown or incomplete option \"%s\"\n%s", a, usage);
			return ORC_EINVALID;
		}
	}
	if (!o->listen || !o->token_file) {
		fprintf(stderr, "orchard-agent: --listen and --token-file are required\n%s", usage);
		return ORC_EINVALID;
	}
	return 0;
}

/* The token: the file's bytes minus trailing CR/LF; empty is refused. */
static int read_token(struct orc_buf *out, const char *path)
{
	char chunk[1024];
	ssize_t n;
	int fd, err = 0;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		orc_logf(ORC_LOG_ERROR, "open() \"%s\" failed: %s", path, strerror(errno));
		return ORC_ERROR;
	}
	orc_buf_init(out, TOKEN_MAX);
	for (;;) {
		n = read(fd, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			orc_logf(ORC_LOG_ERROR, "read() \"%s\" failed: %s", path, strerror(errno));
			err = ORC_ERROR;
			break;
		}
		if (n == 0)
			break;
		if (orc_buf_add(out, chunk, (size_t)n) < 0) {
			orc_logf(ORC_LOG_ERROR, "token file \"%s\" is larger than %d bytes", path, TOKEN_MAX);
			err = ORC_ETOOBIG;
			break;
		}
	}
	close(fd);
	while (!err && out->len && (out->ptr[out->len - 1] == '\n' || out->ptr[out->len - 1] == '\r'))
		out->ptr[--out->len] = '\0';
	if (!err && (out->len == 0 || strlen(out->ptr) != out->len)) {
		orc_logf(ORC_LOG_ERROR, "token file \"%s\" is empty or holds a NUL byte", path);
		err = ORC_EINVALID;
	}
	if (err)
		orc_buf_release(out);
	return err;
}

/* Commands inherit fds 0-2; make sure they exist so no pipe lands there. */
static void ensure_std_fds(void)
{
	int fd;

	while ((fd = open("/dev/null", O_RDWR)) >= 0 && fd <= 2)
		;
	if (fd > 2)
		close(fd);
}

static void on_signal(int sig)
{
	(void)sig; /* never runs: the signals are blocked and taken by sigtimedwait */
}

/*
 * SIGCHLD, SIGTERM, SIGINT and SIGHUP are blocked in every thread (the
 * mask is inherited by the threads started later) and taken with
 * sigtimedwait: SIGCHLD by the reaper thread, the others by main. Handlers
 * are installed as well, because as PID 1 of a namespace the kernel drops
 * signals that have the default disposition.
 */
static void setup_signals(sigset_t *stop_set)
{
	struct sigaction sa;
	static const int sigs[] = { SIGCHLD, SIGTERM, SIGINT, SIGHUP };
	sigset_t all;
	size_t i;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
	sa.sa_handler = on_signal;
	sigemptyset(&all);
	for (i = 0; i < sizeof(sigs) / sizeof(*sigs); i++) {
		sigaction(sigs[i], &sa, NULL);
		sigaddset(&all, sigs[i]);
	}
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	*stop_set = all;
	sigdelset(stop_set, SIGCHLD);
}

int main(int argc, char **argv)
{
	struct options opt = { NULL, NULL };
	struct orc_buf token = ORC_BUF_INIT;
	struct agent_server *server = NULL;
	sigset_t set;
	int sig, status = 1;

	orc_log_init("agent");
	if (parse_args(&opt, argc, argv) < 0)
		return 2;
	ensure_std_fds();
	/* The commands we run share our uid: none may ptrace us or read our
	 * memory (the token, the results we report). Reset by their execve. */
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	setup_signals(&set);
	if (read_token(&token, opt.token_file) < 0 || agent_reaper_start() < 0)
		goto done;
	if (agent_server_start(&server, opt.listen, token.ptr) < 0)
		goto done;
	orc_log(ORC_LOG_INFO, "listening", "listen", opt.listen, "version", ORC_VERSION,
		ORC_LOG_INT("pid", getpid()), NULL);

	do
		sig = sigwaitinfo(&set, NULL);
	while (sig < 0);
	orc_log(ORC_LOG_INFO, "shutting down", ORC_LOG_INT("signal", sig), NULL);
	/* The server stops only when its requests have ended: kill the
	 * running command rather than wait for it. */
	agent_exec_stop_all();
	/* Upgraded sockets must be given back before the server can stop. */
	agent_pty_stop_all();
	status = 0;
done:
	agent_server_free(server);
	orc_buf_release(&token);
	return status;
}
