/*
 * orchardctl: the Orchard command-line client.
 *
 *   orchardctl [--url URL] [--api-key KEY] [--cacert FILE] [--context NAME] COMMAND [ARGS]
 *
 * main() takes the global options, finds the command (or a group's
 * subcommand) in cli_commands[] and runs it. The configuration is resolved
 * only when a command needs the server: flags, then --context's values,
 * then the environment, then the config file's current context.
 * Exit status: 0 ok, 125 orchardctl's own error (usage, an API or network
 * error); exec exits with the command's own status (cli.h).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <curl/curl.h>

#include "cli.h"
#include "cmdline.h"
#include "err.h"
#include "log.h"
#include "transfer.h"

int cli_common_option(struct cli_config *cfg, int opt, const char *arg)
{
	switch (opt) {
	case CLI_OPT_URL: cfg->url = arg; return 0;
	case CLI_OPT_API_KEY: cfg->api_key = arg; return 0;
	case CLI_OPT_CACERT: cfg->cacert = arg; return 0;
	case CLI_OPT_CONTEXT: cfg->context = arg; return 0;
	case CLI_OPT_NO_HEADERS: cli_output_set_no_headers(); return 0;
	case CLI_OPT_DEBUG: cli_debug_enable(); return 0;
	default: return ORC_EINVALID;
	}
}

static const char *nonempty(const char *s)
{
	return s && *s ? s : NULL;
}

static void fill_from_context(struct cli_config *cfg, json_object *ctx)
{
	json_object *v;

	if (!cfg->url && json_object_object_get_ex(ctx, "url", &v) && v)
		cfg->url = nonempty(json_object_get_string(v));
	if (!cfg->api_key && json_object_object_get_ex(ctx, "api-key", &v) && v)
		cfg->api_key = nonempty(json_object_get_string(v));
	if (!cfg->cacert && json_object_object_get_ex(ctx, "cacert", &v) && v)
		cfg->cacert = nonempty(json_object_get_string(v));
}

static int config_resolve(struct cli_config *cfg)
{
	const char *cur;
	json_object *ctx;
	char *path = NULL;
	int rc = CLI_FAIL;

	if (cfg->resolved)
		return 0;
	if (!cfg->context)
		cfg->context = nonempty(getenv("ORCHARD_CONTEXT"));
	if (cli_config_path(&path) < 0 || cli_config_load(&cfg->file, path) < 0)
		goto done;
	if (cfg->context) {
		if (!(ctx = cli_config_context(cfg->file, cfg->context))) {
			cli_error("no context \"%s\" in %s (see `orchardctl config get-contexts`)",
				  cfg->context, path);
			goto done;
		}
		fill_from_context(cfg, ctx);
	}
	if (!cfg->url)
		cfg->url = nonempty(getenv("ORCHARD_URL"));
	if (!cfg->api_key)
		cfg->api_key = nonempty(getenv("ORCHARD_API_KEY"));
	if (!cfg->cacert)
		cfg->cacert = nonempty(getenv("ORCHARD_CACERT"));
	if (!cfg->context && (cur = cli_config_current(cfg->file)) != NULL) {
		if (!(ctx = cli_config_context(cfg->file, cur))) {
			cli_error("the current context \"%s\" is not in %s (run `orchardctl config "
				  "use-context NAME`)", cur, path);
			goto done;
		}
		fill_from_context(cfg, ctx);
	}
	cfg->resolved = 1;
	rc = 0;
done:
	free(path);
	return rc;
}

int cli_config_check(struct cli_config *cfg)
{
	int rc;

	if ((rc = config_resolve(cfg)) != 0)
		return rc;
	if (!cfg->url) {
		cli_error("no server: set ORCHARD_URL (e.g. `. var/env`), pass --url, or save a context "
			  "with `orchardctl config set-context NAME --url URL --api-key KEY`");
		return CLI_USAGE;
	}
	if (strncmp(cfg->url, "http://", 7) && strncmp(cfg->url, "https://", 8)) {
		cli_error("the server URL \"%s\" must start with https:// or http://", cfg->url);
		return CLI_USAGE;
	}
	if (cfg->api_key && !cli_api_key_ok(cfg->api_key)) {
		cli_error("the API key has characters an API key cannot have (spaces or control "
			  "characters?): check ORCHARD_API_KEY, --api-key or the context");
		return CLI_USAGE;
	}
	return 0;
}

int cli_config_has_server(struct cli_config *cfg)
{
	if (config_resolve(cfg) != 0)
		return ORC_ERROR;
	return cfg->url != NULL;
}

void cli_config_release(struct cli_config *cfg)
{
	if (cfg->file)
		json_object_put(cfg->file);
	cfg->file = NULL;
}

const struct cli_cmd *cli_find_cmd(const struct cli_cmd *table, const char *name)
{
	for (; table && table->name; table++)
		if (!strcmp(table->name, name))
			return table;
	return NULL;
}

static int main_usage_error(void)
{
	fputc('\n', stderr);
	cli_print_main_help(stderr);
	return CLI_USAGE;
}

/* Run the command (or a group's subcommand) that argv[0] names. */
static int dispatch(struct cli_config *cfg, int argc, char **argv)
{
	const struct cli_cmd *c, *group = NULL;

	if (!(c = cli_find_cmd(cli_commands, argv[0]))) {
		cli_error("unknown command \"%s\"", argv[0]);
		return main_usage_error();
	}
	if (c->sub) {
		group = c;
		if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
			cli_print_help(stdout, group);
			return CLI_OK;
		}
		if (argc < 2)
			return cli_group_usage_error(group, NULL);
		if (!(c = cli_find_cmd(group->sub, argv[1])))
			return cli_group_usage_error(group, argv[1]);
		argc--;
		argv++;
	}
	if (c->fn != cmd_help && orc_wants_help(argc, argv)) {
		cli_print_help(stdout, c);
		return CLI_OK;
	}
	return c->fn(cfg, argc, argv);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_COMMON_OPTIONS,
		{ "no-headers", no_argument, NULL, CLI_OPT_NO_HEADERS },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct cli_config cfg = { 0 };
	int opt, rc;

	orc_log_init("orchardctl");
	while ((opt = getopt_long(argc, argv, "+hVv", opts, NULL)) != -1) {
		if (opt == 'h') {
			cli_print_main_help(stdout);
			return CLI_OK;
		}
		if (opt == 'v') {
			cli_debug_enable();
			continue;
		}
		if (opt == 'V') {
			printf("orchardctl %s\n", CLI_VERSION);
			return CLI_OK;
		}
		if (cli_common_option(&cfg, opt, optarg) < 0)
			return main_usage_error();
	}
	if (optind >= argc) {
		cli_error("missing command");
		return main_usage_error();
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		cli_error("curl_global_init() failed");
		return CLI_FAIL;
	}
	rc = dispatch(&cfg, argc - optind, argv + optind);
	fflush(stdout);
	cli_config_release(&cfg);
	curl_global_cleanup();
	return rc;
}
