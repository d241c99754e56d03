/*
 * orchardctl: the Orchard command-line client.
 *
 *   orchardctl [--url URL] [--api-key KEY] [--cacert FILE] COMMAND [ARGS]
 *
 * Flags override ORCHARD_URL, ORCHARD_API_KEY and ORCHARD_CACERT, and are
 * accepted after the command name too. Exit status: 0 ok, 1 an API or
 * network error, 2 a usage error; exec exits with the command's own status.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <curl/curl.h>

#include "cli.h"
#include "err.h"
#include "log.h"

static const char main_usage[] =
	"usage: orchardctl [--url URL] [--api-key KEY] [--cacert FILE] COMMAND [ARGS]\n"
	"\n"
	"Commands:\n"
	"  create [IMAGE]        create a sandbox (IMAGE defaults to \"host\")\n"
	"  ls                    list sandboxes\n"
	"  get ID                show one sandbox\n"
	"  wait ID               wait until a sandbox is ready\n"
	"  exec ID -- CMD...     run a command in a sandbox\n"
	"  rm ID...              delete sandboxes\n"
	"  version               show the client (and server) version\n"
	"  help [COMMAND]        show help for a command\n"
	"\n"
	"Configuration (flags override the environment):\n"
	"  --url URL         $ORCHARD_URL      the API, e.g. https://127.0.0.1:8443\n"
	"  --api-key KEY     $ORCHARD_API_KEY  sent as X-API-Key\n"
	"  --cacert FILE     $ORCHARD_CACERT   CA certificate to verify the server\n"
	"                                      (default: the system's CAs)\n"
	"\n"
	"Exit status: 0 ok, 1 API or network error, 2 usage error;\n"
	"exec exits with the command's own status (124 when it timed out).\n"
	"\n"
	"Example:\n"
	"  . var/env\n"
	"  ID=$(orchardctl create --wait)\n"
	"  orchardctl exec $ID -- echo hi\n"
	"  orchardctl rm $ID\n";

static const char version_usage[] =
	"usage: orchardctl version\n"
	"\n"
	"Print the client's version and, when a server is configured, the\n"
	"server's (GET /).\n";

static int cmd_help(struct cli_config *cfg, int argc, char **argv);
static int cmd_version(struct cli_config *cfg, int argc, char **argv);

static const struct cli_cmd commands[] = {
	{ "create", cmd_create, "create a sandbox", create_usage },
	{ "ls", cmd_ls, "list sandboxes", ls_usage },
	{ "get", cmd_get, "show a sandbox", get_usage },
	{ "wait", cmd_wait, "wait until a sandbox is ready", wait_usage },
	{ "exec", cmd_exec, "run a command in a sandbox", exec_usage },
	{ "rm", cmd_rm, "delete sandboxes", rm_usage },
	{ "version", cmd_version, "show versions", version_usage },
	{ "help", cmd_help, "show help", main_usage },
};

static const struct cli_cmd *find_cmd(const char *name)
{
	size_t i;

	for (i = 0; i < sizeof(commands) / sizeof(*commands); i++)
		if (!strcmp(commands[i].name, name))
			return &commands[i];
	return NULL;
}

int cli_common_option(struct cli_config *cfg, int opt, const char *arg)
{
	switch (opt) {
	case CLI_OPT_URL: cfg->url = arg; return 0;
	case CLI_OPT_API_KEY: cfg->api_key = arg; return 0;
	case CLI_OPT_CACERT: cfg->cacert = arg; return 0;
	default: return ORC_EINVALID;
	}
}

int cli_config_check(const struct cli_config *cfg)
{
	if (!cfg->url || !*cfg->url) {
		cli_error("no server: set ORCHARD_URL (e.g. `. var/env`) or pass --url");
		return CLI_USAGE;
	}
	if (strncmp(cfg->url, "http://", 7) && strncmp(cfg->url, "https://", 8)) {
		cli_error("the server URL \"%s\" must start with https:// or http://", cfg->url);
		return CLI_USAGE;
	}
	return 0;
}

static int cmd_help(struct cli_config *cfg, int argc, char **argv)
{
	const struct cli_cmd *c;

	(void)cfg;
	if (argc < 2) {
		fputs(main_usage, stdout);
		return CLI_OK;
	}
	if (!(c = find_cmd(argv[1])))
		return cli_usage_error(main_usage, "unknown command \"%s\"", argv[1]);
	fputs(c->usage, stdout);
	return CLI_OK;
}

static int cmd_version(struct cli_config *cfg, int argc, char **argv)
{
	static const struct option opts[] = { CLI_COMMON_OPTIONS, { NULL, 0, NULL, 0 } };
	struct cli_request req = { "GET", "/", NULL, NULL, 10 };
	json_object *info = NULL;
	int opt;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1)
		if (cli_common_option(cfg, opt, optarg) < 0)
			return cli_bad_option(version_usage);
	if (optind < argc)
		return cli_usage_error(version_usage, "version: unexpected argument \"%s\"", argv[optind]);
	printf("orchardctl %s (libcurl %s, json-c %s)\n", CLI_VERSION, curl_version_info(CURLVERSION_NOW)->version,
	       json_c_version());
	if (!cfg->url || !*cfg->url)
		return CLI_OK;
	if (cli_config_check(cfg))
		return CLI_USAGE;
	if (cli_call(&info, cfg, &req) < 0)
		return CLI_FAIL;
	printf("server %s: %s %s\n", cfg->url, cli_field_text(info, "service"), cli_field_text(info, "version"));
	json_object_put(info);
	return CLI_OK;
}

/* CMD --help / -h anywhere before "--". */
static int wants_help(int argc, char **argv)
{
	int i;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--"))
			return 0;
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
			return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_COMMON_OPTIONS,
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct cli_config cfg = { 0 };
	const struct cli_cmd *c;
	int opt, rc;

	orc_log_init("orchardctl");
	cfg.url = getenv("ORCHARD_URL");
	cfg.api_key = getenv("ORCHARD_API_KEY");
	cfg.cacert = getenv("ORCHARD_CACERT");
	while ((opt = getopt_long(argc, argv, "+hV", opts, NULL)) != -1) {
		if (opt == 'h') {
			fputs(main_usage, stdout);
			return CLI_OK;
		}
		if (opt == 'V') {
			printf("orchardctl %s\n", CLI_VERSION);
			return CLI_OK;
		}
		if (cli_common_option(&cfg, opt, optarg) < 0)
			return cli_bad_option(main_usage);
	}
	if (optind >= argc)
		return cli_usage_error(main_usage, "missing command");
	if (!(c = find_cmd(argv[optind])))
		return cli_usage_error(main_usage, "unknown command \"%s\" (see `orchardctl help`)",
				       argv[optind]);
	if (c->fn != cmd_help && wants_help(argc - optind, argv + optind)) {
		fputs(c->usage, stdout);
		return CLI_OK;
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		cli_error("curl_global_init() failed");
		return CLI_FAIL;
	}
	rc = c->fn(&cfg, argc - optind, argv + optind);
	fflush(stdout);
	curl_global_cleanup();
	return rc;
}
