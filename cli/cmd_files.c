/*
 * orchardctl files ls|cat|rm|mkdir: a sandbox's filesystem, one route each
 * (GET .../files/list, GET .../files/raw, DELETE .../files, POST
 * .../files/mkdir). Paths are the sandbox's: relative ones are taken from
 * /workspace.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "transfer.h"
#include "xalloc.h"

const char files_usage[] =
	"usage: orchardctl files ls|cat|rm|mkdir ID ...\n"
	"\n"
	"List, print, remove and create files in a sandbox. Relative paths are\n"
	"taken from /workspace. `orchardctl cp` copies files and directories.\n";

const char files_ls_usage[] =
	"usage: orchardctl files ls ID [PATH] [-o FORMAT] [--no-headers] [-q]\n"
	"\n"
	"List a directory of the sandbox (default /workspace): mode, size,\n"
	"modification time (UTC) and name, symlinks with their targets, dotfiles\n"
	"included, sorted by name.\n"
	"\n"
	"  -o FORMAT    table (default), json, yaml or jsonpath=EXPR: the documents\n"
	"               are the server's answer ({path, files: [...]})\n"
	"  -q, --quiet  names only\n";

const char files_cat_usage[] =
	"usage: orchardctl files cat ID PATH...\n"
	"\n"
	"Write files of the sandbox to stdout, byte for byte, one after the other\n"
	"(streamed: any size).\n";

const char files_rm_usage[] =
	"usage: orchardctl files rm ID PATH... [-r] [-f]\n"
	"\n"
	"Remove files, symlinks (never what they point to) and empty directories.\n"
	"\n"
	"  -r, --recursive  directories with their contents\n"
	"  -f, --force      a path that does not exist is not an error\n";

const char files_mkdir_usage[] =
	"usage: orchardctl files mkdir ID PATH... [-p] [-m MODE]\n"
	"\n"
	"Create directories. Without -p an existing path or a missing parent is an\n"
	"error, as with mkdir(1).\n"
	"\n"
	"  -p, --parents   create missing parents; an existing directory is fine\n"
	"  -m, --mode MODE  permission bits, octal (default 0755)\n";

const struct option files_ls_opts[] = {
	CLI_COMMON_OPTIONS,
	CLI_OUTPUT_OPTIONS,
	{ "quiet", no_argument, NULL, 'q' },
	{ NULL, 0, NULL, 0 },
};
const struct option files_rm_opts[] = {
	CLI_COMMON_OPTIONS,
	{ "recursive", no_argument, NULL, 'r' },
	{ "force", no_argument, NULL, 'f' },
	{ NULL, 0, NULL, 0 },
};
const struct option files_mkdir_opts[] = {
	CLI_COMMON_OPTIONS,
	{ "parents", no_argument, NULL, 'p' },
	{ "mode", required_argument, NULL, 'm' },
	{ NULL, 0, NULL, 0 },
};

/* "-rwxr-xr-x" from the entry's type and 4 octal digits. */
static void mode_text(char out[11], const char *type, const char *mode)
{
	static const char rwx[] = "rwxrwxrwx";
	unsigned bits = 0;
	int i;

	for (; mode && *mode >= '0' && *mode <= '7'; mode++)
		bits = bits * 8 + (unsigned)(*mode - '0');
	out[0] = !strcmp(type, "directory") ? 'd' : !strcmp(type, "symlink") ? 'l' :
		 !strcmp(type, "file") ? '-' : '?';
	for (i = 0; i < 9; i++)
		out[i + 1] = bits & (0400u >> i) ? rwx[i] : '-';
	out[10] = '\0';
}

static void print_listing(json_object *files, int quiet)
{
	static const char *const headers[] = { "MODE", "SIZE", "MODIFIED", "NAME" };
	struct cli_table t;
	json_object *f, *v;
	char mode[11], *name;
	size_t i, n = json_object_array_length(files);

	cli_table_init(&t, 4, headers);
	for (i = 0; i < n; i++) {
		f = json_object_array_get_idx(files, i);
		if (quiet) {
			printf("%s\n", cli_field_text(f, "name"));
			continue;
		}
		mode_text(mode, cli_field_text(f, "type"), cli_field_text(f, "mode"));
		name = json_object_object_get_ex(f, "target", &v) && v ?
			xasprintf("%s -> %s", cli_field_text(f, "name"), json_object_get_string(v)) :
			xstrdup(cli_field_text(f, "name"));
		{
			const char *row[] = { mode, cli_field_text(f, "size"), cli_field_text(f, "modified"), name };
			cli_table_add(&t, row);
		}
		free(name);
	}
	if (!quiet)
		cli_table_print(&t);
	cli_table_release(&t);
}

int cmd_files_ls(struct cli_config *cfg, int argc, char **argv)
{
	enum cli_output output = CLI_OUT_TABLE;
	struct cli_request req = { "GET", NULL, NULL, NULL, 60, NULL, NULL };
	json_object *res = NULL, *files;
	char *route;
	int opt, rc, quiet = 0;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "o:q", files_ls_opts, NULL)) != -1) {
		if (opt == 'o') {
			if ((rc = cli_output_arg(&output, optarg, "files ls", files_ls_usage, 1)) != 0)
				return rc;
		} else if (opt == 'q') {
			quiet = 1;
		} else if (cli_common_option(cfg, opt, optarg) < 0) {
			return cli_bad_option(files_ls_usage);
		}
	}
	if (argc - optind < 1 || argc - optind > 2)
		return cli_usage_error(files_ls_usage, "files ls: expected ID and at most one PATH");
	if ((rc = cli_config_check(cfg)) != 0)
		return rc;
	route = cli_remote_route(argv[optind], "/files/list", argc - optind == 2 ? argv[optind + 1] : "/workspace");
	req.path = route;
	rc = CLI_FAIL;
	if (cli_call(&res, cfg, &req) < 0)
		goto done;
	if (!json_object_object_get_ex(res, "files", &files) || !json_object_is_type(files, json_type_array)) {
		cli_error("unexpected answer from GET %s: no \"files\" list", route);
		goto done;
	}
	rc = CLI_OK;
	if (cli_output_is_doc(output))
		rc = cli_print_doc(output, res);
	else
		print_listing(files, quiet);
done:
	if (res)
		json_object_put(res);
	free(route);
	return rc;
}

int cmd_files_cat(struct cli_config *cfg, int argc, char **argv)
{
	struct cli_request req = { "GET", NULL, NULL, NULL, 0, NULL, NULL };
	struct cli_response r = CLI_RESPONSE_INIT;
	struct cli_stream s;
	char *route;
	int opt, rc, i, err, failed = 0;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "", common_opts, NULL)) != -1)
		if (cli_common_option(cfg, opt, optarg) < 0)
			return cli_bad_option(files_cat_usage);
	if (argc - optind < 2)
		return cli_usage_error(files_cat_usage, "files cat: expected ID and at least one PATH");
	if ((rc = cli_config_check(cfg)) != 0)
		return rc;
	for (i = optind + 1; i < argc; i++) {
		route = cli_remote_route(argv[optind], "/files/raw", argv[i]);
		req.path = route;
		cli_stream_init(&s);
		s.out_fd = STDOUT_FILENO;
		fflush(stdout);
		err = cli_http_stream(&r, cfg, &req, &s);
		if (err == ORC_ERROR && s.out_errno)
			cli_error("writing to stdout failed: %s", strerror(s.out_errno));
		else if (err == 0 && (r.status < 200 || r.status > 299))
			cli_report_response(&r), err = ORC_ERROR;
		cli_response_release(&r);
		free(route);
		if (err < 0)
			failed = 1;
	}
	return failed ? CLI_FAIL : CLI_OK;
}

int cmd_files_rm(struct cli_config *cfg, int argc, char **argv)
{
	struct cli_request req = { "DELETE", NULL, NULL, NULL, 60, NULL, NULL };
	struct cli_response r = CLI_RESPONSE_INIT;
	struct orc_buf path = ORC_BUF_INIT;
	char *route;
	int opt, rc, i, recursive = 0, force = 0, failed = 0;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "rf", files_rm_opts, NULL)) != -1) {
		if (opt == 'r')
			recursive = 1;
		else if (opt == 'f')
			force = 1;
		else if (cli_common_option(cfg, opt, optarg) < 0)
			return cli_bad_option(files_rm_usage);
	}
	if (argc - optind < 2)
		return cli_usage_error(files_rm_usage, "files rm: expected ID and at least one PATH");
	if ((rc = cli_config_check(cfg)) != 0)
		return rc;
	for (i = optind + 1; i < argc; i++) {
		route = cli_remote_route(argv[optind], "/files", argv[i]);
		orc_buf_reset(&path);
		orc_buf_adds(&path, route);
		if (recursive)
			cli_path_add_query(&path, "recursive", "true");
		req.path = orc_buf_cstr(&path);
		if (cli_http(&r, cfg, &req) < 0) {
			failed = 1;
		} else if (r.status < 200 || r.status > 299) {
			if (!(force && r.status == 404 && r.json && !cli_route_missing(&r) &&
			      !cli_sandbox_missing(&r, argv[optind]))) {
				cli_report_response(&r);
				if (r.status == 409 && !recursive)
					fprintf(stderr, "orchardctl: hint: -r removes a directory with its contents\n");
				failed = 1;
			}
		}
		cli_response_release(&r);
		free(route);
	}
	orc_buf_release(&path);
	return failed ? CLI_FAIL : CLI_OK;
}

int cmd_files_mkdir(struct cli_config *cfg, int argc, char **argv)
{
	struct cli_request req = { "POST", "", NULL, NULL, 60, NULL, NULL };
	const char *mode = NULL;
	json_object *body, *res;
	char *route;
	int opt, rc, i, parents = 0, failed = 0;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "pm:", files_mkdir_opts, NULL)) != -1) {
		if (opt == 'p') {
			parents = 1;
		} else if (opt == 'm') {
			if (!*optarg || strlen(optarg) > 5 || strspn(optarg, "01234567") != strlen(optarg))
				return cli_usage_error(files_mkdir_usage, "files mkdir: --mode wants octal bits "
						       "such as 0755, not \"%s\"", optarg);
			mode = optarg;
		} else if (cli_common_option(cfg, opt, optarg) < 0) {
			return cli_bad_option(files_mkdir_usage);
		}
	}
	if (argc - optind < 2)
		return cli_usage_error(files_mkdir_usage, "files mkdir: expected ID and at least one PATH");
	if ((rc = cli_config_check(cfg)) != 0)
		return rc;
	route = cli_path("/v1/sandboxes", argv[optind], "/files/mkdir");
	req.path = route;
	for (i = optind + 1; i < argc; i++) {
		body = json_object_new_object();
		json_object_object_add(body, "path", json_object_new_string(argv[i]));
		json_object_object_add(body, "parents", json_object_new_boolean(parents));
		if (mode)
			json_object_object_add(body, "mode", json_object_new_string(mode));
		req.body = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN);
		res = NULL;
		if (cli_call(&res, cfg, &req) < 0)
			failed = 1;
		else
			json_object_put(res);
		json_object_put(body);
	}
	free(route);
	return failed ? CLI_FAIL : CLI_OK;
}
