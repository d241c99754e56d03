/*
 * Raw mode with a guaranteed way back (term.h). The saved attributes are
 * restored by cli_term_restore(), by an atexit() hook, and by handlers of
 * the signals that would end the process, which restore then re-raise the
 * signal with its default action, so the exit status still says how it
 * ended.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "term.h"

static struct termios saved;
static volatile sig_atomic_t raw_active;
static int winch_pipe[2] = { -1, -1 };
static const int fatal_signals[] = { SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGPIPE, SIGALRM };

void cli_term_restore(void)
{
	if (!raw_active)
		return;
	raw_active = 0;
	(void)tcsetattr(STDIN_FILENO, TCSADRAIN, &saved);
}

static void on_fatal(int sig)
{
	int e = errno;

	cli_term_restore();
	signal(sig, SIG_DFL);
	raise(sig);
	errno = e;
}

int cli_term_raw(void)
{
	static int hooked;
	struct termios raw;
	struct sigaction sa;
	size_t i;

	if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved) < 0)
		return -1;
	if (!hooked) {
		hooked = 1;
		atexit(cli_term_restore);
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_fatal;
		sigemptyset(&sa.sa_mask);
		for (i = 0; i < sizeof(fatal_signals) / sizeof(fatal_signals[0]); i++)
			sigaction(fatal_signals[i], &sa, NULL);
	}
	raw = saved;
	cfmakeraw(&raw);
	raw.c_cc[VMIN] = 1;
	raw.c_cc[VTIME] = 0;
	raw_active = 1;
	if (tcsetattr(STDIN_FILENO, TCSADRAIN, &raw) < 0) {
		raw_active = 0;
		return -1;
	}
	return 0;
}

static void on_winch(int sig)
{
	int e = errno;
	char c = 0;

	(void)sig;
	if (winch_pipe[1] >= 0)
		(void)!write(winch_pipe[1], &c, 1);
	errno = e;
}

int cli_term_winch_fd(void)
{
	struct sigaction sa;

	if (winch_pipe[0] >= 0)
		return winch_pipe[0];
	if (pipe2(winch_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return -1;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_winch;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGWINCH, &sa, NULL);
	return winch_pipe[0];
}

void cli_term_winch_drain(void)
{
	char buf[64];

	while (winch_pipe[0] >= 0 && read(winch_pipe[0], buf, sizeof(buf)) > 0)
		;
}

int cli_term_size(int *rows, int *cols)
{
	struct winsize ws;

	*rows = 24;
	*cols = 80;
	if (ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) < 0 || !ws.ws_row || !ws.ws_col)
		return -1;
	*rows = ws.ws_row;
	*cols = ws.ws_col;
	return 0;
}
