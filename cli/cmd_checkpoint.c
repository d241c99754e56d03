/*
 * Checkpoints, forks and pause/resume (docs/checkpoints.md):
 *
 *   orchardctl checkpoint create ID [--name N] [-o FORMAT]   prints the checkpoint id
 *   orchardctl checkpoint ls [--sandbox ID] [-o FORMAT]
 *   orchardctl checkpoint get CKPT [-o FORMAT]
 *   orchardctl checkpoint rm CKPT...
 *   orchardctl fork ID|CKPT [-n N] [--step T] [-o FORMAT]   prints the new ids, one per line
 *   orchardctl pause ID / resume ID
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "err.h"
#include "strutil.h"
#include "xalloc.h"

#define CKPT_TIMEOUT_S 660

const char checkpoint_usage[] =
	"usage: orchardctl checkpoint create|ls|get|rm ...\n"
	"\n"
	"Checkpoints of a sandbox's writable state (docs/checkpoints.md).\n";
const char checkpoint_create_usage[] =
	"usage: orchardctl checkpoint create ID [--name NAME] [-o FORMAT]\n"
	"\n"
	"Checkpoint sandbox ID now; prints the checkpoint's id when it is ready.\n";
const char checkpoint_ls_usage[] =
	"usage: orchardctl checkpoint ls [--sandbox ID] [-o FORMAT]\n"
	"\n"
	"List your checkpoints (of one sandbox with --sandbox).\n";
const char checkpoint_get_usage[] =
	"usage: orchardctl checkpoint get CKPT [-o FORMAT]\n";
const char checkpoint_rm_usage[] =
	"usage: orchardctl checkpoint rm CKPT...\n"
	"\n"
	"Delete checkpoints; prints each id as it is deleted.\n";
const char fork_usage[] =
	"usage: orchardctl fork ID|CKPT [-n N] [--step T] [-o FORMAT]\n"
	"\n"
	"Create N sandboxes (default 1) from checkpoint CKPT, or from sandbox ID\n"
	"as it is now; prints the new sandbox ids, one per line. --step T: from\n"
	"the checkpoint taken at step T of sandbox ID's trajectory (also after ID\n"
	"was deleted; docs/checkpoints.md).\n";
const char pause_usage[] =
	"usage: orchardctl pause ID\n"
	"\n"
	"Freeze a sandbox's processes; exec is refused until resume.\n";
const char resume_usage[] =
	"usage: orchardctl resume ID\n";

enum { OPT_NAME = CLI_OPT_FIRST_FREE, OPT_SANDBOX, OPT_STEP };

const struct option checkpoint_opts[] = {
	CLI_COMMON_OPTIONS,
	{ "name", required_argument, NULL, OPT_NAME },
	{ "sandbox", required_argument, NULL, OPT_SANDBOX },
	{ "count", required_argument, NULL, 'n' },
	{ "step", required_argument, NULL, OPT_STEP },
	CLI_OUTPUT_OPTIONS,
	{ NULL, 0, NULL, 0 },
};

struct ck_args {
	enum cli_output output;
	const char *name;
	const char *sandbox;
	int64_t count;
	int64_t step;             /* -1: none */
};

/* Options, then at least min positional arguments (at most max). */
static int parse(struct ck_args *a, struct cli_config *cfg, int argc, char **argv, const char *usage,
		 int min, int max)
{
	int opt, rc;

	memset(a, 0, sizeof(*a));
	a->count = 1;
	a->step = -1;
	optind = 0;
	while ((opt = getopt_long(argc, argv, "o:n:", checkpoint_opts, NULL)) != -1) {
		if (opt == 'o') {
			if ((rc = cli_output_arg(&a->output, optarg, argv[0], usage, 1)) != 0)
				return rc;
		} else if (opt == 'n') {
			if (orc_parse_i64(&a->count, optarg, 1, 256) < 0)
				return cli_usage_error(usage, "-n wants a count from 1 to 256");
		} else if (opt == OPT_NAME) {
			a->name = optarg;
		} else if (opt == OPT_SANDBOX) {
			a->sandbox = optarg;
		} else if (opt == OPT_STEP) {
			if (orc_parse_i64(&a->step, optarg, 0, INT64_MAX) < 0)
				return cli_usage_error(usage, "--step wants a step number (0 or more)");
		} else if (cli_common_option(cfg, opt, optarg) < 0) {
			return cli_bad_option(usage);
		}
	}
	if (argc - optind < min || (max >= 0 && argc - optind > max))
		return cli_usage_error(usage, "wrong number of arguments");
	if ((rc = cli_config_check(cfg)) != 0)
		return rc;
	return 0;
}

static int call(json_object **out, struct cli_config *cfg, const char *method, const char *path,
		const char *body, const char *idem)
{
	struct cli_request req = { method, path, body, idem, CKPT_TIMEOUT_S, NULL, NULL };

	return cli_call(out, cfg, &req);
}

static void print_checkpoint_line(json_object *c)
{
	printf("%-16s %-10s %-8s %12s  %s\n", cli_field_text(c, "id"), cli_field_text(c, "sandbox_id"),
	       cli_field_text(c, "state"), cli_field_text(c, "bytes"), cli_field_text(c, "created_at"));
}

int cmd_checkpoint_create(struct cli_config *cfg, int argc, char **argv)
{
	struct ck_args a;
	json_object *body, *res = NULL;
	char *path;
	int rc;

	if ((rc = parse(&a, cfg, argc, argv, checkpoint_create_usage, 1, 1)) != 0)
		return rc;
	body = json_object_new_object();
	if (a.name)
		json_object_object_add(body, "name", json_object_new_string(a.name));
	path = cli_path("/v1/sandboxes", argv[optind], "/checkpoints");
	rc = call(&res, cfg, "POST", path, json_object_to_json_string(body), NULL);
	free(path);
	json_object_put(body);
	if (rc < 0)
		return CLI_FAIL;
	rc = CLI_OK;
	if (cli_output_is_doc(a.output))
		rc = cli_print_doc(a.output, res);
	else
		printf("%s\n", cli_field_text(res, "id"));
	json_object_put(res);
	return rc;
}

int cmd_checkpoint_ls(struct cli_config *cfg, int argc, char **argv)
{
	struct orc_buf path = ORC_BUF_INIT;
	json_object *items = NULL;
	struct ck_args a;
	size_t i;
	int rc;

	if ((rc = parse(&a, cfg, argc, argv, checkpoint_ls_usage, 0, 0)) != 0)
		return rc;
	orc_buf_adds(&path, "/v1/checkpoints");
	if (a.sandbox)
		cli_path_add_query(&path, "sandbox_id", a.sandbox);
	rc = cli_list_all(&items, cfg, orc_buf_cstr(&path), "checkpoints", 0, 100000, NULL);
	orc_buf_release(&path);
	if (rc < 0)
		return CLI_FAIL;
	rc = CLI_OK;
	if (cli_output_is_doc(a.output)) {
		rc = cli_print_doc(a.output, items);
	} else {
		if (cli_output_headers())
			printf("%-16s %-10s %-8s %12s  %s\n", "ID", "SANDBOX", "STATE", "BYTES", "CREATED");
		for (i = 0; i < json_object_array_length(items); i++)
			print_checkpoint_line(json_object_array_get_idx(items, i));
	}
	json_object_put(items);
	return rc;
}

int cmd_checkpoint_get(struct cli_config *cfg, int argc, char **argv)
{
	json_object *res = NULL;
	struct ck_args a;
	char *path;
	int rc;

	if ((rc = parse(&a, cfg, argc, argv, checkpoint_get_usage, 1, 1)) != 0)
		return rc;
	path = cli_path("/v1/checkpoints", argv[optind], NULL);
	rc = call(&res, cfg, "GET", path, NULL, NULL);
	free(path);
	if (rc < 0)
		return CLI_FAIL;
	rc = CLI_OK;
	if (cli_output_is_doc(a.output))
		rc = cli_print_doc(a.output, res);
	else
		print_checkpoint_line(res);
	json_object_put(res);
	return rc;
}

int cmd_checkpoint_rm(struct cli_config *cfg, int argc, char **argv)
{
	struct ck_args a;
	int rc, i, failed = 0;

	if ((rc = parse(&a, cfg, argc, argv, checkpoint_rm_usage, 1, -1)) != 0)
		return rc;
	for (i = optind; i < argc; i++) {
		json_object *res = NULL;
		char *path = cli_path("/v1/checkpoints", argv[i], NULL);
		if (call(&res, cfg, "DELETE", path, NULL, NULL) == 0)
			printf("%s\n", argv[i]);
		else
			failed = 1;
		json_object_put(res);
		free(path);
	}
	return failed ? CLI_FAIL : CLI_OK;
}

int cmd_fork(struct cli_config *cfg, int argc, char **argv)
{
	struct cli_response probe = CLI_RESPONSE_INIT;
	struct cli_request get = { "GET", NULL, NULL, NULL, 60, NULL, NULL };
	json_object *body, *res = NULL, *ids;
	char idem[33], *path;
	struct ck_args a;
	size_t i;
	int rc, is_ckpt;

	if ((rc = parse(&a, cfg, argc, argv, fork_usage, 1, 1)) != 0)
		return rc;
	/* A checkpoint id, else a sandbox id (always with --step). */
	is_ckpt = 0;
	if (a.step < 0) {
		path = cli_path("/v1/checkpoints", argv[optind], NULL);
		get.path = path;
		if (cli_http(&probe, cfg, &get) < 0) {
			free(path);
			return CLI_FAIL;
		}
		is_ckpt = probe.status == 200;
		cli_response_release(&probe);
		free(path);
	}
	path = is_ckpt ? cli_path("/v1/checkpoints", argv[optind], "/fork") :
		cli_path("/v1/sandboxes", argv[optind], "/fork");
	body = json_object_new_object();
	json_object_object_add(body, "count", json_object_new_int64(a.count));
	if (a.step >= 0)
		json_object_object_add(body, "step", json_object_new_int64(a.step));
	cli_new_idempotency_key(idem);
	rc = call(&res, cfg, "POST", path, json_object_to_json_string(body), idem);
	free(path);
	json_object_put(body);
	if (rc < 0)
		return CLI_FAIL;
	rc = CLI_OK;
	if (cli_output_is_doc(a.output)) {
		rc = cli_print_doc(a.output, res);
	} else if (json_object_object_get_ex(res, "sandbox_ids", &ids)) {
		for (i = 0; i < json_object_array_length(ids); i++)
			printf("%s\n", json_object_get_string(json_object_array_get_idx(ids, i)));
	}
	json_object_put(res);
	return rc;
}

static int pause_or_resume(struct cli_config *cfg, int argc, char **argv, const char *usage,
			   const char *what)
{
	json_object *res = NULL;
	struct ck_args a;
	char *path;
	int rc;

	if ((rc = parse(&a, cfg, argc, argv, usage, 1, 1)) != 0)
		return rc;
	path = cli_path("/v1/sandboxes", argv[optind], what);
	rc = call(&res, cfg, "POST", path, "{}", NULL);
	free(path);
	if (rc < 0)
		return CLI_FAIL;
	printf("%s\n", argv[optind]);
	json_object_put(res);
	return CLI_OK;
}

int cmd_pause(struct cli_config *cfg, int argc, char **argv)
{
	return pause_or_resume(cfg, argc, argv, pause_usage, "/pause");
}

int cmd_resume(struct cli_config *cfg, int argc, char **argv)
{
	return pause_or_resume(cfg, argc, argv, resume_usage, "/resume");
}
