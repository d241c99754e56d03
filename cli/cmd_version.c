/*
 * orchardctl version: the client's version and, when a server is
 * configured, the server's (GET /).
 */
#include <stdio.h>
#include <curl/curl.h>

#include "cli.h"

const char version_usage[] =
	"usage: orchardctl version\n"
	"\n"
	"Print the client's version and, when a server is configured, the\n"
	"server's (GET /).\n";

int cmd_version(struct cli_config *cfg, int argc, char **argv)
{
	struct cli_request req = { "GET", "/", NULL, NULL, 10, NULL, NULL };
	json_object *info = NULL;
	int opt, rc;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "", common_opts, NULL)) != -1)
		if (cli_common_option(cfg, opt, optarg) < 0)
			return cli_bad_option(version_usage);
	if (optind < argc)
		return cli_usage_error(version_usage, "version: unexpected argument \"%s\"", argv[optind]);
	printf("orchardctl %s (libcurl %s, json-c %s)\n", CLI_VERSION, curl_version_info(CURLVERSION_NOW)->version,
	       json_c_version());
	fflush(stdout);
	if ((rc = cli_config_has_server(cfg)) <= 0)
		return rc < 0 ? CLI_FAIL : CLI_OK;  /* no server configured: the client alone */
	if ((rc = cli_config_check(cfg)) != 0)
		return rc;
	if (cli_call(&info, cfg, &req) < 0)
		return CLI_FAIL;
	printf("server %s: %s %s\n", cfg->url, cli_field_text(info, "service"), cli_field_text(info, "version"));
	json_object_put(info);
	return CLI_OK;
}
