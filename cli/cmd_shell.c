/*
 * orchardctl shell ID [-- CMD...]: an interactive terminal in a sandbox
 * (shell.c does the session).
 */
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "strutil.h"

const char shell_usage[] =
	"usage: orchardctl shell ID [-w DIR] [-e K=V]... [--no-login] [-- CMD [ARG...]]\n"
	"\n"
	"Open an interactive terminal in sandbox ID: a login shell (bash -l, or sh\n"
	"-l where there is no bash), or CMD run directly on the terminal. The local\n"
	"terminal is put in raw mode (keys such as ^C go to the sandbox), follows\n"
	"window size changes, and is restored however the session ends. Exits with\n"
	"the program's exit status (128+N when signal N ended it).\n"
	"\n"
	"  -w, --workdir DIR  working directory (default /workspace)\n"
	"  -e, --env K=V      set an environment variable (repeatable); TERM is\n"
	"                     passed on from here\n"
	"  --no-login         no login shell (bash, not bash -l); with CMD: run it\n"
	"                     without reading the login files first\n";

enum { OPT_NO_LOGIN = CLI_OPT_FIRST_FREE };

const struct option shell_opts[] = {
	CLI_COMMON_OPTIONS,
	{ "workdir", required_argument, NULL, 'w' },
	{ "cwd", required_argument, NULL, 'w' },
	{ "env", required_argument, NULL, 'e' },
	{ "no-login", no_argument, NULL, OPT_NO_LOGIN },
	{ NULL, 0, NULL, 0 },
};

int cmd_shell(struct cli_config *cfg, int argc, char **argv)
{
	struct cli_pty_opts o = { 0 };
	int opt, rc, no_login = 0;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "+w:e:", shell_opts, NULL)) != -1 || (optind < argc && !o.id &&
	       strcmp(argv[optind - 1], "--"))) {
		if (opt == -1) {
			o.id = argv[optind++];
			continue;
		}
		switch (opt) {
		case 'w':
			if (!*optarg || !orc_utf8_valid(optarg, strlen(optarg))) {
				rc = cli_usage_error(shell_usage, "shell: invalid --workdir");
				goto done;
			}
			o.cwd = optarg;
			break;
		case 'e':
			if (!o.env)
				o.env = json_object_new_object();
			if (cli_kv_add(o.env, optarg) < 0) {
				rc = cli_usage_error(shell_usage, "shell: -e wants K=V, not \"%s\"", optarg);
				goto done;
			}
			break;
		case OPT_NO_LOGIN: no_login = 1; break;
		default:
			if (cli_common_option(cfg, opt, optarg) < 0) {
				rc = cli_bad_option(shell_usage);
				goto done;
			}
		}
	}
	if (!o.id) {
		rc = cli_usage_error(shell_usage, "shell: expected a sandbox ID");
		goto done;
	}
	o.argc = argc - optind;
	o.argv = argv + optind;
	o.login = !no_login;
	if ((rc = cli_config_check(cfg)) != 0)
		goto done;
	rc = cli_pty_run(cfg, &o);
done:
	if (o.env)
		json_object_put(o.env);
	return rc;
}
