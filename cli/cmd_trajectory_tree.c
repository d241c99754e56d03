/*
 * orchardctl trajectory tree ID [-o json|yaml]
 *
 * A rollout tree (docs/checkpoints.md, issue 21): GET /v1/trajectories?root=ID
 * streams the trajectories of ID and of every sandbox forked from it,
 * recursively; this folds each into a node (its fork point, state, steps,
 * last step, evaluations) and prints the nodes as a tree, or as one nested
 * document with -o.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json.h"
#include "replay.h"
#include "strutil.h"
#include "xalloc.h"

#define TREE_TIMEOUT_S 300

const char trajectory_tree_usage[] =
	"usage: orchardctl trajectory tree ID [-o json|yaml]\n"
	"\n"
	"Print the rollout tree rooted at sandbox ID (deleted sandboxes too): every\n"
	"sandbox forked from it, recursively, with the step each branch starts at,\n"
	"its state, its number of steps, and the status and exit code of its last\n"
	"step. -o json: one nested document ({sandbox_id, forked_from, state, steps,\n"
	"last_step, evaluations, children}).\n";

const struct option trajectory_tree_opts[] = {
	CLI_COMMON_OPTIONS,
	CLI_OUTPUT_OPTIONS,
	{ NULL, 0, NULL, 0 },
};

static json_object *get(json_object *o, const char *key)
{
	json_object *v = NULL;

	return o && json_object_object_get_ex(o, key, &v) ? v : NULL;
}

/* The node of sandbox id in nodes (an object keyed by id), made on first sight. */
static json_object *node_of(json_object *nodes, json_object *order, const char *id)
{
	json_object *n = get(nodes, id);

	if (n)
		return n;
	n = json_object_new_object();
	json_object_object_add(n, "sandbox_id", json_object_new_string(id));
	json_object_object_add(n, "forked_from", NULL);
	json_object_object_add(n, "state", NULL);
	json_object_object_add(n, "steps", json_object_new_int(0));
	json_object_object_add(n, "last_step", NULL);
	json_object_object_add(n, "evaluations", json_object_new_int(0));
	json_object_object_add(n, "children", json_object_new_array());
	json_object_object_add(nodes, id, n);
	json_object_array_add(order, json_object_new_string(id));
	return n;
}

static void copy_key(json_object *to, json_object *from, const char *key)
{
	json_object *v = get(from, key);

	json_object_object_add(to, key, v ? json_object_get(v) : NULL);
}

/* Fold one line into its sandbox's node. */
static void fold(json_object *nodes, json_object *order, json_object *line)
{
	const char *type = cli_field_text(line, "type"), *id = cli_field_text(line, "sandbox_id");
	json_object *n = node_of(nodes, order, id), *last;

	if (!strcmp(type, "header")) {
		copy_key(n, line, "forked_from");
	} else if (!strcmp(type, "end")) {
		copy_key(n, line, "state");
		copy_key(n, line, "steps");
	} else if (!strcmp(type, "evaluate")) {
		json_object_object_add(n, "evaluations", json_object_new_int(
			json_object_get_int(get(n, "evaluations")) + 1));
	} else if (get(line, "step")) {
		last = json_object_new_object();
		copy_key(last, line, "step");
		copy_key(last, line, "type");
		copy_key(last, line, "status");
		copy_key(last, line, "exit_code");
		copy_key(last, line, "success");
		json_object_object_add(n, "last_step", last);
	}
}

/* Hang each node under its parent; the root's node (a new reference). */
static json_object *link_tree(json_object *nodes, json_object *order, const char *root)
{
	size_t i, n = json_object_array_length(order);

	for (i = 0; i < n; i++) {
		const char *id = json_object_get_string(json_object_array_get_idx(order, i));
		json_object *node = get(nodes, id), *parent;
		const char *pid = cli_field_text(get(node, "forked_from"), "sandbox_id");
		if (!strcmp(id, root) || !*pid || !(parent = get(nodes, pid)))
			continue;
		json_object_array_add(get(parent, "children"), json_object_get(node));
	}
	return json_object_get(get(nodes, root));
}

static void print_node(json_object *n, const char *prefix, int last, int depth)
{
	json_object *from = get(n, "forked_from"), *ls = get(n, "last_step"), *kids = get(n, "children");
	char where[96] = "", step[128] = "no steps";
	size_t i, k = json_object_array_length(kids);
	char *sub;

	if (depth && from)
		snprintf(where, sizeof(where), "  from step %s (%s)", cli_field_text(from, "step"),
			 cli_field_text(from, "checkpoint_id"));
	if (ls)
		snprintf(step, sizeof(step), "last: %s %s %s%s", cli_field_text(ls, "type"),
			 cli_field_text(ls, "status"), get(ls, "exit_code") ? "exit " : "",
			 cli_field_text(ls, "exit_code"));
	printf("%s%s%s%s  %s  %s steps  %s", prefix, depth ? (last ? "└── " : "├── ") : "",
	       cli_field_text(n, "sandbox_id"), where, cli_field_text(n, "state"),
	       cli_field_text(n, "steps"), step);
	if (json_object_get_int(get(n, "evaluations")))
		printf("  %d evaluations", json_object_get_int(get(n, "evaluations")));
	printf("\n");
	sub = xasprintf("%s%s", prefix, depth ? (last ? "    " : "│   ") : "");
	for (i = 0; i < k; i++)
		print_node(json_object_array_get_idx(kids, i), sub, i + 1 == k, depth + 1);
	free(sub);
}

int cmd_trajectory_tree(struct cli_config *cfg, int argc, char **argv)
{
	struct cli_response res = CLI_RESPONSE_INIT;
	struct orc_buf path = ORC_BUF_INIT;
	struct cli_request req = { "GET", NULL, NULL, NULL, TREE_TIMEOUT_S, NULL, NULL };
	enum cli_output output = 0;
	json_object *nodes = NULL, *order = NULL, *root = NULL, *line;
	const char *p, *nl;
	int opt, rc;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "o:", trajectory_tree_opts, NULL)) != -1) {
		if (opt == 'o') {
			if ((rc = cli_output_arg(&output, optarg, argv[0], trajectory_tree_usage, 0)) != 0)
				return rc;
		} else if (cli_common_option(cfg, opt, optarg) < 0) {
			return cli_bad_option(trajectory_tree_usage);
		}
	}
	if (argc - optind != 1)
		return cli_usage_error(trajectory_tree_usage, "trajectory tree: expected one sandbox ID");
	if ((rc = cli_config_check(cfg)) != 0)
		return rc;
	orc_buf_adds(&path, "/v1/trajectories");
	cli_path_add_query(&path, "root", argv[optind]);
	cli_path_add_query(&path, "limit", "1000");
	req.path = orc_buf_cstr(&path);
	rc = CLI_FAIL;
	if (cli_http(&res, cfg, &req) < 0)
		goto done;
	if (res.status != 200) {
		cli_report_response(&res);
		goto done;
	}
	nodes = json_object_new_object();
	order = json_object_new_array();
	for (p = orc_buf_cstr(&res.body); *p; p = *nl ? nl + 1 : nl) {
		nl = p + strcspn(p, "\n");
		line = NULL;
		if (nl > p && orc_json_parse(&line, p, (size_t)(nl - p), NULL, 0) == 0) {
			if (!strcmp(cli_field_text(line, "type"), "error")) {
				cli_error("the tree export failed: %s", cli_field_text(line, "detail"));
				json_object_put(line);
				goto done;
			}
			fold(nodes, order, line);
		}
		json_object_put(line);
	}
	if (!(root = link_tree(nodes, order, argv[optind]))) {
		cli_error("sandbox %s is not in the answer", argv[optind]);
		goto done;
	}
	rc = CLI_OK;
	if (cli_output_is_doc(output))
		rc = cli_print_doc(output, root);
	else
		print_node(root, "", 1, 0);
done:
	json_object_put(root);
	json_object_put(nodes);
	json_object_put(order);
	cli_response_release(&res);
	orc_buf_release(&path);
	return rc;
}
