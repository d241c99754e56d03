/*
 * orchardctl stats [--tenant NAME] [-o table|json]: GET /v1/stats, the
 * dashboard summaries (docs/observability.md) as tables or as the
 * server's JSON. Every section is an array of flat objects; the tables
 * take their columns from the first object's keys, so fields the server
 * adds show up without a new client.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "stats.h"
#include "strutil.h"
#include "xalloc.h"

#define CELL_MAX 60                    /* longer text is cut in tables (not in JSON) */
#define COLS_MAX 32

const char stats_usage[] =
	"usage: orchardctl stats [--tenant NAME] [-o table|json]\n"
	"\n"
	"Print the dashboard summaries (GET /v1/stats): active sandboxes by tenant,\n"
	"image and state; exec latency percentiles per hour and the slowest\n"
	"commands of the last 24 hours; failure reasons (last 24 hours and all);\n"
	"usage (sandbox-hours, execs) per tenant and day for the last 7 days.\n"
	"A key sees its own tenant's figures; an admin key sees every tenant's,\n"
	"or one with --tenant.\n"
	"\n"
	"  --tenant NAME   only this tenant (admin keys)\n"
	"  -o FORMAT       table (default) or json (the server's document)\n";

enum { OPT_TENANT = CLI_OPT_FIRST_FREE };

const struct option stats_opts[] = {
	CLI_COMMON_OPTIONS,
	{ "tenant", required_argument, NULL, OPT_TENANT },
	{ "output", required_argument, NULL, 'o' },
	{ NULL, 0, NULL, 0 },
};

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

static void cell_text(struct orc_buf *out, json_object *v)
{
	const char *s = v ? json_object_get_string(v) : "-";
	size_t n = strlen(s);

	orc_buf_reset(out);
	orc_buf_add(out, s, n > CELL_MAX ? CELL_MAX : n);
	if (n > CELL_MAX)
		orc_buf_adds(out, "...");
}

/* An array of flat objects as a table named after the first one's keys. */
static void print_rows(json_object *rows)
{
	struct orc_buf hdr[COLS_MAX], cell[COLS_MAX];
	const char *keys[COLS_MAX], *row_cells[COLS_MAX];
	json_object *first = json_object_array_get_idx(rows, 0), *row, *v;
	size_t ncols = 0, i, c;
	struct cli_table t;
	const char *k;

	if (!first || !json_object_is_type(first, json_type_object))
		return;
	json_object_object_foreach(first, key, val) {
		(void)val;
		if (ncols == COLS_MAX)
			break;
		keys[ncols] = key;
		orc_buf_init(&hdr[ncols], 0);
		orc_buf_init(&cell[ncols], 0);
		for (k = key; *k; k++)
			orc_buf_addc(&hdr[ncols], *k >= 'a' && *k <= 'z' ? (char)(*k - 'a' + 'A') : *k);
		row_cells[ncols] = orc_buf_cstr(&hdr[ncols]);
		ncols++;
	}
	if (!ncols)
		return;
	cli_table_init(&t, ncols, row_cells);
	for (i = 0; i < json_object_array_length(rows); i++) {
		row = json_object_array_get_idx(rows, i);
		for (c = 0; c < ncols; c++) {
			v = NULL;
			if (row && json_object_is_type(row, json_type_object))
				json_object_object_get_ex(row, keys[c], &v);
			cell_text(&cell[c], v);
			row_cells[c] = orc_buf_cstr(&cell[c]);
		}
		cli_table_add(&t, row_cells);
	}
	cli_table_print(&t);
	cli_table_release(&t);
	for (c = 0; c < ncols; c++) {
		orc_buf_release(&hdr[c]);
		orc_buf_release(&cell[c]);
	}
}

static void print_tables(json_object *doc)
{
	json_object *tenant = NULL, *at = NULL, *rows;
	struct orc_buf name = ORC_BUF_INIT;
	size_t i;

	json_object_object_get_ex(doc, "tenant", &tenant);
	json_object_object_get_ex(doc, "generated_at", &at);
	if (tenant)
		cell_text(&name, tenant);
	printf("Orchard stats for %s%s at %s\n", tenant ? "tenant " : "all tenants", orc_buf_cstr(&name),
	       at ? json_object_get_string(at) : "?");
	for (i = 0; i < sizeof(sections) / sizeof(*sections); i++) {
		printf("\n%s\n", sections[i].title);
		if (!json_object_object_get_ex(doc, sections[i].key, &rows) ||
		    !json_object_is_type(rows, json_type_array) || !json_object_array_length(rows)) {
			printf("(none)\n");
			continue;
		}
		print_rows(rows);
	}
	orc_buf_release(&name);
}

int cmd_stats(struct cli_config *cfg, int argc, char **argv)
{
	struct cli_request req = { "GET", NULL, NULL, NULL, 60, NULL, NULL };
	struct cli_response r = CLI_RESPONSE_INIT;
	struct orc_buf path = ORC_BUF_INIT;
	enum cli_output output = CLI_OUT_TABLE;
	int opt, rc = CLI_USAGE;

	orc_buf_adds(&path, "/v1/stats");
	optind = 0;
	while ((opt = getopt_long(argc, argv, "o:", stats_opts, NULL)) != -1) {
		switch (opt) {
		case 'o':
			if (cli_parse_output(&output, optarg) < 0 || output == CLI_OUT_WIDE) {
				rc = cli_usage_error(stats_usage, "stats: -o wants table or json, not \"%s\"", optarg);
				goto done;
			}
			break;
		case OPT_TENANT:
			if (!orc_is_dns_label(optarg)) {
				rc = cli_usage_error(stats_usage, "stats: --tenant wants a tenant name, not \"%s\"",
						     optarg);
				goto done;
			}
			cli_path_add_query(&path, "tenant", optarg);
			break;
		default:
			if (cli_common_option(cfg, opt, optarg) < 0) {
				rc = cli_bad_option(stats_usage);
				goto done;
			}
		}
	}
	if (optind < argc) {
		rc = cli_usage_error(stats_usage, "stats: unexpected argument \"%s\"", argv[optind]);
		goto done;
	}
	if ((rc = cli_config_check(cfg)) != 0)
		goto done;
	rc = CLI_FAIL;
	req.path = orc_buf_cstr(&path);
	if (cli_http(&r, cfg, &req) < 0)
		goto done;
	if (cli_route_missing(&r)) {
		cli_error("stats is not supported by this server (%s): it needs a newer orchard-api "
			  "(GET /v1/stats); orchard-admin stats reads the same figures from the database",
			  cfg->url);
		goto done;
	}
	if (r.status < 200 || r.status > 299) {
		cli_report_response(&r);
		goto done;
	}
	if (!r.json || !json_object_is_type(r.json, json_type_object)) {
		cli_error("unexpected response to GET %s: not a JSON object", req.path);
		goto done;
	}
	if (output == CLI_OUT_JSON)
		cli_print_json(r.json);
	else
		print_tables(r.json);
	rc = CLI_OK;
done:
	cli_response_release(&r);
	orc_buf_release(&path);
	return rc;
}
