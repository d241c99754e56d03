/*
 * orchard-admin stats: the dashboard summaries (sql/migrations/
 * 004_dashboards.sql), read straight from the database through
 * dash_stats(), the same document GET /v1/stats answers with.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <json-c/json.h>

#include "admin.h"
#include "buf.h"
#include "err.h"
#include "xalloc.h"

#define CELL_MAX 60                    /* longer text is cut in tables (not in JSON) */

const char stats_usage[] =
	"usage: orchard-admin stats [--tenant NAME] [-o table|json]\n"
	"\n"
	"Print the dashboard summaries (docs/observability.md): active sandboxes by\n"
	"tenant, image and state; exec latency percentiles per hour and the slowest\n"
	"commands of the last 24 hours; failure reasons (last 24 hours and all);\n"
	"per-tenant usage (sandbox-hours, execs) per day for the last 7 days.\n"
	"\n"
	"  --tenant NAME   only this tenant (default: all tenants)\n"
	"  -o FORMAT       table (default) or json (the document GET /v1/stats returns)\n"
	"\n"
	"Example:\n"
	"  orchard-admin stats --tenant research -o json | jq .failure_reasons\n";

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

/* A value as one table cell: no control characters, at most CELL_MAX. */
static void cell_text(struct orc_buf *out, json_object *v)
{
	const unsigned char *s;
	size_t i, n;

	orc_buf_reset(out);
	if (!v) {
		orc_buf_adds(out, "-");
		return;
	}
	s = (const unsigned char *)json_object_get_string(v);
	n = strlen((const char *)s);
	for (i = 0; i < n && i < CELL_MAX; i++)
		orc_buf_addc(out, s[i] < 0x20 || s[i] == 0x7f ? '?' : (char)s[i]);
	if (n > CELL_MAX)
		orc_buf_adds(out, "...");
}

static void header_text(struct orc_buf *out, const char *key)
{
	orc_buf_reset(out);
	for (; *key; key++)
		orc_buf_addc(out, *key >= 'a' && *key <= 'z' ? (char)(*key - 'a' + 'A') : *key);
}

/* An array of flat objects as aligned columns named after the first one's keys. */
static void print_rows(json_object *rows)
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
	for (r = 0; r <= nrows; r++)
		for (c = 0; c < ncols; c++)
			if ((w = strlen(cells[r * ncols + c])) > width[c])
				width[c] = w;
	for (r = 0; r <= nrows; r++) {
		for (c = 0; c < ncols; c++) {
			if (c + 1 < ncols)
				printf("%-*s   ", (int)width[c], cells[r * ncols + c]);
			else
				printf("%s\n", cells[r * ncols + c]);
		}
	}
	for (r = 0; r < (nrows + 1) * ncols; r++)
		free(cells[r]);
	free(cells);
	free(width);
	free(keys);
	orc_buf_release(&cell);
}

static void print_tables(json_object *doc)
{
	json_object *tenant = NULL, *at = NULL, *rows;
	size_t i;

	json_object_object_get_ex(doc, "tenant", &tenant);
	json_object_object_get_ex(doc, "generated_at", &at);
	printf("Orchard stats for %s%s at %s\n", tenant ? "tenant " : "all tenants",
	       tenant ? json_object_get_string(tenant) : "", at ? json_object_get_string(at) : "?");
	for (i = 0; i < sizeof(sections) / sizeof(*sections); i++) {
		printf("\n%s\n", sections[i].title);
		if (!json_object_object_get_ex(doc, sections[i].key, &rows) ||
		    !json_object_is_type(rows, json_type_array) || !json_object_array_length(rows)) {
			printf("(none)\n");
			continue;
		}
		print_rows(rows);
	}
}

/* The tenant's id as text into out (bigint digits). */
static int tenant_id(char *out, size_t outlen, struct admin_ctx *ctx, const char *name)
{
	const char *params[1] = { name };
	PGresult *res = NULL;
	int err;

	if ((err = admin_query(&res, ctx, "SELECT id FROM tenants WHERE name = $1", 1, params)) < 0) {
		admin_error("looking up tenant \"%s\" failed: %s", name, ctx->errmsg);
		return err;
	}
	if (PQntuples(res) != 1) {
		admin_error("no tenant \"%s\" (orchard-admin tenant list shows them)", name);
		PQclear(res);
		return ORC_ENOTFOUND;
	}
	snprintf(out, outlen, "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	return 0;
}

int cmd_stats(struct admin_ctx *ctx, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "tenant", required_argument, NULL, 't' },
		{ "output", required_argument, NULL, 'o' },
		{ NULL, 0, NULL, 0 },
	};
	const char *tenant = NULL, *params[1] = { NULL };
	char id[32];
	PGresult *res = NULL;
	json_object *doc = NULL;
	int opt, json = 0, rc = ADMIN_FAIL;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "o:", opts, NULL)) != -1) {
		switch (opt) {
		case 't':
			tenant = optarg;
			break;
		case 'o':
			if (strcmp(optarg, "json") && strcmp(optarg, "table"))
				return admin_usage_error(stats_usage, "stats: -o wants table or json, not \"%s\"",
							 optarg);
			json = !strcmp(optarg, "json");
			break;
		default:
			return admin_bad_option(stats_usage);
		}
	}
	if (optind < argc)
		return admin_usage_error(stats_usage, "stats: unexpected argument \"%s\"", argv[optind]);
	if (admin_connect(ctx) < 0)
		return ADMIN_FAIL;
	if (tenant) {
		if (tenant_id(id, sizeof(id), ctx, tenant) < 0)
			return ADMIN_FAIL;
		params[0] = id;
	}
	if (admin_query(&res, ctx, "SELECT dash_stats($1::bigint)", 1, params) < 0) {
		admin_error("reading the dashboard views failed: %s (is the database migrated? "
			    "orchard-admin migrate)", ctx->errmsg);
		goto done;
	}
	if (!(doc = json_tokener_parse(PQgetvalue(res, 0, 0))) || !json_object_is_type(doc, json_type_object)) {
		admin_error("dash_stats() returned no JSON object");
		goto done;
	}
	if (json)
		puts(json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
							 JSON_C_TO_STRING_NOSLASHESCAPE));
	else
		print_tables(doc);
	rc = ADMIN_OK;
done:
	if (doc)
		json_object_put(doc);
	PQclear(res);
	return rc;
}
