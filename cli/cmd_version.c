/*
 * orchardctl version: the client's version and, when a server is
 * configured, the server's (GET /); with -o the same as a document,
 * {"client": {...}, "server": GET /'s answer or null}.
 */
#include <stdio.h>
#include <curl/curl.h>

#include "cli.h"

const char version_usage[] =
	"usage: orchardctl version [-o json|yaml|jsonpath=EXPR]\n"
	"\n"
	"Print the client's version and, when a server is configured, the\n"
	"server's (GET /). With -o: {\"client\": {version, libcurl, json_c},\n"
	"\"server\": the answer of GET / or null}.\n";

const struct option version_opts[] = { CLI_COMMON_OPTIONS, CLI_OUTPUT_OPTIONS, { NULL, 0, NULL, 0 } };

static json_object *client_info(void)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "version", json_object_new_string(CLI_VERSION));
	json_object_object_add(o, "libcurl", json_object_new_string(curl_version_info(CURLVERSION_NOW)->version));
	json_object_object_add(o, "json_c", json_object_new_string(json_c_version()));
	return o;
}

int cmd_version(struct cli_config *cfg, int argc, char **argv)
{
	struct cli_request req = { "GET", "/", NULL, NULL, 10, NULL, NULL };
	enum cli_output output = CLI_OUT_DEFAULT;
	json_object *info = NULL, *doc;
	int opt, rc;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "o:", version_opts, NULL)) != -1) {
		if (opt == 'o') {
			if ((rc = cli_output_arg(&output, optarg, "version", version_usage, 0)) != 0)
				return rc;
		} else if (cli_common_option(cfg, opt, optarg) < 0) {
			return cli_bad_option(version_usage);
		}
	}
	if (optind < argc)
		return cli_usage_error(version_usage, "version: unexpected argument \"%s\"", argv[optind]);
	if (!cli_output_is_doc(output)) {
		printf("orchardctl %s (libcurl %s, json-c %s)\n", CLI_VERSION,
		       curl_version_info(CURLVERSION_NOW)->version, json_c_version());
		fflush(stdout);
	}
	if ((rc = cli_config_has_server(cfg)) < 0)
		return CLI_FAIL;
	if (rc > 0 && ((rc = cli_config_check(cfg)) != 0 || cli_call(&info, cfg, &req) < 0))
		return rc ? rc : CLI_FAIL;
	if (!cli_output_is_doc(output)) {
		if (info)
			printf("server %s: %s %s\n", cfg->url, cli_field_text(info, "service"),
			       cli_field_text(info, "version"));
		rc = CLI_OK;
	} else {
		doc = json_object_new_object();
		json_object_object_add(doc, "client", client_info());
		json_object_object_add(doc, "server", info ? json_object_get(info) : NULL);
		rc = cli_print_doc(output, doc);
		json_object_put(doc);
	}
	if (info)
		json_object_put(info);
	return rc;
}
