/*
 * orchardctl stats [--tenant NAME] [-o FORMAT]: GET /v1/stats, the
 * dashboard summaries (docs/observability.md) as tables (lib/stats_print.c,
 * shared with orchard-admin stats) or as the server's document.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "stats.h"
#include "stats_print.h"
#include "strutil.h"
#include "xalloc.h"

const char stats_usage[] =
	"usage: orchardctl stats [--tenant NAME] [-o FORMAT] [--no-headers]\n"
	"\n"
	"Print the dashboard summaries (GET /v1/stats): active sandboxes by tenant,\n"
	"image and state; exec latency percentiles per hour and the slowest\n"
	"commands of the last 24 hours; failure reasons (last 24 hours and all);\n"
	"usage (sandbox-hours, execs) per tenant and day for the last 7 days.\n"
	"A key sees its own tenant's figures; an admin key sees every tenant's,\n"
	"or one with --tenant.\n"
	"\n"
	"  --tenant NAME   only this tenant (admin keys)\n"
	"  -o FORMAT       table (default), json, yaml or jsonpath=EXPR (the server's\n"
	"                  document)\n";

enum { OPT_TENANT = CLI_OPT_FIRST_FREE };

const struct option stats_opts[] = {
	CLI_COMMON_OPTIONS,
	{ "tenant", required_argument, NULL, OPT_TENANT },
	CLI_OUTPUT_OPTIONS,
	{ NULL, 0, NULL, 0 },
};

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
			if ((rc = cli_output_arg(&output, optarg, "stats", stats_usage, 1)) != 0)
				goto done;
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
	rc = CLI_OK;
	if (cli_output_is_doc(output))
		rc = cli_print_doc(output, r.json);
	else
		orc_stats_print(stdout, r.json, cli_output_headers());
done:
	cli_response_release(&r);
	orc_buf_release(&path);
	return rc;
}
