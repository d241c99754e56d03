/*
 * orchardctl rm ID... | rm --all [-l K=V]... [-y]: DELETE /v1/sandboxes/{id}
 * for each. --all lists what matches first and asks on a terminal; without
 * a terminal it needs -y.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "err.h"
#include "strutil.h"
#include "xalloc.h"

#define RM_ALL_MAX 10000
#define RM_SHOW 20

const char rm_usage[] =
	"usage: orchardctl rm ID...\n"
	"       orchardctl rm --all [-l K=V]... [-y]\n"
	"\n"
	"Delete sandboxes; prints each id as it is deleted. Deleting a sandbox\n"
	"that is already gone succeeds. Exits 125 if any deletion failed.\n"
	"\n"
	"  --all            every sandbox of yours (that matches the labels)\n"
	"  -l, --label K=V  with --all: only sandboxes with this label (repeatable)\n"
	"  -y, --yes        do not ask; without a terminal on stdin --all needs -y\n";

enum { OPT_ALL = CLI_OPT_FIRST_FREE };

const struct option rm_opts[] = {
	CLI_COMMON_OPTIONS,
	{ "all", no_argument, NULL, OPT_ALL },
	{ "label", required_argument, NULL, 'l' },
	{ "yes", no_argument, NULL, 'y' },
	{ NULL, 0, NULL, 0 },
};

static int delete_one(const struct cli_config *cfg, const char *id)
{
	struct cli_request req = { "DELETE", NULL, NULL, NULL, 60, NULL, NULL };
	json_object *res = NULL;
	char *path = cli_path("/v1/sandboxes", id, NULL);
	int err;

	req.path = path;
	if ((err = cli_call(&res, cfg, &req)) == 0) {
		printf("%s\n", id);
		fflush(stdout);
		json_object_put(res);
	}
	free(path);
	return err;
}

/* The ids --all selects, after asking when there is a terminal. */
static int select_all(json_object **out, struct cli_config *cfg, const char *base, int yes)
{
	json_object *items = NULL;
	char prompt[96];
	size_t i, n;
	int rc = CLI_FAIL;

	if (cli_list_all(&items, cfg, base, "sandboxes", 0, RM_ALL_MAX, NULL) < 0)
		goto done;
	n = json_object_array_length(items);
	if (n == 0) {
		cli_error("no sandboxes match; nothing to delete");
		rc = CLI_OK;
		goto done;
	}
	if (!yes) {
		fprintf(stderr, "This deletes %zu sandbox%s:\n", n, n == 1 ? "" : "es");
		for (i = 0; i < n && i < RM_SHOW; i++)
			fprintf(stderr, "  %s\n", cli_field_text(json_object_array_get_idx(items, i), "sandbox_id"));
		if (n > RM_SHOW)
			fprintf(stderr, "  ... and %zu more\n", n - RM_SHOW);
		snprintf(prompt, sizeof(prompt), "Delete %zu sandbox%s?", n, n == 1 ? "" : "es");
		if (!cli_confirm(prompt)) {
			cli_error("nothing deleted");
			goto done;
		}
	}
	*out = items;
	items = NULL;
	rc = -1;  /* go on */
done:
	if (items)
		json_object_put(items);
	return rc;
}

int cmd_rm(struct cli_config *cfg, int argc, char **argv)
{
	struct orc_buf base = ORC_BUF_INIT;
	json_object *items = NULL;
	int opt, rc = CLI_USAGE, all = 0, yes = 0, labels = 0, failed = 0;
	size_t i;

	orc_buf_adds(&base, "/v1/sandboxes");
	optind = 0;
	while ((opt = getopt_long(argc, argv, "l:y", rm_opts, NULL)) != -1) {
		switch (opt) {
		case OPT_ALL: all = 1; break;
		case 'y': yes = 1; break;
		case 'l':
			if (!strchr(optarg, '=') || optarg[0] == '=' || !orc_utf8_valid(optarg, strlen(optarg))) {
				rc = cli_usage_error(rm_usage, "rm: --label wants K=V, not \"%s\"", optarg);
				goto done;
			}
			cli_path_add_query(&base, "label", optarg);
			labels = 1;
			break;
		default:
			if (cli_common_option(cfg, opt, optarg) < 0) {
				rc = cli_bad_option(rm_usage);
				goto done;
			}
		}
	}
	if (all && optind < argc) {
		rc = cli_usage_error(rm_usage, "rm: give IDs or --all, not both");
		goto done;
	}
	if (!all && labels) {
		rc = cli_usage_error(rm_usage, "rm: --label selects with --all (rm --all -l K=V)");
		goto done;
	}
	if (!all && optind >= argc) {
		rc = cli_usage_error(rm_usage, "rm: expected at least one ID (or --all)");
		goto done;
	}
	if (all && !yes && !isatty(STDIN_FILENO)) {
		cli_error("rm --all: refusing to delete without confirmation: stdin is not a terminal; "
			  "pass -y to delete every matching sandbox");
		goto done;
	}
	if ((rc = cli_config_check(cfg)) != 0)
		goto done;
	if (all) {
		if ((rc = select_all(&items, cfg, orc_buf_cstr(&base), yes)) >= 0)
			goto done;
		for (i = 0; i < json_object_array_length(items); i++)
			if (delete_one(cfg, cli_field_text(json_object_array_get_idx(items, i), "sandbox_id")) < 0)
				failed = 1;
	} else {
		for (; optind < argc; optind++)
			if (delete_one(cfg, argv[optind]) < 0)
				failed = 1;
	}
	rc = failed ? CLI_FAIL : CLI_OK;
done:
	if (items)
		json_object_put(items);
	orc_buf_release(&base);
	return rc;
}
