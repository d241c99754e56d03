/*
 * orchardctl tenants delete NAME... [--force] [-o FORMAT]: DELETE
 * /v1/tenants/{name} (admin keys only; docs/openapi.yaml says what happens).
 * A tenant with live sandboxes is refused unless --force, which deletes
 * them with it; its keys are revoked either way.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "strutil.h"

const char tenants_delete_usage[] =
	"usage: orchardctl tenants delete NAME... [--force] [-o FORMAT]\n"
	"\n"
	"Delete tenants (admin keys only): every API key of the tenant is revoked at\n"
	"once, and the name is not given out again. A tenant that still has live\n"
	"sandboxes is refused unless --force, which deletes its sandboxes and\n"
	"checkpoints too. The tenant of the key you use cannot be deleted. Prints\n"
	"each name with what went with it; exits 125 if any failed.\n"
	"\n"
	"  --force      delete the tenant's live sandboxes and checkpoints with it\n"
	"  -o FORMAT    json, yaml or jsonpath=EXPR: the server's answer per tenant\n";

enum { OPT_FORCE = CLI_OPT_FIRST_FREE };

const struct option tenants_delete_opts[] = {
	CLI_COMMON_OPTIONS,
	{ "force", no_argument, NULL, OPT_FORCE },
	CLI_OUTPUT_OPTIONS,
	{ NULL, 0, NULL, 0 },
};

int cmd_tenants_delete(struct cli_config *cfg, int argc, char **argv)
{
	struct cli_request req = { "DELETE", NULL, NULL, NULL, 60, NULL, NULL };
	enum cli_output output = CLI_OUT_DEFAULT;
	json_object *res;
	char *path;
	int opt, rc, i, force = 0, failed = 0;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "o:", tenants_delete_opts, NULL)) != -1) {
		if (opt == 'o') {
			if ((rc = cli_output_arg(&output, optarg, "tenants delete", tenants_delete_usage, 0)) != 0)
				return rc;
		} else if (opt == OPT_FORCE) {
			force = 1;
		} else if (cli_common_option(cfg, opt, optarg) < 0) {
			return cli_bad_option(tenants_delete_usage);
		}
	}
	if (optind >= argc)
		return cli_usage_error(tenants_delete_usage, "tenants delete: expected at least one NAME");
	for (i = optind; i < argc; i++)
		if (!orc_is_dns_label(argv[i]))
			return cli_usage_error(tenants_delete_usage, "tenants delete: \"%s\" is not a tenant name",
					       argv[i]);
	if ((rc = cli_config_check(cfg)) != 0)
		return rc;
	for (i = optind; i < argc; i++) {
		path = cli_path("/v1/tenants", argv[i], force ? "?force=true" : NULL);
		req.path = path;
		res = NULL;
		if (cli_call(&res, cfg, &req) < 0) {
			failed = 1;
		} else if (cli_output_is_doc(output)) {
			failed |= cli_print_doc(output, res) != 0;
		} else {
			printf("%s (sandboxes deleted: %s, checkpoints deleted: %s, keys revoked: %s)\n",
			       cli_field_text(res, "name"), cli_field_text(res, "sandboxes_deleted"),
			       cli_field_text(res, "checkpoints_deleted"), cli_field_text(res, "keys_revoked"));
		}
		fflush(stdout);
		if (res)
			json_object_put(res);
		free(path);
	}
	return failed ? CLI_FAIL : CLI_OK;
}
