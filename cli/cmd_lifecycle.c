/*
 * A sandbox's lifetime after create: wait until ready, and heartbeat to
 * keep it from its idle timeout.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "err.h"
#include "xalloc.h"

#define WAIT_DEFAULT_S 300
#define TIMEOUT_MAX_S 86400

const char wait_usage[] =
	"usage: orchardctl wait ID [--timeout S] [-o FORMAT]\n"
	"\n"
	"Wait until a sandbox is ready (default: up to 300 s) and print its id\n"
	"(with -o json, yaml or jsonpath=EXPR the sandbox).\n"
	"Exits 125 with the reason when it failed or did not become ready in time.\n";

const char heartbeat_usage[] =
	"usage: orchardctl heartbeat ID...\n"
	"\n"
	"Tell the server each sandbox is still in use (POST\n"
	"/v1/sandboxes/{id}/heartbeat), so its idle timeout starts again. Prints\n"
	"each id. Exits 125 if any failed (e.g. an unknown sandbox).\n";

enum { OPT_TIMEOUT = CLI_OPT_FIRST_FREE };

const struct option wait_opts[] = {
	CLI_COMMON_OPTIONS,
	{ "timeout", required_argument, NULL, OPT_TIMEOUT },
	CLI_OUTPUT_OPTIONS,
	{ NULL, 0, NULL, 0 },
};
const struct option heartbeat_opts[] = { CLI_COMMON_OPTIONS, { NULL, 0, NULL, 0 } };

int cmd_wait(struct cli_config *cfg, int argc, char **argv)
{
	enum cli_output output = CLI_OUT_DEFAULT;
	int64_t timeout_s = WAIT_DEFAULT_S;
	json_object *sb = NULL;
	int opt, rc;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "o:", wait_opts, NULL)) != -1) {
		if (opt == 'o') {
			if ((rc = cli_output_arg(&output, optarg, "wait", wait_usage, 0)) != 0)
				return rc;
		} else if (opt == OPT_TIMEOUT) {
			if (cli_parse_duration(&timeout_s, optarg, 1, TIMEOUT_MAX_S) < 0)
				return cli_usage_error(wait_usage, "wait: --timeout wants 1s to 1d, not \"%s\"",
						       optarg);
		} else if (cli_common_option(cfg, opt, optarg) < 0) {
			return cli_bad_option(wait_usage);
		}
	}
	if (argc - optind != 1)
		return cli_usage_error(wait_usage, "wait: expected one ID");
	if ((rc = cli_config_check(cfg)) != 0)
		return rc;
	if (cli_sandbox_wait(&sb, cfg, argv[optind], (long)timeout_s, 1) < 0)
		return CLI_FAIL;
	rc = CLI_OK;
	if (cli_output_is_doc(output))
		rc = cli_print_doc(output, sb);
	else
		printf("%s\n", argv[optind]);
	json_object_put(sb);
	return rc;
}

int cmd_heartbeat(struct cli_config *cfg, int argc, char **argv)
{
	char idem[33];
	struct cli_request req = { "POST", NULL, "{}", idem, 60, NULL, NULL };
	json_object *res;
	char *path;
	int opt, rc, failed = 0;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "", heartbeat_opts, NULL)) != -1)
		if (cli_common_option(cfg, opt, optarg) < 0)
			return cli_bad_option(heartbeat_usage);
	if (optind >= argc)
		return cli_usage_error(heartbeat_usage, "heartbeat: expected at least one ID");
	if ((rc = cli_config_check(cfg)) != 0)
		return rc;
	for (; optind < argc; optind++) {
		/* A heartbeat is idempotent: the key lets it be retried. */
		cli_new_idempotency_key(idem);
		path = cli_path("/v1/sandboxes", argv[optind], "/heartbeat");
		req.path = path;
		res = NULL;
		if (cli_call(&res, cfg, &req) < 0) {
			failed = 1;
		} else {
			printf("%s\n", argv[optind]);
			fflush(stdout);
			json_object_put(res);
		}
		free(path);
	}
	return failed ? CLI_FAIL : CLI_OK;
}
