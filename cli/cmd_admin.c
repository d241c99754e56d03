/*
 * orchardctl keys ls|revoke and tenants ls|create|set: what an admin key
 * may do through the API (GET/DELETE /v1/keys, GET/POST/PATCH
 * /v1/tenants). keys create (cmd_keys_create.c) and tenants delete
 * (cmd_tenants_delete.c) live in files of their own.
 */
#include <stdio.h>
#include <string.h>

#include "err.h"
#include "strutil.h"
#include "transfer.h"
#include "xalloc.h"

const char keys_usage[] =
	"usage: orchardctl keys create|ls|revoke ...\n"
	"\n"
	"Create, list and revoke API keys (admin keys only). `orchard-admin key\n"
	"create` does the same from a machine that reaches the database (for the\n"
	"first admin key).\n";

const char keys_ls_usage[] =
	"usage: orchardctl keys ls [--tenant NAME] [-o FORMAT] [--no-headers] [-q]\n"
	"\n"
	"List API keys, never their secrets: key id, tenant, role, name, when\n"
	"last used and whether revoked.\n"
	"\n"
	"  --tenant NAME  only this tenant's keys\n"
	"  -o FORMAT      table (default), wide, json, yaml or jsonpath=EXPR\n"
	"  -q, --quiet    key ids only\n";

const char keys_revoke_usage[] =
	"usage: orchardctl keys revoke KEY...\n"
	"\n"
	"Revoke keys, by key id (the 12 characters after the prefix) or numeric id.\n"
	"Every api replica refuses a revoked key at once. Revoking twice is fine.\n";

const char tenants_usage[] =
	"usage: orchardctl tenants ls|create|set|delete ...\n"
	"\n"
	"List tenants with their usage, create them, change their quotas and delete\n"
	"them (admin keys only).\n";

const char tenants_ls_usage[] =
	"usage: orchardctl tenants ls [-o FORMAT] [--no-headers] [-q]\n"
	"\n"
	"List tenants: live sandboxes and the cpu and memory they hold, and quotas.\n"
	"\n"
	"  -o FORMAT      table (default), wide, json, yaml or jsonpath=EXPR\n"
	"  -q, --quiet    names only\n";

#define QUOTA_HELP \
	"  --max-sandboxes N           live sandboxes at once\n" \
	"  --max-cpu CPU               cpu of one sandbox (2, 0.5, 500m)\n" \
	"  --max-memory MEM            memory of one sandbox (512Mi, 4Gi)\n" \
	"  --max-total-cpu CPU         cpu of its live sandboxes together\n" \
	"  --max-total-memory MEM      memory of its live sandboxes together\n" \
	"  --max-queued N              sandboxes waiting for capacity at once\n" \
	"  --max-creates-per-minute N  sandboxes created in any 60 seconds\n" \
	"  --max-execs-per-sandbox N   execs running at once in one sandbox (more queue)\n" \
	"  --max-execs N               execs running at once in all its sandboxes\n" \
	"  --max-queued-execs-per-sandbox N  execs queued in one sandbox (more: 429)\n" \
	"  --max-queued-execs N        execs queued in all its sandboxes (more: 429)\n" \
	"  --weight N                  share of the admission queue (1-1000, default 1)\n" \
	"  --checkpoints MODE          none or every_step: the step checkpoints of its\n" \
	"                              sandboxes created without \"checkpoints\"\n"

const char tenants_create_usage[] =
	"usage: orchardctl tenants create NAME [--max-... QUOTA]... [-o FORMAT]\n"
	"\n"
	"Create a tenant (NAME is a DNS label). Quotas not given are unlimited\n"
	"(exec limits not given: the server's defaults).\n"
	"\n"
	QUOTA_HELP;

const char tenants_set_usage[] =
	"usage: orchardctl tenants set NAME [--max-... QUOTA|none]... [-o FORMAT]\n"
	"\n"
	"Change a tenant's quotas; `none` removes one. Quotas not given stay.\n"
	"Running sandboxes are never touched by a lower quota.\n"
	"\n"
	QUOTA_HELP;

enum { OPT_TENANT = CLI_OPT_FIRST_FREE, OPT_MAX_SB, OPT_MAX_CPU, OPT_MAX_MEM, OPT_MAX_TOTAL_CPU,
       OPT_MAX_TOTAL_MEM, OPT_MAX_QUEUED, OPT_MAX_RATE, OPT_MAX_EXECS_SB, OPT_MAX_EXECS,
       OPT_MAX_QEXECS_SB, OPT_MAX_QEXECS, OPT_WEIGHT, OPT_CHECKPOINTS };

/* The quota options, OPT_MAX_SB onwards: the field and how its value reads
 * ('n' a count, 'c' cpu, 'm' memory). */
static const struct {
	const char *flag, *field;
	int kind;
} quota_opts[] = {
	{ "max-sandboxes", "max_sandboxes", 'n' },
	{ "max-cpu", "max_cpu_millis", 'c' },
	{ "max-memory", "max_memory_bytes", 'm' },
	{ "max-total-cpu", "max_total_cpu_millis", 'c' },
	{ "max-total-memory", "max_total_memory_bytes", 'm' },
	{ "max-queued", "max_queued", 'n' },
	{ "max-creates-per-minute", "max_creates_per_minute", 'n' },
	{ "max-execs-per-sandbox", "max_execs_per_sandbox", 'n' },
	{ "max-execs", "max_execs", 'n' },
	{ "max-queued-execs-per-sandbox", "max_queued_execs_per_sandbox", 'n' },
	{ "max-queued-execs", "max_queued_execs", 'n' },
	{ "weight", "weight", 'n' },
};
_Static_assert(sizeof(quota_opts) / sizeof(*quota_opts) == OPT_WEIGHT - OPT_MAX_SB + 1,
	       "one quota_opts entry per quota option");

const struct option keys_ls_opts[] = {
	CLI_COMMON_OPTIONS,
	{ "tenant", required_argument, NULL, OPT_TENANT },
	CLI_OUTPUT_OPTIONS,
	{ "quiet", no_argument, NULL, 'q' },
	{ NULL, 0, NULL, 0 },
};
const struct option tenants_ls_opts[] = {
	CLI_COMMON_OPTIONS,
	CLI_OUTPUT_OPTIONS,
	{ "quiet", no_argument, NULL, 'q' },
	{ NULL, 0, NULL, 0 },
};
const struct option tenants_set_opts[] = {
	CLI_COMMON_OPTIONS,
	{ "max-sandboxes", required_argument, NULL, OPT_MAX_SB },
	{ "max-cpu", required_argument, NULL, OPT_MAX_CPU },
	{ "max-memory", required_argument, NULL, OPT_MAX_MEM },
	{ "max-total-cpu", required_argument, NULL, OPT_MAX_TOTAL_CPU },
	{ "max-total-memory", required_argument, NULL, OPT_MAX_TOTAL_MEM },
	{ "max-queued", required_argument, NULL, OPT_MAX_QUEUED },
	{ "max-creates-per-minute", required_argument, NULL, OPT_MAX_RATE },
	{ "max-execs-per-sandbox", required_argument, NULL, OPT_MAX_EXECS_SB },
	{ "max-execs", required_argument, NULL, OPT_MAX_EXECS },
	{ "max-queued-execs-per-sandbox", required_argument, NULL, OPT_MAX_QEXECS_SB },
	{ "max-queued-execs", required_argument, NULL, OPT_MAX_QEXECS },
	{ "weight", required_argument, NULL, OPT_WEIGHT },
	{ "checkpoints", required_argument, NULL, OPT_CHECKPOINTS },
	CLI_OUTPUT_OPTIONS,
	{ NULL, 0, NULL, 0 },
};

/* GET a list and print it as JSON, names (-q) or a table. */
static int list(struct cli_config *cfg, int argc, char **argv, const struct option *opts, const char *usage,
		const char *name, const char *route, const char *key,
		void (*table)(json_object *items))
{
	struct cli_request req = { "GET", NULL, NULL, NULL, 60, NULL, NULL };
	struct orc_buf path = ORC_BUF_INIT;
	json_object *res = NULL, *items;
	const char *tenant = NULL;
	enum cli_output output = CLI_OUT_TABLE;
	int opt, rc, quiet = 0;
	size_t i;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "o:q", opts, NULL)) != -1) {
		if (opt == 'o') {
			if ((rc = cli_output_arg(&output, optarg, name, usage, 1)) != 0)
				return rc;
		} else if (opt == 'q') {
			quiet = 1;
		} else if (opt == OPT_TENANT) {
			if (!orc_is_dns_label(optarg))
				return cli_usage_error(usage, "%s: --tenant \"%s\" is not a tenant name", name, optarg);
			tenant = optarg;
		} else if (cli_common_option(cfg, opt, optarg) < 0) {
			return cli_bad_option(usage);
		}
	}
	if (optind != argc)
		return cli_usage_error(usage, "%s: unexpected argument \"%s\"", name, argv[optind]);
	if ((rc = cli_config_check(cfg)) != 0)
		return rc;
	orc_buf_adds(&path, route);
	if (tenant)
		cli_path_add_query(&path, "tenant", tenant);
	req.path = orc_buf_cstr(&path);
	rc = CLI_FAIL;
	if (cli_call(&res, cfg, &req) < 0)
		goto done;
	if (!json_object_object_get_ex(res, key, &items) || !json_object_is_type(items, json_type_array)) {
		cli_error("unexpected answer from GET %s: no \"%s\" list", route, key);
		goto done;
	}
	rc = CLI_OK;
	if (cli_output_is_doc(output))
		rc = cli_print_doc(output, res);
	else if (quiet)
		for (i = 0; i < json_object_array_length(items); i++)
			printf("%s\n", cli_field_text(json_object_array_get_idx(items, i),
						      !strcmp(key, "keys") ? "key_id" : "name"));
	else
		table(items);
done:
	if (res)
		json_object_put(res);
	orc_buf_release(&path);
	return rc;
}

static void keys_table(json_object *keys)
{
	static const char *const headers[] = { "KEY ID", "TENANT", "ROLE", "NAME", "LAST USED", "STATUS", "AGE" };
	struct cli_table t;
	json_object *k, *v;
	char used[32], age[32];
	size_t i;

	cli_table_init(&t, 7, headers);
	for (i = 0; i < json_object_array_length(keys); i++) {
		k = json_object_array_get_idx(keys, i);
		cli_format_age(used, sizeof(used), json_object_object_get_ex(k, "last_used_at", &v) ? v : NULL);
		cli_format_age(age, sizeof(age), json_object_object_get_ex(k, "created_at", &v) ? v : NULL);
		const char *row[] = { cli_field_text(k, "key_id"), cli_field_text(k, "tenant"),
				      cli_field_text(k, "role"), cli_field_text(k, "name"), used,
				      json_object_object_get_ex(k, "revoked", &v) && json_object_get_boolean(v) ?
				      "revoked" : "active", age };
		cli_table_add(&t, row);
	}
	cli_table_print(&t);
	cli_table_release(&t);
}

/* A quota's value for a table: "-" unlimited, else formatted. */
static void quota_text(char *out, size_t outlen, json_object *o, const char *key, int kind)
{
	json_object *v;
	int64_t n;

	if (!json_object_object_get_ex(o, key, &v) || !v) {
		snprintf(out, outlen, "-");
		return;
	}
	n = json_object_get_int64(v);
	if (kind == 'c')
		snprintf(out, outlen, n % 1000 ? "%lldm" : "%lld", (long long)(n % 1000 ? n : n / 1000));
	else if (kind == 'm')
		cli_format_bytes(out, outlen, (double)n);
	else
		snprintf(out, outlen, "%lld", (long long)n);
}

static void tenants_table(json_object *tenants)
{
	static const char *const headers[] = { "NAME", "SANDBOXES", "CPU", "MEMORY", "MAX SANDBOXES",
					       "MAX CPU", "MAX MEMORY", "AGE" };
	struct cli_table t;
	json_object *o, *usage, *v;
	char sb[32], cpu[32], mem[32], qsb[32], qcpu[32], qmem[32], age[32];
	size_t i;

	cli_table_init(&t, 8, headers);
	for (i = 0; i < json_object_array_length(tenants); i++) {
		o = json_object_array_get_idx(tenants, i);
		usage = json_object_object_get_ex(o, "usage", &v) ? v : NULL;
		quota_text(sb, sizeof(sb), usage, "sandboxes", 'n');
		quota_text(cpu, sizeof(cpu), usage, "cpu_millis", 'c');
		quota_text(mem, sizeof(mem), usage, "memory_bytes", 'm');
		quota_text(qsb, sizeof(qsb), o, "max_sandboxes", 'n');
		quota_text(qcpu, sizeof(qcpu), o, "max_cpu_millis", 'c');
		quota_text(qmem, sizeof(qmem), o, "max_memory_bytes", 'm');
		cli_format_age(age, sizeof(age), json_object_object_get_ex(o, "created_at", &v) ? v : NULL);
		const char *row[] = { cli_field_text(o, "name"), sb, cpu, mem, qsb, qcpu, qmem, age };
		cli_table_add(&t, row);
	}
	cli_table_print(&t);
	cli_table_release(&t);
}

int cmd_keys_ls(struct cli_config *cfg, int argc, char **argv)
{
	return list(cfg, argc, argv, keys_ls_opts, keys_ls_usage, "keys ls", "/v1/keys", "keys", keys_table);
}

int cmd_tenants_ls(struct cli_config *cfg, int argc, char **argv)
{
	return list(cfg, argc, argv, tenants_ls_opts, tenants_ls_usage, "tenants ls", "/v1/tenants", "tenants",
		    tenants_table);
}

int cmd_keys_revoke(struct cli_config *cfg, int argc, char **argv)
{
	struct cli_request req = { "DELETE", NULL, NULL, NULL, 60, NULL, NULL };
	json_object *res;
	char *path;
	int opt, rc, failed = 0;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "", common_opts, NULL)) != -1)
		if (cli_common_option(cfg, opt, optarg) < 0)
			return cli_bad_option(keys_revoke_usage);
	if (optind >= argc)
		return cli_usage_error(keys_revoke_usage, "keys revoke: expected at least one KEY");
	if ((rc = cli_config_check(cfg)) != 0)
		return rc;
	for (; optind < argc; optind++) {
		path = cli_path("/v1/keys", argv[optind], NULL);
		req.path = path;
		res = NULL;
		if (cli_call(&res, cfg, &req) < 0) {
			failed = 1;
		} else {
			printf("%s\n", cli_field_text(res, "key_id"));
			json_object_put(res);
		}
		free(path);
	}
	return failed ? CLI_FAIL : CLI_OK;
}

/* One quota option into body; none_ok allows "none" (null). 0 or a usage error's status. */
static int quota_option(json_object *body, int opt, const char *arg, int none_ok, const char *usage,
			const char *name)
{
	int kind = quota_opts[opt - OPT_MAX_SB].kind;
	const char *field = quota_opts[opt - OPT_MAX_SB].field;
	int64_t v;

	if (none_ok && !strcmp(arg, "none")) {
		json_object_object_add(body, field, NULL);
		return 0;
	}
	if ((kind == 'n' && orc_parse_i64(&v, arg, 0, 1000000) < 0) ||
	    (kind == 'c' && (orc_parse_cpu(&v, arg) < 0 || v < 1)) ||
	    (kind == 'm' && (orc_parse_memory(&v, arg) < 0 || v < 1)))
		return cli_usage_error(usage, "%s: invalid --%s \"%s\"%s", name, quota_opts[opt - OPT_MAX_SB].flag,
				       arg, none_ok ? " (a quantity or none)" : "");
	json_object_object_add(body, field, json_object_new_int64(v));
	return 0;
}

static int tenant_write(struct cli_config *cfg, int argc, char **argv, int create)
{
	const char *usage = create ? tenants_create_usage : tenants_set_usage;
	const char *name = create ? "tenants create" : "tenants set";
	struct cli_request req = { create ? "POST" : "PATCH", NULL, NULL, NULL, 60, NULL, NULL };
	json_object *body = json_object_new_object(), *res = NULL;
	char *path = NULL;
	enum cli_output output = CLI_OUT_DEFAULT;
	int opt, rc;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "o:", tenants_set_opts, NULL)) != -1) {
		if (opt == 'o') {
			if ((rc = cli_output_arg(&output, optarg, name, usage, 0)) != 0)
				goto done;
		} else if (opt >= OPT_MAX_SB && opt <= OPT_WEIGHT) {
			if ((rc = quota_option(body, opt, optarg, !create, usage, name)) != 0)
				goto done;
		} else if (opt == OPT_CHECKPOINTS) {
			if (strcmp(optarg, "none") && strcmp(optarg, "every_step")) {
				rc = cli_usage_error(usage, "%s: invalid --checkpoints \"%s\" (none or "
						     "every_step)", name, optarg);
				goto done;
			}
			json_object_object_add(body, "default_checkpoints", json_object_new_string(optarg));
		} else if (cli_common_option(cfg, opt, optarg) < 0) {
			rc = cli_bad_option(usage);
			goto done;
		}
	}
	if (argc - optind != 1 || !orc_is_dns_label(argv[optind])) {
		rc = cli_usage_error(usage, "%s: expected one NAME (a DNS label)", name);
		goto done;
	}
	if (!create && json_object_object_length(body) == 0) {
		rc = cli_usage_error(usage, "%s: nothing to change: give a --max-..., --weight or "
				     "--checkpoints option", name);
		goto done;
	}
	if ((rc = cli_config_check(cfg)) != 0)
		goto done;
	if (create) {
		json_object_object_add(body, "name", json_object_new_string(argv[optind]));
		path = xstrdup("/v1/tenants");
	} else {
		path = cli_path("/v1/tenants", argv[optind], NULL);
	}
	req.path = path;
	req.body = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN);
	rc = CLI_FAIL;
	if (cli_call(&res, cfg, &req) < 0)
		goto done;
	rc = CLI_OK;
	if (cli_output_is_doc(output))
		rc = cli_print_doc(output, res);
	else
		printf("%s\n", cli_field_text(res, "name"));
done:
	json_object_put(body);
	if (res)
		json_object_put(res);
	free(path);
	return rc;
}

int cmd_tenants_create(struct cli_config *cfg, int argc, char **argv)
{
	return tenant_write(cfg, argc, argv, 1);
}

int cmd_tenants_set(struct cli_config *cfg, int argc, char **argv)
{
	return tenant_write(cfg, argc, argv, 0);
}
