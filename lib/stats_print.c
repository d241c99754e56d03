/*
 * The dashboard summaries as text tables (stats_print.h), for orchardctl
 * stats and orchard-admin stats alike.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "stats_print.h"
#include "strutil.h"
#include "xalloc.h"

#define CELL_MAX 60                    /* longer text is cut in tables (not in JSON) */

/* The sections of the document, in the order they are printed. */
static const struct {
	const char *key;
	const char *title;
} sections[] = {
	{ "active_sandboxes", "Active sandboxes" },
	{ "exec_latency_hourly", "Exec latency per hour (seconds)" },
	{ "slowest_commands", "Slowest commands" },
	{ "failure_reasons", "Failure reasons" },
	{ "tenant_usage", "Usage per tenant and day" },
};

/* A value as one table cell: no control characters, at most CELL_MAX characters. */
static void cell_text(struct orc_buf *out, json_object *v)
{
	const unsigned char *s;
	size_t i, chars = 0;

	orc_buf_reset(out);
	if (!v) {
		orc_buf_adds(out, "-");
		return;
	}
	s = (const unsigned char *)json_object_get_string(v);
	for (i = 0; s[i]; i++) {
		if ((s[i] & 0xc0) != 0x80 && ++chars > CELL_MAX) {
			orc_buf_adds(out, "...");
			return;
		}
		orc_buf_addc(out, s[i] < 0x20 || s[i] == 0x7f ? '?' : (char)s[i]);
	}
}

static void header_text(struct orc_buf *out, const char *key)
{
	orc_buf_reset(out);
	for (; *key; key++)
		orc_buf_addc(out, *key >= 'a' && *key <= 'z' ? (char)(*key - 'a' + 'A') : *key);
}

/* An array of flat objects as aligned columns named after the first one's keys. */
static void print_rows(FILE *f, json_object *rows, int headers)
{
	struct orc_buf cell = ORC_BUF_INIT;
	size_t nrows = json_object_array_length(rows), ncols = 0, r, c, w, *width;
	json_object *first = json_object_array_get_idx(rows, 0), *row, *v;
	char **cells;
	const char **keys;

	json_object_object_foreach(first, k0, v0) {
		(void)k0;
		(void)v0;
		ncols++;
	}
	if (!ncols)
		return;
	keys = xcalloc(ncols, sizeof(*keys));
	width = xcalloc(ncols, sizeof(*width));
	cells = xcalloc(orc_mul_size(nrows + 1, ncols), sizeof(*cells));
	c = 0;
	json_object_object_foreach(first, k, v1) {
		(void)v1;
		keys[c] = k;
		header_text(&cell, k);
		cells[c++] = xstrdup(orc_buf_cstr(&cell));
	}
	for (r = 0; r < nrows; r++) {
		row = json_object_array_get_idx(rows, r);
		for (c = 0; c < ncols; c++) {
			v = NULL;
			if (row && json_object_is_type(row, json_type_object))
				json_object_object_get_ex(row, keys[c], &v);
			cell_text(&cell, v);
			cells[(r + 1) * ncols + c] = xstrdup(orc_buf_cstr(&cell));
		}
	}
	for (r = headers ? 0 : 1; r <= nrows; r++)
		for (c = 0; c < ncols; c++)
			if ((w = orc_utf8_width(cells[r * ncols + c])) > width[c])
				width[c] = w;
	for (r = headers ? 0 : 1; r <= nrows; r++) {
		for (c = 0; c < ncols; c++) {
			fputs(cells[r * ncols + c], f);
			if (c + 1 == ncols)
				fputc('\n', f);
			else
				for (w = orc_utf8_width(cells[r * ncols + c]); w < width[c] + 3; w++)
					fputc(' ', f);
		}
	}
	for (r = 0; r < (nrows + 1) * ncols; r++)
		free(cells[r]);
	free(cells);
	free(width);
	free(keys);
	orc_buf_release(&cell);
}

void orc_stats_print(FILE *f, json_object *doc, int headers)
{
	json_object *tenant = NULL, *at = NULL, *rows;
	struct orc_buf name = ORC_BUF_INIT, when = ORC_BUF_INIT;
	size_t i;

	json_object_object_get_ex(doc, "tenant", &tenant);
	json_object_object_get_ex(doc, "generated_at", &at);
	cell_text(&name, tenant);
	cell_text(&when, at);
	fprintf(f, "Orchard stats for %s%s at %s\n", tenant ? "tenant " : "all tenants",
		tenant ? orc_buf_cstr(&name) : "", at ? orc_buf_cstr(&when) : "?");
	for (i = 0; i < sizeof(sections) / sizeof(*sections); i++) {
		fprintf(f, "\n%s\n", sections[i].title);
		if (!json_object_object_get_ex(doc, sections[i].key, &rows) ||
		    !json_object_is_type(rows, json_type_array) || !json_object_array_length(rows) ||
		    !json_object_is_type(json_object_array_get_idx(rows, 0), json_type_object)) {
			fprintf(f, "(none)\n");
			continue;
		}
		print_rows(f, rows, headers);
	}
	orc_buf_release(&name);
	orc_buf_release(&when);
}

