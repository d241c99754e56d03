/*
 * orchardctl create [IMAGE] [flags]: POST /v1/sandboxes, then (--wait)
 * GET /v1/sandboxes/{id}/wait until ready, with a spinner on a terminal.
 * With -n N: POST /v1/sandboxes/batch (N at once, all or none), then
 * (--wait) GET /v1/sandboxes/batch/{id}/wait.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "err.h"
#include "strutil.h"
#include "xalloc.h"

#define WAIT_DEFAULT_S 300
#define TIMEOUT_MAX_S 86400
#define LIFETIME_MAX_S (30 * 86400)
#define COUNT_MAX 1000          /* the server's batch maximum */

const char create_usage[] =
	"usage: orchardctl create [IMAGE] [--wait] [--cpu N] [--memory SIZE]\n"
	"                         [--network|--no-network] [--name ID] [--timeout S]\n"
	"                         [--ttl DUR] [--idle-timeout DUR] [-l K=V]... [-e K=V]...\n"
	"                         [-w DIR] [-n N] [-o FORMAT]\n"
	"\n"
	"Create a sandbox and print its id (the whole sandbox object with -o).\n"
	"With -n N, create N sandboxes of the same spec in one request (all or\n"
	"none) and print their ids, one a line (the batch object with -o).\n"
	"\n"
	"  IMAGE               the image; \"host\" (the default) is the host's own system\n"
	"  --wait              wait until it is ready (a spinner on a terminal); a\n"
	"                      failure exits 125 with its reason\n"
	"  --cpu N             CPUs, e.g. 2, 0.5 or 500m\n"
	"  --memory SIZE       memory, e.g. 512Mi or 4Gi\n"
	"  --no-network        no network but loopback (the server's default)\n"
	"  --network           allow network access\n"
	"  --name ID           choose the id (a DNS label: a-z, 0-9, '-'; at most 63)\n"
	"  --timeout S         seconds to become ready (also how long --wait waits;\n"
	"                      default 300 for --wait)\n"
	"  --ttl DUR           delete it this long after creation (90s, 30m, 2h, 1d)\n"
	"  --idle-timeout DUR  delete it after this long without a heartbeat or exec\n"
	"  -l, --label K=V     a label to filter on later (repeatable)\n"
	"  -e, --env K=V       an environment variable for every command (repeatable)\n"
	"  -w, --workdir DIR   the default working directory of its commands\n"
	"  -n, --count N       create N sandboxes (1-1000) as one batch; --wait waits\n"
	"                      for all of them; not with --name\n"
	"  -o FORMAT           print the sandbox: json, yaml or jsonpath=EXPR\n";

enum { OPT_WAIT = CLI_OPT_FIRST_FREE, OPT_CPU, OPT_MEMORY, OPT_NETWORK, OPT_NO_NETWORK,
       OPT_NAME, OPT_TIMEOUT, OPT_TTL, OPT_IDLE };

const struct option create_opts[] = {
	CLI_COMMON_OPTIONS,
	{ "wait", no_argument, NULL, OPT_WAIT },
	{ "cpu", required_argument, NULL, OPT_CPU },
	{ "memory", required_argument, NULL, OPT_MEMORY },
	{ "network", no_argument, NULL, OPT_NETWORK },
	{ "no-network", no_argument, NULL, OPT_NO_NETWORK },
	{ "name", required_argument, NULL, OPT_NAME },
	{ "timeout", required_argument, NULL, OPT_TIMEOUT },
	{ "ttl", required_argument, NULL, OPT_TTL },
	{ "idle-timeout", required_argument, NULL, OPT_IDLE },
	{ "label", required_argument, NULL, 'l' },
	{ "env", required_argument, NULL, 'e' },
	{ "workdir", required_argument, NULL, 'w' },
	{ "count", required_argument, NULL, 'n' },
	CLI_OUTPUT_OPTIONS,
	{ NULL, 0, NULL, 0 },
};

struct create_args {
	const char *image, *cpu, *memory, *name, *workdir;
	int wait, network;           /* network: -1 the server's default */
	int64_t timeout, ttl, idle;  /* 0: not given */
	int64_t count;               /* 0: one sandbox, no batch */
	json_object *labels, *env;   /* NULL: none */
	enum cli_output output;
};

static int add_pair(json_object **obj, const char *arg)
{
	if (!*obj)
		*obj = json_object_new_object();
	return cli_kv_add(*obj, arg);
}

/* Options into a; a usage error is reported and returned as CLI_USAGE. */
static int parse_args(struct create_args *a, struct cli_config *cfg, int argc, char **argv)
{
	int opt, rc;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "o:l:e:w:n:", create_opts, NULL)) != -1) {
		switch (opt) {
		case OPT_WAIT: a->wait = 1; break;
		case OPT_CPU: a->cpu = optarg; break;
		case OPT_MEMORY: a->memory = optarg; break;
		case OPT_NETWORK: a->network = 1; break;
		case OPT_NO_NETWORK: a->network = 0; break;
		case OPT_NAME: a->name = optarg; break;
		case 'w': a->workdir = optarg; break;
		case 'n':
			if (orc_parse_i64(&a->count, optarg, 1, COUNT_MAX) < 0)
				return cli_usage_error(create_usage, "create: --count wants 1 to %d, not \"%s\"",
						       COUNT_MAX, optarg);
			break;
		case OPT_TIMEOUT:
			if (cli_parse_duration(&a->timeout, optarg, 1, TIMEOUT_MAX_S) < 0)
				return cli_usage_error(create_usage, "create: --timeout wants 1s to 1d, "
						       "not \"%s\"", optarg);
			break;
		case OPT_TTL:
		case OPT_IDLE:
			if (cli_parse_duration(opt == OPT_TTL ? &a->ttl : &a->idle, optarg, 1, LIFETIME_MAX_S) < 0)
				return cli_usage_error(create_usage, "create: --%s wants a duration from 1s to "
						       "30d (90, 90s, 30m, 2h, 1d), not \"%s\"",
						       opt == OPT_TTL ? "ttl" : "idle-timeout", optarg);
			break;
		case 'l':
		case 'e':
			if (add_pair(opt == 'l' ? &a->labels : &a->env, optarg) < 0)
				return cli_usage_error(create_usage, "create: --%s wants K=V, not \"%s\"",
						       opt == 'l' ? "label" : "env", optarg);
			break;
		case 'o':
			if ((rc = cli_output_arg(&a->output, optarg, "create", create_usage, 0)) != 0)
				return rc;
			break;
		default:
			if (cli_common_option(cfg, opt, optarg) < 0)
				return cli_bad_option(create_usage);
		}
	}
	if (argc - optind > 1)
		return cli_usage_error(create_usage, "create: expected at most one IMAGE");
	if (optind < argc)
		a->image = argv[optind];
	if (!*a->image || strlen(a->image) > 1024 || !orc_utf8_valid(a->image, strlen(a->image)))
		return cli_usage_error(create_usage, "create: invalid IMAGE");
	return 0;
}

static int check_args(const struct create_args *a)
{
	int64_t num;

	if (a->cpu && orc_parse_cpu(&num, a->cpu) < 0)
		return cli_usage_error(create_usage, "create: --cpu wants e.g. 2, 0.5 or 500m, not \"%s\"", a->cpu);
	if (a->memory && orc_parse_memory(&num, a->memory) < 0)
		return cli_usage_error(create_usage, "create: --memory wants e.g. 512Mi or 4Gi, not \"%s\"",
				       a->memory);
	if (a->name && a->count)
		return cli_usage_error(create_usage, "create: --name and --count exclude each other "
				       "(a batch's ids are generated)");
	if (a->name && !orc_is_dns_label(a->name))
		return cli_usage_error(create_usage, "create: --name \"%s\" is not a DNS label "
				       "(a-z, 0-9 and '-', at most 63, no '-' at either end)", a->name);
	if (a->workdir && (a->workdir[0] != '/' || !orc_utf8_valid(a->workdir, strlen(a->workdir))))
		return cli_usage_error(create_usage, "create: --workdir wants an absolute path, not \"%s\"",
				       a->workdir);
	return 0;
}

static json_object *request_body(const struct create_args *a)
{
	json_object *body = json_object_new_object();

	json_object_object_add(body, "image", json_object_new_string(a->image));
	if (a->cpu)
		json_object_object_add(body, "cpu", json_object_new_string(a->cpu));
	if (a->memory)
		json_object_object_add(body, "memory", json_object_new_string(a->memory));
	if (a->network >= 0)
		json_object_object_add(body, "block_network", json_object_new_boolean(!a->network));
	if (a->name)
		json_object_object_add(body, "sandbox_id", json_object_new_string(a->name));
	if (a->timeout)
		json_object_object_add(body, "timeout", json_object_new_int64(a->timeout));
	if (a->ttl)
		json_object_object_add(body, "ttl_seconds", json_object_new_int64(a->ttl));
	if (a->idle)
		json_object_object_add(body, "idle_timeout_seconds", json_object_new_int64(a->idle));
	if (a->labels)
		json_object_object_add(body, "labels", json_object_get(a->labels));
	if (a->env)
		json_object_object_add(body, "env", json_object_get(a->env));
	if (a->workdir)
		json_object_object_add(body, "workdir", json_object_new_string(a->workdir));
	if (a->count)
		json_object_object_add(body, "count", json_object_new_int64(a->count));
	return body;
}

/* --wait of a batch: all of it ready, or CLI_FAIL with the counts. */
static int batch_wait(const struct cli_config *cfg, const char *batch_id, long timeout_s)
{
	char *path = xasprintf("/v1/sandboxes/batch/%s/wait?timeout=%ld", batch_id, timeout_s);
	struct cli_request req = { "GET", path, NULL, NULL, timeout_s + 30, NULL, NULL };
	json_object *w = NULL, *v = NULL;
	int rc = CLI_FAIL;

	if (cli_call(&w, cfg, &req) < 0)
		goto done;
	if (!json_object_object_get_ex(w, "satisfied", &v) || !json_object_get_boolean(v)) {
		cli_error("batch %s: %s of %s sandboxes ready, %s failed, %s deleted%s", batch_id,
			  cli_field_text(w, "ready"), cli_field_text(w, "count"), cli_field_text(w, "failed"),
			  cli_field_text(w, "deleted"), json_object_object_get_ex(w, "timed_out", &v) &&
			  json_object_get_boolean(v) ? " (timed out)" : "");
		goto done;
	}
	rc = CLI_OK;
done:
	if (w)
		json_object_put(w);
	free(path);
	return rc;
}

/* The batch's ids, one a line. */
static void print_ids(json_object *batch)
{
	json_object *ids = NULL;
	size_t i;

	json_object_object_get_ex(batch, "sandbox_ids", &ids);
	for (i = 0; ids && i < json_object_array_length(ids); i++)
		printf("%s\n", json_object_get_string(json_object_array_get_idx(ids, i)));
}

/* After the batch's 201: wait if asked, then print. */
static int create_batch_done(json_object *batch, const struct cli_config *cfg,
			     const struct create_args *a)
{
	const char *id = cli_field_text(batch, "batch_id");
	int rc;

	if (!strcmp(id, "-")) {
		cli_error("unexpected response to create: no batch_id");
		return CLI_FAIL;
	}
	if (a->wait && (rc = batch_wait(cfg, id, a->timeout ? (long)a->timeout : WAIT_DEFAULT_S)) != CLI_OK)
		return rc;
	if (cli_output_is_doc(a->output))
		return cli_print_doc(a->output, batch);
	print_ids(batch);
	return CLI_OK;
}

int cmd_create(struct cli_config *cfg, int argc, char **argv)
{
	struct create_args a = { "host", NULL, NULL, NULL, NULL, 0, -1, 0, 0, 0, 0, NULL, NULL,
				 CLI_OUT_DEFAULT };
	char idem[33];
	struct cli_request req = { "POST", "/v1/sandboxes", NULL, idem, 60, NULL, NULL };
	json_object *body = NULL, *sb = NULL, *ready = NULL;
	int rc;

	if ((rc = parse_args(&a, cfg, argc, argv)) != 0 || (rc = check_args(&a)) != 0 ||
	    (rc = cli_config_check(cfg)) != 0)
		goto done;
	body = request_body(&a);
	if (a.count)
		req.path = "/v1/sandboxes/batch";
	req.body = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	/* The same key on every retry: a retry cannot create a second sandbox. */
	cli_new_idempotency_key(idem);

	rc = CLI_FAIL;
	if (cli_call(&sb, cfg, &req) < 0)
		goto done;
	if (a.count) {
		rc = create_batch_done(sb, cfg, &a);
		goto done;
	}
	if (!json_object_is_type(sb, json_type_object) || !strcmp(cli_field_text(sb, "sandbox_id"), "-")) {
		cli_error("unexpected response to create: no sandbox_id");
		goto done;
	}
	if (a.wait) {
		if (cli_sandbox_wait(&ready, cfg, cli_field_text(sb, "sandbox_id"),
				     a.timeout ? (long)a.timeout : WAIT_DEFAULT_S, 1) < 0)
			goto done;
		json_object_put(sb);
		sb = ready;
	}
	rc = CLI_OK;
	if (cli_output_is_doc(a.output))
		rc = cli_print_doc(a.output, sb);
	else
		printf("%s\n", cli_field_text(sb, "sandbox_id"));
done:
	if (sb)
		json_object_put(sb);
	if (body)
		json_object_put(body);
	if (a.labels)
		json_object_put(a.labels);
	if (a.env)
		json_object_put(a.env);
	return rc;
}
