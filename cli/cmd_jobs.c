/*
 * orchardctl jobs ls|get|wait|logs|cancel: the jobs exec creates.
 *
 *   ls SANDBOX   GET /v1/sandboxes/{id}/jobs (every page)
 *   get ID       GET /v1/jobs/{id}
 *   wait ID      GET /v1/jobs/{id}/wait until it finished
 *   logs ID      its stdout and stderr on ours
 *   cancel ID    POST /v1/jobs/{id}/cancel
 *
 * ls and cancel need routes that older servers lack: a 404 "no route" or a
 * 405 says so instead of looking like an unknown job.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "err.h"
#include "strutil.h"
#include "transfer.h"
#include "xalloc.h"

#define JOBS_MAX 10000
#define WAIT_MAX_S (7 * 86400)

const char jobs_usage[] =
	"usage: orchardctl jobs SUBCOMMAND [ARGS]\n"
	"\n"
	"Inspect the jobs that exec runs: list a sandbox's, show one, wait for one,\n"
	"print its output, cancel it.\n";

const char jobs_ls_usage[] =
	"usage: orchardctl jobs ls SANDBOX [-o FORMAT] [--no-headers]\n"
	"\n"
	"List a sandbox's jobs, oldest first: JOB ID, STATUS, EXIT, AGE, COMMAND.\n";

const char jobs_get_usage[] =
	"usage: orchardctl jobs get JOB [-o FORMAT] [--no-headers]\n"
	"\n"
	"Show a job: its fields (output as byte counts; see `jobs logs`), or with\n"
	"-o json, yaml or jsonpath=EXPR everything, output included.\n";

const char jobs_wait_usage[] =
	"usage: orchardctl jobs wait JOB [--timeout S] [-o FORMAT]\n"
	"\n"
	"Wait until a job finished and exit with its exit status (124 when it timed\n"
	"out). With --timeout, exits 125 if it is still running after S seconds.\n"
	"-o json, yaml or jsonpath=EXPR prints the finished job.\n";

const char jobs_logs_usage[] =
	"usage: orchardctl jobs logs JOB [-f]\n"
	"\n"
	"Write a job's stdout and stderr to ours. -f, --follow: as they are\n"
	"produced, until the job ends (a dropped connection is resumed where it\n"
	"stopped).\n";

const char jobs_cancel_usage[] =
	"usage: orchardctl jobs cancel JOB...\n"
	"\n"
	"Cancel queued or running jobs (a running command is killed). Prints each\n"
	"id. Exits 125 if any failed.\n";

enum { OPT_TIMEOUT = CLI_OPT_FIRST_FREE };

const struct option jobs_ls_opts[] = {
	CLI_COMMON_OPTIONS, CLI_OUTPUT_OPTIONS, { NULL, 0, NULL, 0 },
};
const struct option jobs_get_opts[] = {
	CLI_COMMON_OPTIONS, CLI_OUTPUT_OPTIONS, { NULL, 0, NULL, 0 },
};
const struct option jobs_wait_opts[] = {
	CLI_COMMON_OPTIONS,
	{ "timeout", required_argument, NULL, OPT_TIMEOUT },
	CLI_OUTPUT_OPTIONS,
	{ NULL, 0, NULL, 0 },
};
const struct option jobs_logs_opts[] = {
	CLI_COMMON_OPTIONS, { "follow", no_argument, NULL, 'f' }, { NULL, 0, NULL, 0 },
};

struct jobs_args {
	enum cli_output output;
	int64_t timeout;
	int follow;
};

/* The options of every jobs subcommand; exactly one operand unless many. */
static int parse_args(struct jobs_args *a, struct cli_config *cfg, int argc, char **argv,
		      const struct option *opts, const char *usage, int many)
{
	char name[32];
	int opt, rc;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "o:f", opts, NULL)) != -1) {
		switch (opt) {
		case 'o':
			snprintf(name, sizeof(name), "jobs %s", argv[0]);
			if ((rc = cli_output_arg(&a->output, optarg, name, usage, opts != jobs_wait_opts)) != 0)
				return rc;
			break;
		case 'f': a->follow = 1; break;
		case OPT_TIMEOUT:
			if (cli_parse_duration(&a->timeout, optarg, 1, WAIT_MAX_S) < 0)
				return cli_usage_error(usage, "jobs %s: --timeout wants 1s to 7d, not \"%s\"",
						       argv[0], optarg);
			break;
		default:
			if (cli_common_option(cfg, opt, optarg) < 0)
				return cli_bad_option(usage);
		}
	}
	if (many ? optind >= argc : argc - optind != 1)
		return cli_usage_error(usage, "jobs %s: expected %s", argv[0],
				       many ? "at least one JOB" : opts == jobs_ls_opts ? "one SANDBOX" : "one JOB");
	return cli_config_check(cfg);
}

static void not_supported(const char *what, const struct cli_config *cfg)
{
	cli_error("%s is not supported by this server (%s): it needs a newer orchard-api", what, cfg->url);
}

static int fetch_job(json_object **out, const struct cli_config *cfg, const char *id)
{
	struct cli_request req = { "GET", NULL, NULL, NULL, 60, NULL, NULL };
	char *path = cli_path("/v1/jobs", id, NULL);
	int err;

	req.path = path;
	if ((err = cli_call(out, cfg, &req)) == 0 && !json_object_is_type(*out, json_type_object)) {
		cli_error("unexpected response to GET %s: not an object", path);
		json_object_put(*out);
		err = ORC_ERROR;
	}
	free(path);
	return err;
}

int cmd_jobs_ls(struct cli_config *cfg, int argc, char **argv)
{
	struct jobs_args a = { CLI_OUT_TABLE, 0, 0 };
	json_object *jobs = NULL, *o;
	char *base;
	int rc, missing = 0;

	if ((rc = parse_args(&a, cfg, argc, argv, jobs_ls_opts, jobs_ls_usage, 0)) != 0)
		return rc;
	base = cli_path("/v1/sandboxes", argv[optind], "/jobs");
	rc = CLI_FAIL;
	if (cli_list_all(&jobs, cfg, base, "jobs", 0, JOBS_MAX, &missing) < 0) {
		if (missing)
			not_supported("listing jobs (GET /v1/sandboxes/{id}/jobs)", cfg);
		goto done;
	}
	rc = CLI_OK;
	if (cli_output_is_doc(a.output)) {
		o = json_object_new_object();
		json_object_object_add(o, "jobs", json_object_get(jobs));
		rc = cli_print_doc(a.output, o);
		json_object_put(o);
	} else {
		cli_job_table(jobs, 0);
	}
done:
	if (jobs)
		json_object_put(jobs);
	free(base);
	return rc;
}

/* jobs get: the fields, with the output streams as their sizes. */
static void print_job(json_object *job)
{
	static const char *const headers[] = { "FIELD", "VALUE" };
	struct cli_table t;
	char size[64];

	cli_table_init(&t, 2, headers);
	json_object_object_foreach(job, key, val) {
		const char *row[2] = { key, NULL };

		if ((!strcmp(key, "stdout") || !strcmp(key, "stderr")) && val &&
		    json_object_is_type(val, json_type_string)) {
			snprintf(size, sizeof(size), "(%d bytes; see jobs logs)", json_object_get_string_len(val));
			row[1] = size;
		} else {
			row[1] = cli_field_text(job, key);
		}
		cli_table_add(&t, row);
	}
	cli_table_print(&t);
	cli_table_release(&t);
}

int cmd_jobs_get(struct cli_config *cfg, int argc, char **argv)
{
	struct jobs_args a = { CLI_OUT_TABLE, 0, 0 };
	json_object *job = NULL;
	int rc;

	if ((rc = parse_args(&a, cfg, argc, argv, jobs_get_opts, jobs_get_usage, 0)) != 0)
		return rc;
	if (fetch_job(&job, cfg, argv[optind]) < 0)
		return CLI_FAIL;
	rc = CLI_OK;
	if (cli_output_is_doc(a.output))
		rc = cli_print_doc(a.output, job);
	else
		print_job(job);
	json_object_put(job);
	return rc;
}

int cmd_jobs_wait(struct cli_config *cfg, int argc, char **argv)
{
	struct jobs_args a = { CLI_OUT_DEFAULT, 0, 0 };
	json_object *job = NULL;
	int rc;

	if ((rc = parse_args(&a, cfg, argc, argv, jobs_wait_opts, jobs_wait_usage, 0)) != 0)
		return rc;
	/* Start from "queued": the first wait answers at once if it is done. */
	job = json_object_new_object();
	json_object_object_add(job, "job_id", json_object_new_string(argv[optind]));
	json_object_object_add(job, "status", json_object_new_string("queued"));
	rc = CLI_FAIL;
	if (cli_job_wait(&job, cfg, (long)a.timeout) < 0)
		goto done;
	if (cli_output_is_doc(a.output))
		(void)cli_print_doc(a.output, job);
	rc = cli_job_exit_status(job, 0);
done:
	json_object_put(job);
	return rc;
}

int cmd_jobs_logs(struct cli_config *cfg, int argc, char **argv)
{
	struct jobs_args a = { CLI_OUT_DEFAULT, 0, 0 };
	json_object *job = NULL;
	int rc;

	if ((rc = parse_args(&a, cfg, argc, argv, jobs_logs_opts, jobs_logs_usage, 0)) != 0)
		return rc;
	rc = CLI_FAIL;
	if (a.follow) {   /* as it is produced, surviving a dropped connection */
		rc = cli_job_follow(&job, cfg, argv[optind]) < 0 ? CLI_FAIL : CLI_OK;
		goto done;
	}
	if (fetch_job(&job, cfg, argv[optind]) < 0)
		goto done;
	if (cli_job_write_output(job, 0) < 0)
		goto done;
	if (!cli_job_is_done(job))
		cli_error("job %s is still %s: this is its output so far (-f waits for the end)",
			  argv[optind], cli_field_text(job, "status"));
	rc = CLI_OK;
done:
	if (job)
		json_object_put(job);
	return rc;
}

int cmd_jobs_cancel(struct cli_config *cfg, int argc, char **argv)
{
	struct jobs_args a = { CLI_OUT_DEFAULT, 0, 0 };
	char idem[33];
	struct cli_request req = { "POST", NULL, "{}", idem, 60, NULL, NULL };
	struct cli_response r = CLI_RESPONSE_INIT;
	int rc, failed = 0;
	char *path;

	if ((rc = parse_args(&a, cfg, argc, argv, common_opts, jobs_cancel_usage, 1)) != 0)
		return rc;
	for (; optind < argc; optind++) {
		/* Cancelling twice is cancelling once: safe to retry. */
		cli_new_idempotency_key(idem);
		path = cli_path("/v1/jobs", argv[optind], "/cancel");
		req.path = path;
		if (cli_http(&r, cfg, &req) < 0) {
			failed = 1;
		} else if (r.status >= 200 && r.status <= 299) {
			printf("%s\n", argv[optind]);
			fflush(stdout);
		} else {
			if (cli_route_missing(&r)) {
				not_supported("cancelling jobs (POST /v1/jobs/{id}/cancel)", cfg);
				optind = argc - 1;  /* the same for every other job */
			} else {
				cli_report_response(&r);
			}
			failed = 1;
		}
		cli_response_release(&r);
		free(path);
	}
	return failed ? CLI_FAIL : CLI_OK;
}
