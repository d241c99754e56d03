/*
 * Sandbox lifecycle: create, ls, get, wait, rm.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "err.h"
#include "strutil.h"
#include "xalloc.h"

#define WAIT_DEFAULT_S 300
#define TIMEOUT_MAX_S 86400

const char create_usage[] =
	"usage: orchardctl create [IMAGE] [--wait] [--cpu N] [--memory SIZE]\n"
	"                         [--network|--no-network] [--name ID] [--timeout S] [-o json]\n"
	"\n"
	"Create a sandbox and print its id (the whole sandbox object with -o json).\n"
	"\n"
	"  IMAGE            the image; \"host\" (the default) is the host's own system\n"
	"  --wait           wait until it is ready; a failure exits 1 with its reason\n"
	"  --cpu N          CPUs, e.g. 2, 0.5 or 500m\n"
	"  --memory SIZE    memory, e.g. 512Mi or 4Gi\n"
	"  --no-network     no network but loopback (the server's default)\n"
	"  --network        allow network access\n"
	"  --name ID        choose the id (a DNS label: a-z, 0-9, '-'; at most 63)\n"
	"  --timeout S      seconds to become ready (also how long --wait waits;\n"
	"                   default 300 for --wait)\n"
	"  -o json          print the sandbox as JSON\n"
	"\n"
	"Examples:\n"
	"  orchardctl create --wait\n"
	"  ID=$(orchardctl create host --cpu 1 --memory 1Gi --name demo --wait)\n";

const char ls_usage[] =
	"usage: orchardctl ls [-o table|json]\n"
	"\n"
	"List your sandboxes: ID, IMAGE, STATUS, CPU, MEMORY, AGE.\n"
	"\n"
	"Examples:\n"
	"  orchardctl ls\n"
	"  orchardctl ls -o json\n";

const char get_usage[] =
	"usage: orchardctl get ID [-o json]\n"
	"\n"
	"Show one sandbox.\n"
	"\n"
	"Example:\n"
	"  orchardctl get demo -o json\n";

const char wait_usage[] =
	"usage: orchardctl wait ID [--timeout S] [-o json]\n"
	"\n"
	"Wait until a sandbox is ready (default: up to 300 s). Exits 1 with the\n"
	"reason when it failed or did not become ready in time.\n"
	"\n"
	"Example:\n"
	"  orchardctl wait demo --timeout 60\n";

const char rm_usage[] =
	"usage: orchardctl rm ID...\n"
	"\n"
	"Delete sandboxes; prints each id as it is deleted. Deleting a sandbox\n"
	"that is already gone succeeds. Exits 1 if any deletion failed.\n"
	"\n"
	"Example:\n"
	"  orchardctl rm demo other\n";

enum { OPT_WAIT = CLI_OPT_FIRST_FREE, OPT_CPU, OPT_MEMORY, OPT_NETWORK, OPT_NO_NETWORK,
       OPT_NAME, OPT_TIMEOUT };

static int is_ready(json_object *sb)
{
	json_object *v;

	if (json_object_object_get_ex(sb, "ready", &v) && json_object_is_type(v, json_type_boolean) &&
	    json_object_get_boolean(v))
		return 1;
	return !strcmp(cli_field_text(sb, "status"), "ready");
}

static int is_failed(json_object *sb)
{
	const char *st = cli_field_text(sb, "status");

	return !strcmp(st, "failed") || !strcmp(st, "not_found");
}

/*
 * Wait until the sandbox is ready, for at most timeout_s. *out gets the
 * final sandbox object. A failed or late sandbox is reported; each server
 * wait is bounded, and a server that gives up early is asked again.
 */
static int sandbox_wait(json_object **out, const struct cli_config *cfg, const char *id, long timeout_s)
{
	struct cli_response r = CLI_RESPONSE_INIT;
	int64_t deadline = orc_mono_ms() + timeout_s * 1000, left;
	struct cli_request req = { "GET", NULL, NULL, NULL, 0 };
	char *path = NULL, suffix[64];
	json_object *sb = NULL;
	int err;

	for (;;) {
		left = (deadline - orc_mono_ms() + 999) / 1000;
		if (left <= 0) {
			cli_error("sandbox %s is not ready after %lds (status: %s)", id, timeout_s,
				  sb ? cli_field_text(sb, "status") : "pending");
			err = ORC_ETIMEOUT;
			goto done;
		}
		snprintf(suffix, sizeof(suffix), "/wait?timeout=%lld", (long long)left);
		free(path);
		path = cli_path("/v1/sandboxes", id, suffix);
		req.path = path;
		req.timeout_s = (long)left + 30;
		cli_response_release(&r);
		if ((err = cli_http(&r, cfg, &req)) < 0)
			goto done;
		if (r.status == 408) {
			/* The server's wait ran out; the loop decides whether ours did. */
		} else if (r.status < 200 || r.status > 299) {
			cli_report_response(&r);
			err = ORC_ERROR;
			goto done;
		} else if (!r.json || !json_object_is_type(r.json, json_type_object)) {
			cli_error("unexpected response to wait for %s (HTTP %ld)", id, r.status);
			err = ORC_ERROR;
			goto done;
		} else {
			if (sb)
				json_object_put(sb);
			sb = json_object_get(r.json);
			if (is_ready(sb))
				break;
			if (is_failed(sb)) {
				cli_error("sandbox %s failed: %s", id,
					  strcmp(cli_field_text(sb, "status_message"), "-") ?
					  cli_field_text(sb, "status_message") : "no reason given");
				err = ORC_ERROR;
				goto done;
			}
		}
		/* Not ready yet and the server returned early: do not spin. */
		if (deadline - orc_mono_ms() > 1000)
			sleep(1);
	}
	*out = sb;
	sb = NULL;
	err = 0;
done:
	if (sb)
		json_object_put(sb);
	cli_response_release(&r);
	free(path);
	return err;
}

static int parse_timeout(long *out, const char *arg)
{
	int64_t v;

	if (orc_parse_i64(&v, arg, 1, TIMEOUT_MAX_S) < 0)
		return ORC_EINVALID;
	*out = (long)v;
	return 0;
}

int cmd_create(struct cli_config *cfg, int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_COMMON_OPTIONS,
		{ "wait", no_argument, NULL, OPT_WAIT },
		{ "cpu", required_argument, NULL, OPT_CPU },
		{ "memory", required_argument, NULL, OPT_MEMORY },
		{ "network", no_argument, NULL, OPT_NETWORK },
		{ "no-network", no_argument, NULL, OPT_NO_NETWORK },
		{ "name", required_argument, NULL, OPT_NAME },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ "output", required_argument, NULL, 'o' },
		{ NULL, 0, NULL, 0 },
	};
	char idem[33];
	struct cli_request req = { "POST", "/v1/sandboxes", NULL, idem, 60 };
	enum cli_output output = CLI_OUT_DEFAULT;
	const char *image = "host", *cpu = NULL, *memory = NULL, *name = NULL;
	json_object *body = json_object_new_object(), *sb = NULL, *ready = NULL;
	int opt, do_wait = 0, network = -1, rc;
	long timeout_s = 0;
	int64_t num;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "o:", opts, NULL)) != -1) {
		switch (opt) {
		case OPT_WAIT: do_wait = 1; break;
		case OPT_CPU: cpu = optarg; break;
		case OPT_MEMORY: memory = optarg; break;
		case OPT_NETWORK: network = 1; break;
		case OPT_NO_NETWORK: network = 0; break;
		case OPT_NAME: name = optarg; break;
		case OPT_TIMEOUT:
			if (parse_timeout(&timeout_s, optarg) < 0) {
				rc = cli_usage_error(create_usage, "create: --timeout wants seconds (1-%d), not \"%s\"",
						     TIMEOUT_MAX_S, optarg);
				goto done;
			}
			break;
		case 'o':
			if (cli_parse_output(&output, optarg) < 0) {
				rc = cli_usage_error(create_usage, "create: -o wants json, not \"%s\"", optarg);
				goto done;
			}
			break;
		default:
			if (cli_common_option(cfg, opt, optarg) < 0) {
				rc = cli_bad_option(create_usage);
				goto done;
			}
		}
	}
	if (argc - optind > 1) {
		rc = cli_usage_error(create_usage, "create: expected at most one IMAGE");
		goto done;
	}
	if (optind < argc)
		image = argv[optind];
	if (!*image || strlen(image) > 1024 || !orc_utf8_valid(image, strlen(image))) {
		rc = cli_usage_error(create_usage, "create: invalid IMAGE");
		goto done;
	}
	if (cpu && orc_parse_cpu(&num, cpu) < 0) {
		rc = cli_usage_error(create_usage, "create: --cpu wants e.g. 2, 0.5 or 500m, not \"%s\"", cpu);
		goto done;
	}
	if (memory && orc_parse_memory(&num, memory) < 0) {
		rc = cli_usage_error(create_usage, "create: --memory wants e.g. 512Mi or 4Gi, not \"%s\"", memory);
		goto done;
	}
	if (name && !orc_is_dns_label(name)) {
		rc = cli_usage_error(create_usage, "create: --name \"%s\" is not a DNS label "
				     "(a-z, 0-9 and '-', at most 63, no '-' at either end)", name);
		goto done;
	}
	if ((rc = cli_config_check(cfg)) != 0)
		goto done;

	json_object_object_add(body, "image", json_object_new_string(image));
	if (cpu)
		json_object_object_add(body, "cpu", json_object_new_string(cpu));
	if (memory)
		json_object_object_add(body, "memory", json_object_new_string(memory));
	if (network >= 0)
		json_object_object_add(body, "block_network", json_object_new_boolean(!network));
	if (name)
		json_object_object_add(body, "sandbox_id", json_object_new_string(name));
	if (timeout_s)
		json_object_object_add(body, "timeout", json_object_new_int64(timeout_s));
	req.body = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	cli_new_idempotency_key(idem);

	rc = CLI_FAIL;
	if (cli_call(&sb, cfg, &req) < 0)
		goto done;
	if (!json_object_is_type(sb, json_type_object) || !strcmp(cli_field_text(sb, "sandbox_id"), "-")) {
		cli_error("unexpected response to create: no sandbox_id");
		goto done;
	}
	if (do_wait) {
		if (sandbox_wait(&ready, cfg, cli_field_text(sb, "sandbox_id"),
				 timeout_s ? timeout_s : WAIT_DEFAULT_S) < 0)
			goto done;
		json_object_put(sb);
		sb = ready;
	}
	if (output == CLI_OUT_JSON)
		cli_print_json(sb);
	else
		printf("%s\n", cli_field_text(sb, "sandbox_id"));
	rc = CLI_OK;
done:
	if (sb)
		json_object_put(sb);
	json_object_put(body);
	return rc;
}

/* GET /v1/sandboxes answers an array or an object holding one. */
static json_object *sandbox_items(json_object *list)
{
	static const char *const keys[] = { "sandboxes", "items", "data" };
	json_object *v;
	size_t i;

	if (json_object_is_type(list, json_type_array))
		return list;
	for (i = 0; i < sizeof(keys) / sizeof(*keys); i++)
		if (json_object_object_get_ex(list, keys[i], &v) && json_object_is_type(v, json_type_array))
			return v;
	return NULL;
}

int cmd_ls(struct cli_config *cfg, int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_COMMON_OPTIONS,
		{ "output", required_argument, NULL, 'o' },
		{ NULL, 0, NULL, 0 },
	};
	static const char *const headers[] = { "ID", "IMAGE", "STATUS", "CPU", "MEMORY", "AGE" };
	struct cli_request req = { "GET", "/v1/sandboxes", NULL, NULL, 60 };
	enum cli_output output = CLI_OUT_TABLE;
	struct cli_table t;
	json_object *list = NULL, *items, *sb, *created;
	char age[32];
	size_t i, n;
	int opt, rc;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "o:", opts, NULL)) != -1) {
		if (opt == 'o') {
			if (cli_parse_output(&output, optarg) < 0)
				return cli_usage_error(ls_usage, "ls: -o wants table or json, not \"%s\"", optarg);
		} else if (cli_common_option(cfg, opt, optarg) < 0) {
			return cli_bad_option(ls_usage);
		}
	}
	if (optind < argc)
		return cli_usage_error(ls_usage, "ls: unexpected argument \"%s\"", argv[optind]);
	if ((rc = cli_config_check(cfg)) != 0)
		return rc;
	if (cli_call(&list, cfg, &req) < 0)
		return CLI_FAIL;
	if (!(items = sandbox_items(list))) {
		cli_error("unexpected response to GET /v1/sandboxes: no list of sandboxes");
		json_object_put(list);
		return CLI_FAIL;
	}
	if (output == CLI_OUT_JSON) {
		cli_print_json(list);
		json_object_put(list);
		return CLI_OK;
	}
	cli_table_init(&t, 6, headers);
	n = json_object_array_length(items);
	for (i = 0; i < n; i++) {
		const char *row[6];

		sb = json_object_array_get_idx(items, i);
		created = NULL;
		if (sb && json_object_is_type(sb, json_type_object))
			json_object_object_get_ex(sb, "created_at", &created);
		cli_format_age(age, sizeof(age), created);
		row[0] = cli_field_text(sb, "sandbox_id");
		row[1] = cli_field_text(sb, "image");
		row[2] = cli_field_text(sb, "status");
		row[3] = cli_field_text(sb, "cpu");
		row[4] = cli_field_text(sb, "memory");
		row[5] = age;
		cli_table_add(&t, row);
	}
	cli_table_print(&t);
	cli_table_release(&t);
	json_object_put(list);
	return CLI_OK;
}

/* get: "field: value" lines in the server's order; nested values as JSON. */
static void print_fields(json_object *sb)
{
	struct cli_table t;
	static const char *const headers[] = { "FIELD", "VALUE" };

	cli_table_init(&t, 2, headers);
	json_object_object_foreach(sb, key, val) {
		const char *row[2] = { key, NULL };

		(void)val;
		row[1] = cli_field_text(sb, key);
		cli_table_add(&t, row);
	}
	cli_table_print(&t);
	cli_table_release(&t);
}

int cmd_get(struct cli_config *cfg, int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_COMMON_OPTIONS,
		{ "output", required_argument, NULL, 'o' },
		{ NULL, 0, NULL, 0 },
	};
	struct cli_request req = { "GET", NULL, NULL, NULL, 60 };
	enum cli_output output = CLI_OUT_TABLE;
	json_object *sb = NULL;
	char *path;
	int opt, rc;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "o:", opts, NULL)) != -1) {
		if (opt == 'o') {
			if (cli_parse_output(&output, optarg) < 0)
				return cli_usage_error(get_usage, "get: -o wants json, not \"%s\"", optarg);
		} else if (cli_common_option(cfg, opt, optarg) < 0) {
			return cli_bad_option(get_usage);
		}
	}
	if (argc - optind != 1)
		return cli_usage_error(get_usage, "get: expected one ID");
	if ((rc = cli_config_check(cfg)) != 0)
		return rc;
	path = cli_path("/v1/sandboxes", argv[optind], NULL);
	req.path = path;
	rc = CLI_FAIL;
	if (cli_call(&sb, cfg, &req) < 0)
		goto done;
	if (!json_object_is_type(sb, json_type_object)) {
		cli_error("unexpected response to get: not an object");
		goto done;
	}
	if (output == CLI_OUT_JSON)
		cli_print_json(sb);
	else
		print_fields(sb);
	rc = CLI_OK;
done:
	if (sb)
		json_object_put(sb);
	free(path);
	return rc;
}

int cmd_wait(struct cli_config *cfg, int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_COMMON_OPTIONS,
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ "output", required_argument, NULL, 'o' },
		{ NULL, 0, NULL, 0 },
	};
	enum cli_output output = CLI_OUT_DEFAULT;
	long timeout_s = WAIT_DEFAULT_S;
	json_object *sb = NULL;
	int opt, rc;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "o:", opts, NULL)) != -1) {
		if (opt == 'o') {
			if (cli_parse_output(&output, optarg) < 0)
				return cli_usage_error(wait_usage, "wait: -o wants json, not \"%s\"", optarg);
		} else if (opt == OPT_TIMEOUT) {
			if (parse_timeout(&timeout_s, optarg) < 0)
				return cli_usage_error(wait_usage, "wait: --timeout wants seconds (1-%d), not \"%s\"",
						       TIMEOUT_MAX_S, optarg);
		} else if (cli_common_option(cfg, opt, optarg) < 0) {
			return cli_bad_option(wait_usage);
		}
	}
	if (argc - optind != 1)
		return cli_usage_error(wait_usage, "wait: expected one ID");
	if ((rc = cli_config_check(cfg)) != 0)
		return rc;
	if (sandbox_wait(&sb, cfg, argv[optind], timeout_s) < 0)
		return CLI_FAIL;
	if (output == CLI_OUT_JSON)
		cli_print_json(sb);
	else
		printf("%s\n", argv[optind]);
	json_object_put(sb);
	return CLI_OK;
}

int cmd_rm(struct cli_config *cfg, int argc, char **argv)
{
	static const struct option opts[] = { CLI_COMMON_OPTIONS, { NULL, 0, NULL, 0 } };
	struct cli_request req = { "DELETE", NULL, NULL, NULL, 60 };
	json_object *res;
	char *path;
	int opt, rc, failed = 0;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1)
		if (cli_common_option(cfg, opt, optarg) < 0)
			return cli_bad_option(rm_usage);
	if (optind >= argc)
		return cli_usage_error(rm_usage, "rm: expected at least one ID");
	if ((rc = cli_config_check(cfg)) != 0)
		return rc;
	for (; optind < argc; optind++) {
		path = cli_path("/v1/sandboxes", argv[optind], NULL);
		req.path = path;
		res = NULL;
		if (cli_call(&res, cfg, &req) < 0) {
			failed = 1;
		} else {
			printf("%s\n", argv[optind]);
			fflush(stdout);
		}
		if (res)
			json_object_put(res);
		free(path);
	}
	return failed ? CLI_FAIL : CLI_OK;
}
