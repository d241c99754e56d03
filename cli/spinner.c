/*
 * A one-line spinner with the elapsed time, "| waiting for abc123 (12s)",
 * redrawn from the HTTP layer's once-a-second tick. Only on a terminal: in
 * a pipe or a log file stderr stays clean.
 */
#include <stdio.h>

#include "cli.h"
#include "strutil.h"

/* The spinner on screen, so a message can first clear its line. */
static struct cli_spinner *drawing;

void cli_spinner_start(struct cli_spinner *s, const char *what)
{
	s->what = what;
	s->started_ms = orc_mono_ms();
	s->frame = 0;
	s->active = cli_stderr_is_tty();
	if (s->active)
		drawing = s;
	cli_spinner_tick(s);
}

void cli_spinner_clear_line(void)
{
	if (drawing)
		fputs("\r\033[K", stderr);
}

void cli_spinner_tick(void *arg)
{
	static const char frames[] = "|/-\\";
	struct cli_spinner *s = arg;
	int64_t secs;

	if (!s->active)
		return;
	secs = (orc_mono_ms() - s->started_ms) / 1000;
	/* \r and erase-to-end-of-line: redraw in place. */
	fprintf(stderr, "\r\033[K%c %s (%llds)", frames[s->frame++ % 4], s->what, (long long)secs);
	fflush(stderr);
}

void cli_spinner_stop(struct cli_spinner *s)
{
	if (!s->active)
		return;
	fputs("\r\033[K", stderr);
	fflush(stderr);
	s->active = 0;
	if (drawing == s)
		drawing = NULL;
}
