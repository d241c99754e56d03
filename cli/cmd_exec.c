/*
 * orchardctl exec ID [--timeout S] [--cwd DIR] [-e K=V]... -- CMD [ARG...]
 *
 * The command goes as an argv array (never through a shell), with
 * wait: true and an Idempotency-Key, so the one retry after a connection
 * failure cannot run it twice. Its stdout and stderr are written to ours
 * byte for byte and its exit status becomes ours.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "err.h"
#include "strutil.h"
#include "xalloc.h"

#define EXEC_DEFAULT_TIMEOUT_S 300
#define EXEC_TIMEOUT_MAX_S 86400
/* How long past the command's own timeout we wait for the server. */
#define EXEC_MARGIN_S 60
#define JOB_WAIT_S 60
#define EXIT_TIMED_OUT 124

const char exec_usage[] =
	"usage: orchardctl exec ID [--timeout S] [--cwd DIR] [-e K=V]... -- CMD [ARG...]\n"
	"\n"
	"Run CMD with its arguments in sandbox ID (directly, not through a shell),\n"
	"write its stdout and stderr to ours and exit with its exit status.\n"
	"When it runs past its timeout it is killed and orchardctl exits 124.\n"
	"\n"
	"  --timeout S    kill the command after S seconds (default 300)\n"
	"  --cwd DIR      working directory (default /workspace)\n"
	"  -e, --env K=V  set an environment variable (repeatable)\n"
	"\n"
	"Examples:\n"
	"  orchardctl exec demo -- echo hi\n"
	"  orchardctl exec demo -- sh -c 'ls /workspace | wc -l'\n"
	"  orchardctl exec demo --timeout 10 -e DEBUG=1 --cwd /tmp -- make test\n";

enum { OPT_TIMEOUT = CLI_OPT_FIRST_FREE, OPT_CWD };

static int text_arg_ok(const char *s)
{
	return orc_utf8_valid(s, strlen(s));
}

static int add_env(json_object *env, const char *kv)
{
	const char *eq = strchr(kv, '=');
	char *key;

	if (!eq || eq == kv || !text_arg_ok(kv))
		return ORC_EINVALID;
	key = xstrndup(kv, (size_t)(eq - kv));
	json_object_object_add(env, key, json_object_new_string(eq + 1));
	free(key);
	return 0;
}

static int job_is_done(json_object *job)
{
	const char *st = cli_field_text(job, "status");

	return strcmp(st, "queued") && strcmp(st, "running");
}

/* Write a JSON string field's bytes (embedded NULs included) to f. */
static int write_stream(FILE *f, json_object *job, const char *key)
{
	json_object *v;
	size_t n;

	if (!json_object_object_get_ex(job, key, &v) || !json_object_is_type(v, json_type_string))
		return 0;
	n = (size_t)json_object_get_string_len(v);
	if (n && fwrite(json_object_get_string(v), 1, n, f) != n)
		return ORC_ERROR;
	return fflush(f) ? ORC_ERROR : 0;
}

static void warn_truncated(json_object *job, const char *stream)
{
	char flag[32], count[32];
	json_object *v;

	snprintf(flag, sizeof(flag), "%s_truncated", stream);
	snprintf(count, sizeof(count), "%s_bytes", stream);
	if (json_object_object_get_ex(job, flag, &v) && json_object_get_boolean(v))
		cli_error("%s was truncated by the server (%s bytes produced)", stream,
			  cli_field_text(job, count));
}

/* Poll GET /v1/jobs/{id}/wait until the job finished; *job is replaced. */
static int job_wait(json_object **job, const struct cli_config *cfg)
{
	struct cli_request req = { "GET", NULL, NULL, NULL, JOB_WAIT_S + 30 };
	char suffix[32];
	const char *id = cli_field_text(*job, "job_id");
	char *jid, *path = NULL;
	json_object *next;
	int err = 0;

	if (!strcmp(id, "-")) {
		cli_error("the server did not finish the command and gave no job_id to wait on");
		return ORC_ERROR;
	}
	jid = xstrdup(id);
	snprintf(suffix, sizeof(suffix), "/wait?timeout=%d", JOB_WAIT_S);
	path = cli_path("/v1/jobs", jid, suffix);
	req.path = path;
	while (!job_is_done(*job)) {
		next = NULL;
		if ((err = cli_call(&next, cfg, &req)) < 0)
			break;
		if (!json_object_is_type(next, json_type_object)) {
			json_object_put(next);
			cli_error("unexpected response while waiting for job %s", jid);
			err = ORC_ERROR;
			break;
		}
		json_object_put(*job);
		*job = next;
	}
	free(path);
	free(jid);
	return err;
}

/* The job's outcome as our exit status; output first, then any message. */
static int job_finish(json_object *job, long timeout_s)
{
	json_object *v;
	int64_t code;
	int timed_out = 0;

	if (write_stream(stdout, job, "stdout") < 0 || write_stream(stderr, job, "stderr") < 0) {
		cli_error("writing the command's output failed");
		return CLI_FAIL;
	}
	warn_truncated(job, "stdout");
	warn_truncated(job, "stderr");
	if (json_object_object_get_ex(job, "timed_out", &v) && json_object_get_boolean(v))
		timed_out = 1;
	if (timed_out) {
		if (json_object_object_get_ex(job, "timeout_seconds", &v) &&
		    json_object_is_type(v, json_type_int))
			timeout_s = (long)json_object_get_int64(v);
		cli_error("command timed out after %lds", timeout_s);
		return EXIT_TIMED_OUT;
	}
	if (json_object_object_get_ex(job, "exit_code", &v) && json_object_is_type(v, json_type_int)) {
		code = json_object_get_int64(v);
		return code >= 0 && code <= 255 ? (int)code : CLI_FAIL;
	}
	cli_error("the command did not run: %s",
		  strcmp(cli_field_text(job, "error"), "-") ? cli_field_text(job, "error") :
		  cli_field_text(job, "status"));
	return CLI_FAIL;
}

int cmd_exec(struct cli_config *cfg, int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_COMMON_OPTIONS,
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ "cwd", required_argument, NULL, OPT_CWD },
		{ "env", required_argument, NULL, 'e' },
		{ NULL, 0, NULL, 0 },
	};
	char idem[33];
	struct cli_request req = { "POST", NULL, NULL, idem, 0 };
	json_object *body = json_object_new_object(), *env = json_object_new_object();
	json_object *cmd = json_object_new_array(), *job = NULL;
	const char *id = NULL, *cwd = NULL;
	int64_t timeout = 0;
	char *path = NULL;
	int opt, rc = CLI_USAGE, have_env = 0;

	/*
	 * "+": options stop at the first non-option. The first one is ID;
	 * options may follow it; then "--" or the first non-option starts CMD.
	 */
	optind = 0;
	for (;;) {
		while ((opt = getopt_long(argc, argv, "+e:", opts, NULL)) != -1) {
			switch (opt) {
			case OPT_TIMEOUT:
				if (orc_parse_i64(&timeout, optarg, 1, EXEC_TIMEOUT_MAX_S) < 0) {
					rc = cli_usage_error(exec_usage, "exec: --timeout wants seconds (1-%d), not \"%s\"",
							     EXEC_TIMEOUT_MAX_S, optarg);
					goto done;
				}
				break;
			case OPT_CWD:
				if (!*optarg || !text_arg_ok(optarg)) {
					rc = cli_usage_error(exec_usage, "exec: invalid --cwd");
					goto done;
				}
				cwd = optarg;
				break;
			case 'e':
				if (add_env(env, optarg) < 0) {
					rc = cli_usage_error(exec_usage, "exec: -e wants K=V, not \"%s\"", optarg);
					goto done;
				}
				have_env = 1;
				break;
			default:
				if (cli_common_option(cfg, opt, optarg) < 0) {
					rc = cli_bad_option(exec_usage);
					goto done;
				}
			}
		}
		if (id || optind >= argc || !strcmp(argv[optind - 1], "--"))
			break;
		id = argv[optind++];
	}
	if (!id) {
		rc = cli_usage_error(exec_usage, "exec: expected a sandbox ID and a command");
		goto done;
	}
	if (optind >= argc) {
		rc = cli_usage_error(exec_usage, "exec: expected a command after the ID (exec %s -- CMD...)", id);
		goto done;
	}
	for (; optind < argc; optind++) {
		if (!text_arg_ok(argv[optind])) {
			rc = cli_usage_error(exec_usage, "exec: argument %d is not valid UTF-8", optind);
			goto done;
		}
		json_object_array_add(cmd, json_object_new_string(argv[optind]));
	}
	if ((rc = cli_config_check(cfg)) != 0)
		goto done;

	json_object_object_add(body, "command", json_object_get(cmd));
	json_object_object_add(body, "wait", json_object_new_boolean(1));
	if (timeout)
		json_object_object_add(body, "timeout_seconds", json_object_new_int64(timeout));
	if (cwd)
		json_object_object_add(body, "cwd", json_object_new_string(cwd));
	if (have_env)
		json_object_object_add(body, "env", json_object_get(env));
	if (!timeout)
		timeout = EXEC_DEFAULT_TIMEOUT_S;
	cli_new_idempotency_key(idem);
	path = cli_path("/v1/sandboxes", id, "/exec");
	req.path = path;
	req.body = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	req.timeout_s = (long)timeout + EXEC_MARGIN_S;

	rc = CLI_FAIL;
	if (cli_call(&job, cfg, &req) < 0)
		goto done;
	if (!json_object_is_type(job, json_type_object)) {
		cli_error("unexpected response to exec: not an object");
		goto done;
	}
	/* The server's wait may give up before the command ends. */
	if (!job_is_done(job) && job_wait(&job, cfg) < 0)
		goto done;
	rc = job_finish(job, (long)timeout);
done:
	if (job)
		json_object_put(job);
	json_object_put(cmd);
	json_object_put(env);
	json_object_put(body);
	free(path);
	return rc;
}
