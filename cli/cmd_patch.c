/*
 * orchardctl patch apply|diff|reset: git in the sandbox's workspace, done
 * by the agent with libgit2 (POST .../apply_patch, GET .../git/diff, POST
 * .../git/reset), so the image needs no git.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "strutil.h"
#include "transfer.h"
#include "xalloc.h"

/* The agent's limit on a patch. */
#define PATCH_MAX ((size_t)64 << 20)

const char patch_usage[] =
	"usage: orchardctl patch apply|diff|reset ID ...\n"
	"\n"
	"Apply a patch to a sandbox's git working tree, show its changes against\n"
	"HEAD as a patch, or reset it to a commit. Done by the sandbox's agent:\n"
	"the image needs no git.\n";

const char patch_apply_usage[] =
	"usage: orchardctl patch apply ID [FILE|-] [--check] [--cwd DIR] [-o FORMAT]\n"
	"\n"
	"Apply a git diff or diff -u output (-p1) to the working tree (not the\n"
	"index). Every hunk is checked first: a patch that does not apply changes\n"
	"nothing and exits 125 naming the file and hunk. The patch is read from FILE,\n"
	"or stdin. Prints the paths it touched.\n"
	"\n"
	"  --check       only test whether it applies (git apply --check)\n"
	"  --cwd DIR     the top of the working tree (default /workspace)\n"
	"  -o FORMAT     json, yaml or jsonpath=EXPR: the server's answer\n";

const char patch_diff_usage[] =
	"usage: orchardctl patch diff ID [--cwd DIR] [-o FORMAT]\n"
	"\n"
	"Print the working tree's changes against HEAD, untracked files included\n"
	"(ignored ones not), as a patch that git apply turns a clean checkout of\n"
	"HEAD into the working tree (the \"model patch\"). Nothing when clean.\n"
	"\n"
	"  --cwd DIR     the top of the working tree (default /workspace)\n"
	"  -o FORMAT     json, yaml or jsonpath=EXPR: the server's answer\n"
	"                ({cwd, patch, files})\n";

const char patch_reset_usage[] =
	"usage: orchardctl patch reset ID [REF] [--cwd DIR] [--remove-ignored] [-o FORMAT]\n"
	"\n"
	"git reset --hard REF (default HEAD), then git clean -fd: the working tree\n"
	"becomes the commit, untracked files are removed. Prints the commit id.\n"
	"\n"
	"  --cwd DIR          the top of the working tree (default /workspace)\n"
	"  --remove-ignored   remove ignored files too (git clean -x)\n"
	"  -o FORMAT          json, yaml or jsonpath=EXPR: the server's answer\n";

enum { OPT_CHECK = CLI_OPT_FIRST_FREE, OPT_CWD, OPT_REMOVE_IGNORED };

const struct option patch_apply_opts[] = {
	CLI_COMMON_OPTIONS,
	{ "check", no_argument, NULL, OPT_CHECK },
	{ "cwd", required_argument, NULL, OPT_CWD },
	CLI_OUTPUT_OPTIONS,
	{ NULL, 0, NULL, 0 },
};
const struct option patch_diff_opts[] = {
	CLI_COMMON_OPTIONS,
	{ "cwd", required_argument, NULL, OPT_CWD },
	CLI_OUTPUT_OPTIONS,
	{ NULL, 0, NULL, 0 },
};
const struct option patch_reset_opts[] = {
	CLI_COMMON_OPTIONS,
	{ "cwd", required_argument, NULL, OPT_CWD },
	{ "remove-ignored", no_argument, NULL, OPT_REMOVE_IGNORED },
	CLI_OUTPUT_OPTIONS,
	{ NULL, 0, NULL, 0 },
};

struct patch_args {
	const char *cwd;
	int check, remove_ignored;
	enum cli_output output;
};

/* Options shared by the three; 0, or the exit status of a usage error. */
static int parse(struct patch_args *a, struct cli_config *cfg, int argc, char **argv,
		 const struct option *opts, const char *usage, const char *name)
{
	char cmd[32];
	int opt, rc;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "o:", opts, NULL)) != -1) {
		switch (opt) {
		case 'o':
			snprintf(cmd, sizeof(cmd), "patch %s", name);
			if ((rc = cli_output_arg(&a->output, optarg, cmd, usage, 0)) != 0)
				return rc;
			break;
		case OPT_CHECK: a->check = 1; break;
		case OPT_REMOVE_IGNORED: a->remove_ignored = 1; break;
		case OPT_CWD:
			if (!*optarg || !orc_utf8_valid(optarg, strlen(optarg)))
				return cli_usage_error(usage, "patch %s: invalid --cwd", name);
			a->cwd = optarg;
			break;
		default:
			if (cli_common_option(cfg, opt, optarg) < 0)
				return cli_bad_option(usage);
		}
	}
	return 0;
}

/* The whole of fd, at most PATCH_MAX bytes of UTF-8. */
static int read_patch(struct orc_buf *out, int fd, const char *what)
{
	char buf[65536];
	ssize_t n;

	orc_buf_init(out, PATCH_MAX);
	for (;;) {
		n = read(fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			cli_error("cannot read %s: %s", what, strerror(errno));
			return ORC_ERROR;
		}
		if (n == 0)
			break;
		if (orc_buf_add(out, buf, (size_t)n) < 0) {
			cli_error("%s is larger than %zu MiB", what, PATCH_MAX >> 20);
			return ORC_ETOOBIG;
		}
	}
	if (!out->len) {
		cli_error("%s is empty: nothing to apply", what);
		return ORC_EINVALID;
	}
	if (memchr(out->ptr, '\0', out->len) || !orc_utf8_valid(out->ptr, out->len)) {
		cli_error("%s is not UTF-8 text (a binary change must be a git binary patch)", what);
		return ORC_EINVALID;
	}
	return 0;
}

static void print_strings(json_object *res, const char *key)
{
	json_object *arr;
	size_t i;

	if (!json_object_object_get_ex(res, key, &arr) || !json_object_is_type(arr, json_type_array))
		return;
	for (i = 0; i < json_object_array_length(arr); i++)
		printf("%s\n", json_object_get_string(json_object_array_get_idx(arr, i)));
}

int cmd_patch_apply(struct cli_config *cfg, int argc, char **argv)
{
	struct patch_args a = { 0 };
	struct cli_request req = { "POST", NULL, NULL, NULL, 120, NULL, NULL };
	struct orc_buf patch = ORC_BUF_INIT;
	json_object *body = NULL, *res = NULL, *v;
	const char *file;
	char *route = NULL, *what = NULL;
	int rc, fd = STDIN_FILENO;

	if ((rc = parse(&a, cfg, argc, argv, patch_apply_opts, patch_apply_usage, "apply")) != 0)
		return rc;
	if (argc - optind < 1 || argc - optind > 2)
		return cli_usage_error(patch_apply_usage, "patch apply: expected ID and at most one FILE");
	file = argc - optind == 2 ? argv[optind + 1] : "-";
	if (!strcmp(file, "-") && isatty(STDIN_FILENO))
		return cli_usage_error(patch_apply_usage, "patch apply: no FILE and stdin is a terminal "
				       "(pipe the patch in or name a file)");
	if ((rc = cli_config_check(cfg)) != 0)
		return rc;
	rc = CLI_FAIL;
	if (strcmp(file, "-") && (fd = open(file, O_RDONLY | O_CLOEXEC)) < 0) {
		cli_error("cannot open \"%s\": %s", file, strerror(errno));
		goto done;
	}
	what = strcmp(file, "-") ? xasprintf("\"%s\"", file) : xstrdup("the patch on stdin");
	if (read_patch(&patch, fd, what) < 0)
		goto done;
	body = json_object_new_object();
	json_object_object_add(body, "patch", json_object_new_string_len(patch.ptr, (int)patch.len));
	json_object_object_add(body, "check", json_object_new_boolean(a.check));
	if (a.cwd)
		json_object_object_add(body, "cwd", json_object_new_string(a.cwd));
	req.body = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN);
	route = cli_path("/v1/sandboxes", argv[optind], "/apply_patch");
	req.path = route;
	if (cli_call(&res, cfg, &req) < 0)
		goto done;
	if (cli_output_is_doc(a.output))
		(void)cli_print_doc(a.output, res);
	if (!json_object_object_get_ex(res, "success", &v) || !json_object_get_boolean(v)) {
		const char *why = cli_field_text(res, "error");
		if (!strcmp(why, "-"))
			why = cli_field_text(res, "stderr");
		cli_error("the patch does not apply%s: %s", a.check ? " (checked only)" : "", why);
		goto done;
	}
	if (!cli_output_is_doc(a.output))
		print_strings(res, "files");
	rc = CLI_OK;
done:
	if (fd > STDIN_FILENO)
		close(fd);
	if (body)
		json_object_put(body);
	if (res)
		json_object_put(res);
	orc_buf_release(&patch);
	free(route);
	free(what);
	return rc;
}

int cmd_patch_diff(struct cli_config *cfg, int argc, char **argv)
{
	struct patch_args a = { 0 };
	struct cli_request req = { "GET", NULL, NULL, NULL, 120, NULL, NULL };
	struct orc_buf path = ORC_BUF_INIT;
	json_object *res = NULL, *v;
	char *route;
	int rc;

	if ((rc = parse(&a, cfg, argc, argv, patch_diff_opts, patch_diff_usage, "diff")) != 0)
		return rc;
	if (argc - optind != 1)
		return cli_usage_error(patch_diff_usage, "patch diff: expected one ID");
	if ((rc = cli_config_check(cfg)) != 0)
		return rc;
	route = cli_path("/v1/sandboxes", argv[optind], "/git/diff");
	orc_buf_adds(&path, route);
	if (a.cwd)
		cli_path_add_query(&path, "cwd", a.cwd);
	req.path = orc_buf_cstr(&path);
	rc = CLI_FAIL;
	if (cli_call(&res, cfg, &req) < 0)
		goto done;
	if (!json_object_object_get_ex(res, "patch", &v) || !json_object_is_type(v, json_type_string)) {
		cli_error("unexpected answer from GET %s: no \"patch\"", req.path);
		goto done;
	}
	rc = CLI_OK;
	if (cli_output_is_doc(a.output))
		rc = cli_print_doc(a.output, res);
	else
		fwrite(json_object_get_string(v), 1, (size_t)json_object_get_string_len(v), stdout);
done:
	if (res)
		json_object_put(res);
	orc_buf_release(&path);
	free(route);
	return rc;
}

int cmd_patch_reset(struct cli_config *cfg, int argc, char **argv)
{
	struct patch_args a = { 0 };
	struct cli_request req = { "POST", NULL, NULL, NULL, 120, NULL, NULL };
	json_object *body = NULL, *res = NULL;
	char *route = NULL;
	int rc;

	if ((rc = parse(&a, cfg, argc, argv, patch_reset_opts, patch_reset_usage, "reset")) != 0)
		return rc;
	if (argc - optind < 1 || argc - optind > 2)
		return cli_usage_error(patch_reset_usage, "patch reset: expected ID and at most one REF");
	if (argc - optind == 2 && (!*argv[optind + 1] || strlen(argv[optind + 1]) > 1024))
		return cli_usage_error(patch_reset_usage, "patch reset: REF must be 1 to 1024 characters");
	if ((rc = cli_config_check(cfg)) != 0)
		return rc;
	body = json_object_new_object();
	if (argc - optind == 2)
		json_object_object_add(body, "ref", json_object_new_string(argv[optind + 1]));
	if (a.cwd)
		json_object_object_add(body, "cwd", json_object_new_string(a.cwd));
	if (a.remove_ignored)
		json_object_object_add(body, "remove_ignored", json_object_new_boolean(1));
	req.body = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN);
	/* Not retried: a retry of "HEAD~1" would move twice. */
	route = cli_path("/v1/sandboxes", argv[optind], "/git/reset");
	req.path = route;
	rc = CLI_FAIL;
	if (cli_call(&res, cfg, &req) < 0)
		goto done;
	rc = CLI_OK;
	if (cli_output_is_doc(a.output))
		rc = cli_print_doc(a.output, res);
	else
		printf("%s\n", cli_field_text(res, "head"));
done:
	if (body)
		json_object_put(body);
	if (res)
		json_object_put(res);
	free(route);
	return rc;
}
