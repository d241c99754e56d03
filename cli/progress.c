/*
 * The progress line of a long transfer, on stderr and only on a terminal
 * (never in a pipe or a log): drawn once the transfer has run a second, so
 * small copies print nothing, and redrawn at most four times a second.
 */
#include <stdio.h>
#include <string.h>

#include "strutil.h"
#include "transfer.h"

#define PROGRESS_DELAY_MS 1000
#define PROGRESS_EVERY_MS 250
#define BAR_WIDTH 24

void cli_format_bytes(char *out, size_t outlen, double b)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	size_t u = 0;

	while (b >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
		b /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(out, outlen, "%.0f B", b);
	else
		snprintf(out, outlen, "%.1f %s", b, units[u]);
}

void cli_progress_init(struct cli_progress *p, const char *label, int enabled)
{
	memset(p, 0, sizeof(*p));
	p->label = label;
	p->enabled = enabled && cli_stderr_is_tty();
	p->started_ms = orc_mono_ms();
}

static void draw(struct cli_progress *p, int64_t done, int64_t total, int64_t now)
{
	char bar[BAR_WIDTH + 1], sdone[32], stotal[32], srate[32], eta[32] = "";
	double secs = (double)(now - p->started_ms) / 1000, rate = secs > 0 ? (double)done / secs : 0;
	int i, fill;

	cli_format_bytes(sdone, sizeof(sdone), (double)done);
	cli_format_bytes(srate, sizeof(srate), rate);
	if (total <= 0) {
		fprintf(stderr, "\r\033[K%s  %s  %s/s", p->label, sdone, srate);
		p->shown = 1;
		return;
	}
	if (done > total)
		done = total;
	fill = (int)((double)done * BAR_WIDTH / (double)total);
	for (i = 0; i < BAR_WIDTH; i++)
		bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
	bar[BAR_WIDTH] = '\0';
	cli_format_bytes(stotal, sizeof(stotal), (double)total);
	if (rate > 0 && done < total)
		cli_format_duration(eta, sizeof(eta), (int64_t)((double)(total - done) / rate + 0.5));
	fprintf(stderr, "\r\033[K%s %3d%% [%s] %s / %s  %s/s%s%s", p->label, (int)(done * 100 / total), bar,
		sdone, stotal, srate, eta[0] ? "  ETA " : "", eta);
	p->shown = 1;
}

void cli_progress_update(struct cli_progress *p, int64_t done, int64_t total)
{
	int64_t now;

	if (!p || !p->enabled)
		return;
	now = orc_mono_ms();
	if (now - p->started_ms < PROGRESS_DELAY_MS || now - p->last_ms < PROGRESS_EVERY_MS)
		return;
	p->last_ms = now;
	draw(p, done, total, now);
}

void cli_progress_end(struct cli_progress *p, int64_t done, int64_t total)
{
	if (!p || !p->enabled || !p->shown)
		return;
	draw(p, done, total, orc_mono_ms());
	fputc('\n', stderr);
	p->shown = 0;
}
