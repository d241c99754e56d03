/*
 * orchardctl ls: GET /v1/sandboxes with ?status= and ?label=k=v filters,
 * following next_cursor to the end of the listing (at most LIST_MAX).
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "err.h"
#include "strutil.h"
#include "xalloc.h"

#define LIST_MAX 10000
#define CHUNK_MAX 1000
#define WATCH_S 2

const char ls_usage[] =
	"usage: orchardctl ls [--status S] [-l K=V]... [-o FORMAT] [-q]\n"
	"                     [--chunk-size N] [-w]\n"
	"\n"
	"List your sandboxes, oldest first: ID, IMAGE, STATUS, CPU, MEMORY, AGE\n"
	"(-o wide adds NETWORK, TTL, IDLE and LABELS). Every page is fetched, up to\n"
	"10000 sandboxes.\n"
	"\n"
	"  --status S          only sandboxes in status S (pending, ready, failed)\n"
	"  -l, --label K=V     only sandboxes with this label (repeatable: all must match)\n"
	"  -o FORMAT           table (default), wide, json, yaml or jsonpath=EXPR; the\n"
	"                      documents are {\"sandboxes\": [...]}\n"
	"  --no-headers        no header row\n"
	"  -q, --quiet         only the ids, one per line\n"
	"  --chunk-size N      sandboxes per request (default: the server's, 100)\n"
	"  -w, --watch         then keep watching: every 2 s print the sandboxes that\n"
	"                      appeared or changed status (gone ones as \"deleted\"),\n"
	"                      with -o json one JSON object per line, until interrupted\n";

enum { OPT_STATUS = CLI_OPT_FIRST_FREE, OPT_CHUNK };

const struct option ls_opts[] = {
	CLI_COMMON_OPTIONS,
	{ "status", required_argument, NULL, OPT_STATUS },
	{ "label", required_argument, NULL, 'l' },
	CLI_OUTPUT_OPTIONS,
	{ "quiet", no_argument, NULL, 'q' },
	{ "chunk-size", required_argument, NULL, OPT_CHUNK },
	{ "watch", no_argument, NULL, 'w' },
	{ NULL, 0, NULL, 0 },
};

/* "a=1,b=2" */
static void labels_text(struct orc_buf *out, json_object *sb)
{
	json_object *labels;

	orc_buf_reset(out);
	if (!json_object_object_get_ex(sb, "labels", &labels) || !json_object_is_type(labels, json_type_object))
		return;
	json_object_object_foreach(labels, k, v)
		orc_buf_addf(out, "%s%s=%s", out->len ? "," : "", k, v ? json_object_get_string(v) : "");
}

static const char *network_text(json_object *sb)
{
	json_object *v;

	if (!json_object_object_get_ex(sb, "block_network", &v) || !json_object_is_type(v, json_type_boolean))
		return "-";
	return json_object_get_boolean(v) ? "blocked" : "open";
}

static void duration_field(char *out, size_t outlen, json_object *sb, const char *key)
{
	json_object *v;

	if (json_object_object_get_ex(sb, key, &v) && json_object_is_type(v, json_type_int))
		cli_format_duration(out, outlen, json_object_get_int64(v));
	else
		snprintf(out, outlen, "-");
}

static void print_table(json_object *items, int wide)
{
	static const char *const headers[] = { "ID", "IMAGE", "STATUS", "CPU", "MEMORY", "AGE",
					       "NETWORK", "TTL", "IDLE", "LABELS" };
	struct orc_buf labels = ORC_BUF_INIT;
	char age[32], ttl[32], idle[32];
	struct cli_table t;
	json_object *sb, *created;
	size_t i, n = json_object_array_length(items);

	cli_table_init(&t, wide ? 10 : 6, headers);
	for (i = 0; i < n; i++) {
		const char *row[10];

		sb = json_object_array_get_idx(items, i);
		if (!sb || !json_object_is_type(sb, json_type_object))
			continue;
		created = NULL;
		json_object_object_get_ex(sb, "created_at", &created);
		cli_format_age(age, sizeof(age), created);
		duration_field(ttl, sizeof(ttl), sb, "ttl_seconds");
		duration_field(idle, sizeof(idle), sb, "idle_timeout_seconds");
		labels_text(&labels, sb);
		row[0] = cli_field_text(sb, "sandbox_id");
		row[1] = cli_field_text(sb, "image");
		row[2] = cli_field_text(sb, "status");
		row[3] = cli_field_text(sb, "cpu");
		row[4] = cli_field_text(sb, "memory");
		row[5] = age;
		row[6] = network_text(sb);
		row[7] = ttl;
		row[8] = idle;
		row[9] = labels.len ? orc_buf_cstr(&labels) : "-";
		cli_table_add(&t, row);
	}
	cli_table_print(&t);
	cli_table_release(&t);
	orc_buf_release(&labels);
}

/* The status of sandbox id in items, or NULL when it is not there. */
static const char *status_in(json_object *items, const char *id)
{
	size_t i, n = json_object_array_length(items);

	for (i = 0; i < n; i++) {
		json_object *sb = json_object_array_get_idx(items, i);
		if (!strcmp(cli_field_text(sb, "sandbox_id"), id))
			return cli_field_text(sb, "status");
	}
	return NULL;
}

/* What changed from prev to cur: new or re-statused sandboxes, and gone
 * ones as "deleted". */
static json_object *changes(json_object *prev, json_object *cur)
{
	json_object *out = json_object_new_array(), *sb, *gone;
	size_t i;
	const char *was;

	for (i = 0; i < json_object_array_length(cur); i++) {
		sb = json_object_array_get_idx(cur, i);
		was = status_in(prev, cli_field_text(sb, "sandbox_id"));
		if (!was || strcmp(was, cli_field_text(sb, "status")))
			json_object_array_add(out, json_object_get(sb));
	}
	for (i = 0; i < json_object_array_length(prev); i++) {
		sb = json_object_array_get_idx(prev, i);
		if (status_in(cur, cli_field_text(sb, "sandbox_id")))
			continue;
		gone = NULL;   /* json_object_deep_copy wants *dst NULL */
		if (json_object_deep_copy(sb, &gone, NULL) != 0)
			continue;
		json_object_object_add(gone, "status", json_object_new_string("deleted"));
		json_object_array_add(out, gone);
	}
	return out;
}

/* 0, or CLI_FAIL when a jsonpath found nothing. */
static int print_items(json_object *items, enum cli_output output, int quiet, int lines)
{
	size_t i, n = json_object_array_length(items);
	json_object *o;
	int rc = 0;

	if (quiet) {
		for (i = 0; i < n; i++)
			printf("%s\n", cli_field_text(json_object_array_get_idx(items, i), "sandbox_id"));
	} else if (cli_output_is_doc(output) && lines) {
		for (i = 0; i < n; i++)
			rc |= cli_print_doc_line(output, json_object_array_get_idx(items, i));
	} else if (cli_output_is_doc(output)) {
		o = json_object_new_object();
		json_object_object_add(o, "sandboxes", json_object_get(items));
		rc = cli_print_doc(output, o);
		json_object_put(o);
	} else {
		print_table(items, output == CLI_OUT_WIDE);
	}
	fflush(stdout);
	return rc ? CLI_FAIL : 0;
}

/* ls -w: list again every WATCH_S and print what changed, until killed. */
static int watch(const struct cli_config *cfg, const char *base, int64_t chunk, enum cli_output output,
		 int quiet, json_object *items)
{
	json_object *prev = json_object_get(items), *cur = NULL, *diff;

	for (;;) {
		sleep(WATCH_S);
		if (cli_list_all(&cur, cfg, base, "sandboxes", (long)chunk, LIST_MAX, NULL) < 0) {
			json_object_put(prev);
			return CLI_FAIL;
		}
		diff = changes(prev, cur);
		if (json_object_array_length(diff))
			(void)print_items(diff, output, quiet, 1);
		json_object_put(diff);
		json_object_put(prev);
		prev = cur;
		cur = NULL;
	}
}

int cmd_ls(struct cli_config *cfg, int argc, char **argv)
{
	struct orc_buf base = ORC_BUF_INIT;
	enum cli_output output = CLI_OUT_TABLE;
	json_object *items = NULL;
	int opt, rc = CLI_USAGE, quiet = 0, watching = 0;
	int64_t chunk = 0;

	orc_buf_adds(&base, "/v1/sandboxes");
	optind = 0;
	while ((opt = getopt_long(argc, argv, "o:l:qw", ls_opts, NULL)) != -1) {
		switch (opt) {
		case 'o':
			if ((rc = cli_output_arg(&output, optarg, "ls", ls_usage, 1)) != 0)
				goto done;
			break;
		case 'q': quiet = 1; break;
		case 'w': watching = 1; break;
		case OPT_STATUS:
			if (!*optarg || strlen(optarg) > 32) {
				rc = cli_usage_error(ls_usage, "ls: --status wants pending, ready or failed");
				goto done;
			}
			cli_path_add_query(&base, "status", optarg);
			break;
		case 'l':
			if (!strchr(optarg, '=') || optarg[0] == '=' || !orc_utf8_valid(optarg, strlen(optarg))) {
				rc = cli_usage_error(ls_usage, "ls: --label wants K=V, not \"%s\"", optarg);
				goto done;
			}
			cli_path_add_query(&base, "label", optarg);
			break;
		case OPT_CHUNK:
			if (orc_parse_i64(&chunk, optarg, 1, CHUNK_MAX) < 0) {
				rc = cli_usage_error(ls_usage, "ls: --chunk-size wants 1 to %d, not \"%s\"",
						     CHUNK_MAX, optarg);
				goto done;
			}
			break;
		default:
			if (cli_common_option(cfg, opt, optarg) < 0) {
				rc = cli_bad_option(ls_usage);
				goto done;
			}
		}
	}
	if (optind < argc) {
		rc = cli_usage_error(ls_usage, "ls: unexpected argument \"%s\"", argv[optind]);
		goto done;
	}
	if ((rc = cli_config_check(cfg)) != 0)
		goto done;
	rc = CLI_FAIL;
	if (cli_list_all(&items, cfg, orc_buf_cstr(&base), "sandboxes", (long)chunk, LIST_MAX, NULL) < 0)
		goto done;
	if ((rc = print_items(items, output, quiet, watching)) == 0 && watching)
		rc = watch(cfg, orc_buf_cstr(&base), chunk, output, quiet, items);
done:
	if (items)
		json_object_put(items);
	orc_buf_release(&base);
	return rc;
}
