/*
 * orchardctl get ID: the sandbox's fields (GET /v1/sandboxes/{id}).
 * orchardctl describe ID: a summary for people, with its recent jobs
 * (GET /v1/sandboxes/{id}/jobs, where the server has it).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "err.h"
#include "xalloc.h"

#define DESCRIBE_JOBS 5
#define DESCRIBE_JOBS_SCAN 1000

const char get_usage[] =
	"usage: orchardctl get ID [-o FORMAT] [--no-headers]\n"
	"\n"
	"Show one sandbox: every field the server returns (FIELD VALUE lines), or\n"
	"with -o json, yaml or jsonpath=EXPR the object.\n";

const char describe_usage[] =
	"usage: orchardctl describe ID\n"
	"\n"
	"Show one sandbox for people: status, resources, network, lifetimes,\n"
	"labels, environment variable names (not values) and its recent jobs.\n";

const struct option get_opts[] = {
	CLI_COMMON_OPTIONS,
	CLI_OUTPUT_OPTIONS,
	{ NULL, 0, NULL, 0 },
};
const struct option describe_opts[] = { CLI_COMMON_OPTIONS, { NULL, 0, NULL, 0 } };

static int fetch_sandbox(json_object **out, struct cli_config *cfg, const char *id)
{
	struct cli_request req = { "GET", NULL, NULL, NULL, 60, NULL, NULL };
	json_object *sb = NULL;
	char *path = cli_path("/v1/sandboxes", id, NULL);
	int err;

	req.path = path;
	if ((err = cli_call(&sb, cfg, &req)) < 0)
		goto done;
	if (!json_object_is_type(sb, json_type_object)) {
		cli_error("unexpected response to GET %s: not an object", path);
		json_object_put(sb);
		err = ORC_ERROR;
		goto done;
	}
	*out = sb;
done:
	free(path);
	return err;
}

/* get: FIELD VALUE lines in the server's order; nested values as JSON. */
static void print_fields(json_object *sb)
{
	static const char *const headers[] = { "FIELD", "VALUE" };
	struct cli_table t;

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
	enum cli_output output = CLI_OUT_TABLE;
	json_object *sb = NULL;
	int opt, rc;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "o:", get_opts, NULL)) != -1) {
		if (opt == 'o') {
			if ((rc = cli_output_arg(&output, optarg, "get", get_usage, 1)) != 0)
				return rc;
		} else if (cli_common_option(cfg, opt, optarg) < 0) {
			return cli_bad_option(get_usage);
		}
	}
	if (argc - optind != 1)
		return cli_usage_error(get_usage, "get: expected one ID");
	if ((rc = cli_config_check(cfg)) != 0)
		return rc;
	if (fetch_sandbox(&sb, cfg, argv[optind]) < 0)
		return CLI_FAIL;
	rc = CLI_OK;
	if (cli_output_is_doc(output))
		rc = cli_print_doc(output, sb);
	else
		print_fields(sb);
	json_object_put(sb);
	return rc;
}

static void line(const char *label, const char *value)
{
	char cell[1024], *p;

	/* No control characters from the server on a terminal. */
	snprintf(cell, sizeof(cell), "%s", value && *value ? value : "-");
	for (p = cell; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	printf("%-16s %s\n", label, cell);
}

/* key's time with its age; text_key names the field shown as text (the
 * ISO twin of an epoch field), or is key itself. */
static void time_line(const char *label, json_object *sb, const char *key, const char *text_key)
{
	char age[32], text[160];
	json_object *v = NULL;

	json_object_object_get_ex(sb, key, &v);
	if (!v) {
		line(label, "-");
		return;
	}
	cli_format_age(age, sizeof(age), v);
	snprintf(text, sizeof(text), "%s (%s ago)", cli_field_text(sb, text_key), age);
	line(label, text);
}

static void duration_line(const char *label, json_object *sb, const char *key, const char *unset)
{
	char text[32];
	json_object *v;

	if (json_object_object_get_ex(sb, key, &v) && json_object_is_type(v, json_type_int)) {
		cli_format_duration(text, sizeof(text), json_object_get_int64(v));
		line(label, text);
	} else {
		line(label, unset);
	}
}

/* "Labels:  a=1" then one per line; env shows names only (values may be secrets). */
static void map_lines(const char *label, json_object *sb, const char *key, int values)
{
	struct orc_buf b = ORC_BUF_INIT;
	json_object *m;
	int first = 1;

	if (!json_object_object_get_ex(sb, key, &m) || !json_object_is_type(m, json_type_object) ||
	    json_object_object_length(m) == 0) {
		line(label, "-");
		return;
	}
	json_object_object_foreach(m, k, v) {
		orc_buf_reset(&b);
		if (values)
			orc_buf_addf(&b, "%s=%s", k, v ? json_object_get_string(v) : "");
		else
			orc_buf_adds(&b, k);
		line(first ? label : "", orc_buf_cstr(&b));
		first = 0;
	}
	orc_buf_release(&b);
}

static void describe_jobs(struct cli_config *cfg, const char *id)
{
	json_object *jobs = NULL;
	int missing = 0;
	char *base = cli_path("/v1/sandboxes", id, "/jobs");

	printf("\nRecent jobs:\n");
	if (cli_list_all(&jobs, cfg, base, "jobs", 0, DESCRIBE_JOBS_SCAN, &missing) < 0) {
		if (missing)
			printf("  (this server does not list jobs)\n");
	} else if (json_object_array_length(jobs) == 0) {
		printf("  (none)\n");
	} else {
		cli_job_table(jobs, DESCRIBE_JOBS);
	}
	if (jobs)
		json_object_put(jobs);
	free(base);
}

int cmd_describe(struct cli_config *cfg, int argc, char **argv)
{
	json_object *sb = NULL, *v;
	char res[128];
	int opt, rc;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "", describe_opts, NULL)) != -1)
		if (cli_common_option(cfg, opt, optarg) < 0)
			return cli_bad_option(describe_usage);
	if (argc - optind != 1)
		return cli_usage_error(describe_usage, "describe: expected one ID");
	if ((rc = cli_config_check(cfg)) != 0)
		return rc;
	if (fetch_sandbox(&sb, cfg, argv[optind]) < 0)
		return CLI_FAIL;
	line("Sandbox:", cli_field_text(sb, "sandbox_id"));
	line("Namespace:", cli_field_text(sb, "namespace"));
	line("Image:", cli_field_text(sb, "image"));
	line("Status:", cli_field_text(sb, "status"));
	if (strcmp(cli_field_text(sb, "status_message"), "-"))
		line("Message:", cli_field_text(sb, "status_message"));
	snprintf(res, sizeof(res), "%s CPU, %s memory", cli_field_text(sb, "cpu"), cli_field_text(sb, "memory"));
	line("Resources:", res);
	v = NULL;
	json_object_object_get_ex(sb, "block_network", &v);
	line("Network:", !v ? "-" : json_object_get_boolean(v) ? "blocked (loopback only)" : "open");
	line("Workdir:", cli_field_text(sb, "workdir"));
	time_line("Created:", sb, "created_at", "created_at_iso");
	time_line("Ready since:", sb, "ready_at", "ready_at");
	time_line("Last heartbeat:", sb, "last_heartbeat_at", "last_heartbeat_at");
	duration_line("TTL:", sb, "ttl_seconds", "server default");
	duration_line("Idle timeout:", sb, "idle_timeout_seconds", "server default");
	map_lines("Labels:", sb, "labels", 1);
	map_lines("Env:", sb, "env", 0);
	fflush(stdout);
	describe_jobs(cfg, argv[optind]);
	json_object_put(sb);
	return CLI_OK;
}
