/*
 * orchardctl exec ID [flags] -- CMD [ARG...]
 *
 * The command goes as an argv array (never through a shell; with --login as
 * one bash script), with wait: true and an Idempotency-Key, so a retry
 * after a connection failure cannot run it twice. Its stdout and stderr are
 * written to ours byte for byte and its exit status becomes ours. stdin,
 * when it is not a terminal, is read to its end and sent along. With -t it
 * runs interactively on the PTY WebSocket instead (shell.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "err.h"
#include "strutil.h"
#include "transfer.h"
#include "xalloc.h"

#define EXEC_DEFAULT_TIMEOUT_S 300
#define EXEC_TIMEOUT_MAX_S 86400
/* How long past the command's own timeout we wait for the server. */
#define EXEC_MARGIN_S 60
/* The API's limit on one command's stdin. */
#define STDIN_MAX ((size_t)8 << 20)

const char exec_usage[] =
	"usage: orchardctl exec ID [--timeout S] [-w DIR] [-e K=V]... [--login]\n"
	"                          [--detach] [-n] [-t] -- CMD [ARG...]\n"
	"\n"
	"Run CMD with its arguments in sandbox ID (directly, not through a shell),\n"
	"write its stdout and stderr to ours as it writes them, and exit with its\n"
	"exit status.\n"
	"When it runs past its timeout it is killed and orchardctl exits 124.\n"
	"When stdin is not a terminal it is sent to the command (up to 8 MiB of\n"
	"UTF-8 text).\n"
	"\n"
	"  --timeout S        kill the command after S seconds (or 10m, 1h; default 300)\n"
	"  -w, --workdir DIR  working directory (default: the sandbox's, /workspace)\n"
	"  --cwd DIR          the same as --workdir\n"
	"  -e, --env K=V      set an environment variable (repeatable)\n"
	"  --login            run through bash as a login shell that reads ~/.bashrc;\n"
	"                     one ARG is a script, several are quoted and joined\n"
	"  -d, --detach       do not wait: print the job id (see `orchardctl jobs`)\n"
	"  -n, --no-stdin     do not read stdin (like ssh -n, for loops over stdin)\n"
	"  -t, --tty          run it interactively on a terminal, as `orchardctl shell\n"
	"                     ID -- CMD` does (no --timeout or --detach)\n";

enum { OPT_TIMEOUT = CLI_OPT_FIRST_FREE, OPT_LOGIN };

const struct option exec_opts[] = {
	CLI_COMMON_OPTIONS,
	{ "timeout", required_argument, NULL, OPT_TIMEOUT },
	{ "cwd", required_argument, NULL, 'w' },
	{ "workdir", required_argument, NULL, 'w' },
	{ "env", required_argument, NULL, 'e' },
	{ "login", no_argument, NULL, OPT_LOGIN },
	{ "detach", no_argument, NULL, 'd' },
	{ "no-stdin", no_argument, NULL, 'n' },
	{ "tty", no_argument, NULL, 't' },
	{ NULL, 0, NULL, 0 },
};

struct exec_args {
	const char *id, *cwd;
	int64_t timeout;             /* 0: the server's default */
	int login, detach, no_stdin, tty;
	json_object *env;            /* NULL: none */
	int cmd_start;               /* argv index of CMD */
};

/*
 * "+": options stop at the first non-option. The first one is ID; options
 * may follow it; then "--" or the first non-option starts CMD.
 */
static int parse_args(struct exec_args *a, struct cli_config *cfg, int argc, char **argv)
{
	int opt;

	optind = 0;
	for (;;) {
		while ((opt = getopt_long(argc, argv, "+e:w:dnt", exec_opts, NULL)) != -1) {
			switch (opt) {
			case OPT_TIMEOUT:
				if (cli_parse_duration(&a->timeout, optarg, 1, EXEC_TIMEOUT_MAX_S) < 0)
					return cli_usage_error(exec_usage, "exec: --timeout wants 1s to 1d, not \"%s\"",
							       optarg);
				break;
			case 'w':
				if (!*optarg || !orc_utf8_valid(optarg, strlen(optarg)))
					return cli_usage_error(exec_usage, "exec: invalid --workdir");
				a->cwd = optarg;
				break;
			case 'e':
				if (!a->env)
					a->env = json_object_new_object();
				if (cli_kv_add(a->env, optarg) < 0)
					return cli_usage_error(exec_usage, "exec: -e wants K=V, not \"%s\"", optarg);
				break;
			case OPT_LOGIN: a->login = 1; break;
			case 'd': a->detach = 1; break;
			case 'n': a->no_stdin = 1; break;
			case 't': a->tty = 1; break;
			default:
				if (cli_common_option(cfg, opt, optarg) < 0)
					return cli_bad_option(exec_usage);
			}
		}
		if (a->id || optind >= argc || !strcmp(argv[optind - 1], "--"))
			break;
		a->id = argv[optind++];
	}
	if (!a->id)
		return cli_usage_error(exec_usage, "exec: expected a sandbox ID and a command");
	if (optind >= argc)
		return cli_usage_error(exec_usage, "exec: expected a command after the ID (exec %s -- CMD...)",
				       a->id);
	if (a->tty && (a->detach || a->timeout))
		return cli_usage_error(exec_usage, "exec: -t runs on a terminal: no --detach or --timeout");
	for (a->cmd_start = optind; optind < argc; optind++)
		if (!orc_utf8_valid(argv[optind], strlen(argv[optind])))
			return cli_usage_error(exec_usage, "exec: argument %d is not valid UTF-8", optind);
	return 0;
}

/* 'it'\''s' for bash, unless every byte is plainly safe. */
static void shell_quote(struct orc_buf *b, const char *arg)
{
	const char *p;

	if (*arg && strspn(arg, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_@%+=:,./-") ==
	    strlen(arg)) {
		orc_buf_adds(b, arg);
		return;
	}
	orc_buf_addc(b, '\'');
	for (p = arg; *p; p++) {
		if (*p == '\'')
			orc_buf_adds(b, "'\\''");
		else
			orc_buf_addc(b, *p);
	}
	orc_buf_addc(b, '\'');
}

static json_object *command_json(const struct exec_args *a, int argc, char **argv)
{
	struct orc_buf script = ORC_BUF_INIT;
	json_object *cmd;
	int i;

	if (!a->login) {
		cmd = json_object_new_array();
		for (i = a->cmd_start; i < argc; i++)
			json_object_array_add(cmd, json_object_new_string(argv[i]));
		return cmd;
	}
	/* login_shell applies to string commands: one bash script. */
	if (argc - a->cmd_start == 1)
		return json_object_new_string(argv[a->cmd_start]);
	for (i = a->cmd_start; i < argc; i++) {
		if (i > a->cmd_start)
			orc_buf_addc(&script, ' ');
		shell_quote(&script, argv[i]);
	}
	cmd = json_object_new_string_len(orc_buf_cstr(&script), (int)script.len);
	orc_buf_release(&script);
	return cmd;
}

/* Our stdin to its end, when it is open and not a terminal. 1: none to send. */
static int read_stdin(struct orc_buf *out)
{
	char chunk[65536];
	ssize_t n;

	if (fcntl(STDIN_FILENO, F_GETFD) < 0 || isatty(STDIN_FILENO))
		return 1;
	orc_buf_init(out, STDIN_MAX);
	for (;;) {
		n = read(STDIN_FILENO, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			cli_error("read() stdin failed: %s", strerror(errno));
			return ORC_ERROR;
		}
		if (n == 0)
			break;
		if (orc_buf_add(out, chunk, (size_t)n) < 0) {
			cli_error("stdin is larger than %zu MiB, the most one command takes; put the data in "
				  "a file in the sandbox instead, or pass -n to send no stdin", STDIN_MAX >> 20);
			return ORC_ETOOBIG;
		}
	}
	if (!orc_utf8_valid(out->ptr ? out->ptr : "", out->len)) {
		cli_error("stdin is not UTF-8 text, and the API carries stdin as a JSON string; "
			  "base64-encode binary data (or pass -n to send no stdin)");
		return ORC_EINVALID;
	}
	return 0;
}

static json_object *request_body(const struct exec_args *a, json_object *cmd, const struct orc_buf *in,
				 int have_stdin)
{
	json_object *body = json_object_new_object();

	json_object_object_add(body, "command", cmd);
	json_object_object_add(body, "wait", json_object_new_boolean(!a->detach));
	if (!a->detach)   /* output live (a server that does not stream ignores it) */
		json_object_object_add(body, "stream", json_object_new_boolean(1));
	if (a->timeout)
		json_object_object_add(body, "timeout_seconds", json_object_new_int64(a->timeout));
	if (a->cwd)
		json_object_object_add(body, "cwd", json_object_new_string(a->cwd));
	if (a->env)
		json_object_object_add(body, "env", json_object_get(a->env));
	if (a->login)
		json_object_object_add(body, "login_shell", json_object_new_boolean(1));
	if (have_stdin)
		json_object_object_add(body, "stdin", json_object_new_string_len(in->ptr ? in->ptr : "",
										 (int)in->len));
	return body;
}

int cmd_exec(struct cli_config *cfg, int argc, char **argv)
{
	struct exec_args a = { NULL, NULL, 0, 0, 0, 0, 0, NULL, 0 };
	struct orc_buf in = ORC_BUF_INIT;
	char idem[33];
	struct cli_request req = { "POST", NULL, NULL, idem, 0, NULL, NULL };
	json_object *body = NULL, *job = NULL;
	char *path = NULL;
	int rc, have_stdin = 0, streamed = 0;

	if ((rc = parse_args(&a, cfg, argc, argv)) != 0 || (rc = cli_config_check(cfg)) != 0)
		goto done;
	if (a.tty) {
		struct cli_pty_opts o = { a.id, argc - a.cmd_start, argv + a.cmd_start, a.cwd, a.env, a.login };
		rc = cli_pty_run(cfg, &o);
		goto done;
	}
	rc = CLI_FAIL;
	if (!a.no_stdin) {
		int err = read_stdin(&in);
		if (err < 0)
			goto done;
		have_stdin = err == 0;
	}
	body = request_body(&a, command_json(&a, argc, argv), &in, have_stdin);
	cli_new_idempotency_key(idem);
	path = cli_path("/v1/sandboxes", a.id, "/exec");
	req.path = path;
	req.body = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	if (!a.timeout)
		a.timeout = EXEC_DEFAULT_TIMEOUT_S;
	req.timeout_s = a.detach ? 60 : (long)a.timeout + EXEC_MARGIN_S;

	if (a.detach) {
		if (cli_call(&job, cfg, &req) < 0)
			goto done;
		if (!json_object_is_type(job, json_type_object) ||
		    !strcmp(cli_field_text(job, "job_id"), "-")) {
			cli_error("unexpected response to exec: no job");
			goto done;
		}
		printf("%s\n", cli_field_text(job, "job_id"));
		rc = CLI_OK;
		goto done;
	}
	if (cli_exec_stream(&job, &streamed, cfg, &req, (long)a.timeout + EXEC_MARGIN_S) < 0)
		goto done;
	/* The server's wait may give up before the command starts; then
	 * nothing was printed yet. */
	if (!cli_job_is_done(job) && cli_job_wait(&job, cfg, 0) < 0)
		goto done;
	if (cli_job_write_output(job, streamed) < 0)
		goto done;
	rc = cli_job_exit_status(job, (long)a.timeout);
done:
	if (job)
		json_object_put(job);
	if (body)
		json_object_put(body);
	if (a.env)
		json_object_put(a.env);
	orc_buf_release(&in);
	free(path);
	return rc;
}
