/*
 * orchardctl config set-context|use-context|get-contexts|current-context|
 * view|delete-context: the named contexts of the config file (config.c).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "err.h"
#include "strutil.h"
#include "xalloc.h"

#define KEY_MAX 1024

const char config_usage[] =
	"usage: orchardctl config SUBCOMMAND [ARGS]\n"
	"\n"
	"Named contexts (server URL, API key, CA file) in the config file:\n"
	"$ORCHARD_CONFIG, else $XDG_CONFIG_HOME/orchard/config, else\n"
	"~/.config/orchard/config. It is written 0600; a file that others can\n"
	"read is refused.\n";

const char config_set_context_usage[] =
	"usage: orchardctl config set-context NAME [--url URL] [--api-key KEY|-]\n"
	"                                          [--cacert FILE]\n"
	"\n"
	"Create the context NAME or change the fields given. The first context\n"
	"becomes the current one. --api-key - reads the key from stdin (so it stays\n"
	"out of the shell's history); --cacert is stored as an absolute path.\n";

const char config_use_context_usage[] =
	"usage: orchardctl config use-context NAME\n"
	"\n"
	"Make NAME the current context.\n";

const char config_get_contexts_usage[] =
	"usage: orchardctl config get-contexts [-q] [--no-headers]\n"
	"\n"
	"List the contexts: CURRENT (*), NAME, URL, CACERT. -q, --quiet: the names only.\n";

const char config_current_context_usage[] =
	"usage: orchardctl config current-context\n"
	"\n"
	"Print the current context's name; exit 125 if there is none.\n";

const char config_view_usage[] =
	"usage: orchardctl config view [--raw] [-o json|yaml|jsonpath=EXPR]\n"
	"\n"
	"Print the config file (JSON unless -o says otherwise) with API keys masked\n"
	"(orch_<key id>_****); --raw shows them.\n";

const char config_delete_context_usage[] =
	"usage: orchardctl config delete-context NAME\n"
	"\n"
	"Remove a context (and unset it as the current one).\n";

enum { OPT_URL = CLI_OPT_FIRST_FREE, OPT_KEY, OPT_CACERT, OPT_RAW };

const struct option config_set_context_opts[] = {
	{ "url", required_argument, NULL, OPT_URL },
	{ "api-key", required_argument, NULL, OPT_KEY },
	{ "cacert", required_argument, NULL, OPT_CACERT },
	{ NULL, 0, NULL, 0 },
};
const struct option config_get_contexts_opts[] = {
	{ "quiet", no_argument, NULL, 'q' },
	{ "no-headers", no_argument, NULL, CLI_OPT_NO_HEADERS },
	{ NULL, 0, NULL, 0 },
};
const struct option config_view_opts[] = {
	{ "raw", no_argument, NULL, OPT_RAW },
	{ "output", required_argument, NULL, 'o' },
	{ NULL, 0, NULL, 0 },
};

/* The file, loaded; *path is its name. Reported on failure. */
static int load(json_object **file, char **path)
{
	if (cli_config_path(path) < 0)
		return ORC_ERROR;
	if (cli_config_load(file, *path) < 0) {
		free(*path);
		*path = NULL;
		return ORC_ERROR;
	}
	return 0;
}

static json_object *contexts_of(json_object *file)
{
	json_object *c;

	if (!json_object_object_get_ex(file, "contexts", &c) || !c) {
		c = json_object_new_object();
		json_object_object_add(file, "contexts", c);
	}
	return c;
}

/* No options but NAME (when want_name); usage errors return CLI_USAGE. */
static int only_name(int argc, char **argv, const char *usage, int want_name)
{
	static const struct option none[] = { { NULL, 0, NULL, 0 } };

	optind = 0;
	if (getopt_long(argc, argv, "", none, NULL) != -1)
		return cli_bad_option(usage);
	if (argc - optind != want_name)
		return cli_usage_error(usage, "config %s: expected %s", argv[0], want_name ? "one NAME" : "no arguments");
	if (want_name && !cli_context_name_ok(argv[optind]))
		return cli_usage_error(usage, "config %s: a context name is 1-64 of A-Z a-z 0-9 . _ -", argv[0]);
	return 0;
}

/* One line from stdin, without its newline. */
static int read_key(char **out)
{
	char buf[KEY_MAX + 2];

	if (isatty(STDIN_FILENO))
		fputs("API key: ", stderr);
	if (!fgets(buf, sizeof(buf), stdin) || !buf[0]) {
		cli_error("config set-context: no API key on stdin");
		return ORC_EINVALID;
	}
	buf[strcspn(buf, "\r\n")] = '\0';
	*out = xstrdup(buf);
	return 0;
}

static void set_field(json_object *ctx, const char *key, const char *value)
{
	json_object_object_add(ctx, key, json_object_new_string(value));
}

int cmd_config_set_context(struct cli_config *cfg, int argc, char **argv)
{
	const char *url = NULL, *key = NULL, *cacert = NULL, *name;
	char *path = NULL, *stdin_key = NULL, real[PATH_MAX];
	json_object *file = NULL, *contexts, *ctx;
	int opt, rc = CLI_USAGE, first;

	(void)cfg;
	optind = 0;
	while ((opt = getopt_long(argc, argv, "", config_set_context_opts, NULL)) != -1) {
		switch (opt) {
		case OPT_URL: url = optarg; break;
		case OPT_KEY: key = optarg; break;
		case OPT_CACERT: cacert = optarg; break;
		default: return cli_bad_option(config_set_context_usage);
		}
	}
	if (argc - optind != 1)
		return cli_usage_error(config_set_context_usage, "config set-context: expected one NAME");
	name = argv[optind];
	if (!cli_context_name_ok(name))
		return cli_usage_error(config_set_context_usage, "config set-context: a context name is 1-64 "
				       "of A-Z a-z 0-9 . _ -, not \"%s\"", name);
	if (url && strncmp(url, "https://", 8) && strncmp(url, "http://", 7))
		return cli_usage_error(config_set_context_usage, "config set-context: --url must start with "
				       "https:// or http://, not \"%s\"", url);
	if (key && !strcmp(key, "-")) {
		if (read_key(&stdin_key) < 0)
			return CLI_USAGE;
		key = stdin_key;
	}
	if (key && !cli_api_key_ok(key)) {
		rc = cli_usage_error(config_set_context_usage, "config set-context: invalid --api-key");
		goto done;
	}
	if (cacert) {
		if (!realpath(cacert, real)) {
			rc = cli_usage_error(config_set_context_usage, "config set-context: --cacert \"%s\": %s",
					     cacert, strerror(errno));
			goto done;
		}
		cacert = real;
	}
	rc = CLI_FAIL;
	if (load(&file, &path) < 0)
		goto done;
	contexts = contexts_of(file);
	first = json_object_object_length(contexts) == 0;
	if (!(ctx = cli_config_context(file, name))) {
		ctx = json_object_new_object();
		json_object_object_add(contexts, name, ctx);
	}
	if (url)
		set_field(ctx, "url", url);
	if (key)
		set_field(ctx, "api-key", key);
	if (cacert)
		set_field(ctx, "cacert", cacert);
	if (first || !cli_config_current(file))
		set_field(file, "current-context", name);
	if (cli_config_save(path, file) < 0)
		goto done;
	printf("context \"%s\" saved in %s%s\n", name, path,
	       !strcmp(cli_config_current(file), name) ? " (current)" : "");
	rc = CLI_OK;
done:
	if (file)
		json_object_put(file);
	free(stdin_key);
	free(path);
	return rc;
}

int cmd_config_use_context(struct cli_config *cfg, int argc, char **argv)
{
	json_object *file = NULL;
	char *path = NULL;
	int rc;

	(void)cfg;
	if ((rc = only_name(argc, argv, config_use_context_usage, 1)) != 0)
		return rc;
	rc = CLI_FAIL;
	if (load(&file, &path) < 0)
		goto done;
	if (!cli_config_context(file, argv[optind])) {
		cli_error("no context \"%s\" in %s (see `orchardctl config get-contexts`)", argv[optind], path);
		goto done;
	}
	json_object_object_add(file, "current-context", json_object_new_string(argv[optind]));
	if (cli_config_save(path, file) < 0)
		goto done;
	printf("switched to context \"%s\"\n", argv[optind]);
	rc = CLI_OK;
done:
	if (file)
		json_object_put(file);
	free(path);
	return rc;
}

int cmd_config_delete_context(struct cli_config *cfg, int argc, char **argv)
{
	json_object *file = NULL;
	const char *cur;
	char *path = NULL;
	int rc;

	(void)cfg;
	if ((rc = only_name(argc, argv, config_delete_context_usage, 1)) != 0)
		return rc;
	rc = CLI_FAIL;
	if (load(&file, &path) < 0)
		goto done;
	if (!cli_config_context(file, argv[optind])) {
		cli_error("no context \"%s\" in %s", argv[optind], path);
		goto done;
	}
	if ((cur = cli_config_current(file)) && !strcmp(cur, argv[optind]))
		json_object_object_del(file, "current-context");
	json_object_object_del(contexts_of(file), argv[optind]);
	if (cli_config_save(path, file) < 0)
		goto done;
	printf("deleted context \"%s\"\n", argv[optind]);
	rc = CLI_OK;
done:
	if (file)
		json_object_put(file);
	free(path);
	return rc;
}

int cmd_config_get_contexts(struct cli_config *cfg, int argc, char **argv)
{
	static const char *const headers[] = { "CURRENT", "NAME", "URL", "CACERT" };
	json_object *file = NULL;
	const char *cur;
	struct cli_table t;
	char *path = NULL;
	int opt, quiet = 0;

	(void)cfg;
	optind = 0;
	while ((opt = getopt_long(argc, argv, "q", config_get_contexts_opts, NULL)) != -1) {
		if (opt == CLI_OPT_NO_HEADERS)
			cli_output_set_no_headers();
		else if (opt == 'q')
			quiet = 1;
		else
			return cli_bad_option(config_get_contexts_usage);
	}
	if (optind < argc)
		return cli_usage_error(config_get_contexts_usage, "config get-contexts: unexpected argument "
				       "\"%s\"", argv[optind]);
	if (load(&file, &path) < 0)
		return CLI_FAIL;
	cur = cli_config_current(file);
	if (quiet) {
		json_object_object_foreach(contexts_of(file), qname, qctx) {
			(void)qctx;
			printf("%s\n", qname);
		}
		goto done;
	}
	cli_table_init(&t, 4, headers);
	json_object_object_foreach(contexts_of(file), name, ctx) {
		const char *row[4];

		row[0] = cur && !strcmp(cur, name) ? "*" : "";
		row[1] = name;
		row[2] = cli_field_text(ctx, "url");
		row[3] = cli_field_text(ctx, "cacert");
		cli_table_add(&t, row);
	}
	cli_table_print(&t);
	cli_table_release(&t);
done:
	json_object_put(file);
	free(path);
	return CLI_OK;
}

int cmd_config_current_context(struct cli_config *cfg, int argc, char **argv)
{
	json_object *file = NULL;
	const char *cur;
	char *path = NULL;
	int rc;

	(void)cfg;
	if ((rc = only_name(argc, argv, config_current_context_usage, 0)) != 0)
		return rc;
	if (load(&file, &path) < 0)
		return CLI_FAIL;
	rc = CLI_OK;
	if ((cur = cli_config_current(file)) != NULL) {
		printf("%s\n", cur);
	} else {
		cli_error("no current context in %s (see `orchardctl config use-context`)", path);
		rc = CLI_FAIL;
	}
	json_object_put(file);
	free(path);
	return rc;
}

int cmd_config_view(struct cli_config *cfg, int argc, char **argv)
{
	json_object *file = NULL, *v;
	char masked[64], *path = NULL;
	enum cli_output output = CLI_OUT_JSON;
	int opt, rc, raw = 0;

	(void)cfg;
	optind = 0;
	while ((opt = getopt_long(argc, argv, "o:", config_view_opts, NULL)) != -1) {
		if (opt == 'o') {
			if ((rc = cli_output_arg(&output, optarg, "config view", config_view_usage, 0)) != 0)
				return rc;
		} else if (opt == OPT_RAW) {
			raw = 1;
		} else {
			return cli_bad_option(config_view_usage);
		}
	}
	if (optind < argc)
		return cli_usage_error(config_view_usage, "config view: unexpected argument \"%s\"", argv[optind]);
	if (load(&file, &path) < 0)
		return CLI_FAIL;
	if (!raw) {
		json_object_object_foreach(contexts_of(file), name, ctx) {
			(void)name;
			if (json_object_object_get_ex(ctx, "api-key", &v) && v) {
				cli_mask_key(masked, sizeof(masked), json_object_get_string(v));
				set_field(ctx, "api-key", masked);
			}
		}
	}
	rc = cli_print_doc(output, file);
	json_object_put(file);
	free(path);
	return rc;
}
