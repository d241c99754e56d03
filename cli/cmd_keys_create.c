/*
 * orchardctl keys create --tenant NAME [--admin] [--name LABEL] [-o FORMAT]:
 * POST /v1/keys (admin keys only). The new key is printed alone on one line
 * (KEY=$(orchardctl keys create ...)); the server shows it this once. The
 * request carries no Idempotency-Key and is never retried, so a lost answer
 * cannot leave two keys behind: at worst one key nobody saw, which `keys ls`
 * shows and `keys revoke` removes.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "strutil.h"

const char keys_create_usage[] =
	"usage: orchardctl keys create --tenant NAME [--admin] [--name LABEL] [-o FORMAT]\n"
	"\n"
	"Create an API key for a tenant (admin keys only) and print it alone on one\n"
	"line. It is shown this once: only its hash is stored. With -o json, yaml or\n"
	"jsonpath=EXPR the whole key object (id, key_id, tenant, role, name, ...),\n"
	"the key itself in \"key\".\n"
	"\n"
	"  --tenant NAME   the tenant the key acts for (required)\n"
	"  --admin         an admin key (default: a user key)\n"
	"  --name LABEL    a label to recognise it by in `keys ls`\n";

enum { OPT_TENANT = CLI_OPT_FIRST_FREE, OPT_ADMIN, OPT_NAME };

const struct option keys_create_opts[] = {
	CLI_COMMON_OPTIONS,
	{ "tenant", required_argument, NULL, OPT_TENANT },
	{ "admin", no_argument, NULL, OPT_ADMIN },
	{ "name", required_argument, NULL, OPT_NAME },
	CLI_OUTPUT_OPTIONS,
	{ NULL, 0, NULL, 0 },
};

int cmd_keys_create(struct cli_config *cfg, int argc, char **argv)
{
	struct cli_request req = { "POST", "/v1/keys", NULL, NULL, 60, NULL, NULL };
	enum cli_output output = CLI_OUT_DEFAULT;
	json_object *body = json_object_new_object(), *res = NULL;
	int opt, rc;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "o:", keys_create_opts, NULL)) != -1) {
		if (opt == 'o') {
			if ((rc = cli_output_arg(&output, optarg, "keys create", keys_create_usage, 0)) != 0)
				goto done;
		} else if (opt == OPT_TENANT) {
			if (!orc_is_dns_label(optarg)) {
				rc = cli_usage_error(keys_create_usage, "keys create: --tenant \"%s\" is not a tenant "
						     "name", optarg);
				goto done;
			}
			json_object_object_add(body, "tenant", json_object_new_string(optarg));
		} else if (opt == OPT_ADMIN) {
			json_object_object_add(body, "role", json_object_new_string("admin"));
		} else if (opt == OPT_NAME) {
			if (!orc_utf8_valid(optarg, strlen(optarg))) {
				rc = cli_usage_error(keys_create_usage, "keys create: --name is not UTF-8 text");
				goto done;
			}
			json_object_object_add(body, "name", json_object_new_string(optarg));
		} else if (cli_common_option(cfg, opt, optarg) < 0) {
			rc = cli_bad_option(keys_create_usage);
			goto done;
		}
	}
	if (optind < argc || !json_object_object_get_ex(body, "tenant", NULL)) {
		rc = cli_usage_error(keys_create_usage, optind < argc ? "keys create: unexpected argument" :
				     "keys create: --tenant NAME is required");
		goto done;
	}
	if ((rc = cli_config_check(cfg)) != 0)
		goto done;
	req.body = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN);
	rc = CLI_FAIL;
	if (cli_call(&res, cfg, &req) < 0)
		goto done;
	if (!strcmp(cli_field_text(res, "key"), "-")) {
		cli_error("unexpected answer from POST /v1/keys: no \"key\"");
		goto done;
	}
	rc = CLI_OK;
	if (cli_output_is_doc(output))
		rc = cli_print_doc(output, res);
	else
		printf("%s\n", cli_field_text(res, "key"));
done:
	json_object_put(body);
	if (res)
		json_object_put(res);
	return rc;
}
