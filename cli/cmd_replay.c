/*
 * orchardctl replay FILE [--image X] [--compare exact|exit-code|none]
 *                        [--keep] [--parallel N] [-o json]
 *
 * Reads the trajectories of FILE (one, or many from a bulk export), checks
 * that each is a complete trajectory of a version we read, replays them on
 * up to N threads (replay.c; lib/traj_compare.c reads, judges and
 * reports, as the api's POST /v1/trajectories/replay does), prints each one's report as it finishes and
 * one summary. Exit status: 0 when every step of every trajectory matched
 * (skipped steps do not count against it), 1 otherwise, 2 for bad usage or
 * a FILE that is not a trajectory.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "json.h"
#include "replay.h"
#include "strutil.h"
#include "xalloc.h"

#define PARALLEL_DEFAULT 4
#define PARALLEL_MAX 64
#define TRAJ_MAX 100000
#define LINE_MAX_BYTES ((size_t)256 << 20)   /* one line: two capped outputs, escaped */

const char replay_usage[] =
	"usage: orchardctl replay FILE [--image IMAGE] [--compare exact|exit-code|none]\n"
	"                         [--keep] [--parallel N] [-o FORMAT]\n"
	"\n"
	"Replay recorded trajectories (from `orchardctl trajectory export`; FILE may\n"
	"hold several, or be - for stdin): each into a fresh sandbox with the\n"
	"recorded spec, re-running every step in order and comparing each outcome\n"
	"with the recording. Prints a report per trajectory and a summary; exits 0\n"
	"when every step matched, 1 when one diverged or failed, 2 on bad usage or\n"
	"a FILE that is not a complete trajectory. Steps this server cannot replay\n"
	"(no file or git routes, file content not exported) are reported as skipped.\n"
	"\n"
	"  --image IMAGE       replay into IMAGE instead of the recorded image\n"
	"  --compare MODE      exact: exit code, stdout and stderr (default);\n"
	"                      exit-code: the exit code only; none: only that each\n"
	"                      step ran\n"
	"  --keep              keep the new sandboxes (their ids are reported)\n"
	"  --parallel N        replay up to N trajectories at once (default 4, max 64)\n"
	"  --ready-timeout S   wait at most S for each new sandbox (default 5m)\n"
	"  -o FORMAT           the report as json, yaml or jsonpath=EXPR, not text\n";

enum { OPT_IMAGE = CLI_OPT_FIRST_FREE, OPT_COMPARE, OPT_KEEP, OPT_PARALLEL, OPT_READY };

const struct option replay_opts[] = {
	CLI_COMMON_OPTIONS,
	{ "image", required_argument, NULL, OPT_IMAGE },
	{ "compare", required_argument, NULL, OPT_COMPARE },
	{ "keep", no_argument, NULL, OPT_KEEP },
	{ "parallel", required_argument, NULL, OPT_PARALLEL },
	{ "ready-timeout", required_argument, NULL, OPT_READY },
	CLI_OUTPUT_OPTIONS,
	{ NULL, 0, NULL, 0 },
};

/* ---- reading FILE ------------------------------------------------------- */

static int load(struct orc_traj_set *s, const char *file)
{
	FILE *f = strcmp(file, "-") ? fopen(file, "re") : stdin;
	char *buf = NULL, msg[512];
	size_t cap = 0, lineno = 0;
	ssize_t n;
	json_object *line;
	int err = 0;

	if (!f) {
		cli_error("cannot open \"%s\": %s", file, strerror(errno));
		return ORC_EINVALID;
	}
	while ((n = getline(&buf, &cap, f)) >= 0) {
		lineno++;
		while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
			buf[--n] = '\0';
		if (!n)
			continue;
		if ((size_t)n > LINE_MAX_BYTES) {
			cli_error("%s:%zu: line longer than %zu bytes", file, lineno, LINE_MAX_BYTES);
			err = ORC_ETOOBIG;
			goto done;
		}
		if (orc_json_parse_object(&line, buf, (size_t)n, msg, sizeof(msg)) < 0) {
			cli_error("%s:%zu: not a JSON object: %s", file, lineno, msg);
			err = ORC_EINVALID;
			goto done;
		}
		if ((err = orc_traj_set_add(s, line, msg, sizeof(msg))) < 0) {
			cli_error("%s:%zu: %s", file, lineno, msg);
			json_object_put(line);
			goto done;
		}
	}
	if (ferror(f)) {
		cli_error("reading \"%s\" failed: %s", file, strerror(errno));
		err = ORC_ERROR;
		goto done;
	}
	if ((err = orc_traj_set_check(s, msg, sizeof(msg))) < 0)
		cli_error("%s: %s", file, msg);
done:
	free(buf);
	if (f != stdin)
		fclose(f);
	return err;
}

/* ---- running them ------------------------------------------------------- */

struct replay_run_state {
	pthread_mutex_t lock;
	const struct cli_config *cfg;
	const struct replay_opts *opts;
	struct orc_traj_set *set;
	json_object **reports;
	size_t next;
	int json_output;
};

static void *worker(void *arg)
{
	struct replay_run_state *st = arg;
	struct orc_buf text = ORC_BUF_INIT;
	json_object *report;
	size_t i;

	for (;;) {
		pthread_mutex_lock(&st->lock);
		i = st->next < st->set->n ? st->next++ : st->set->n;
		pthread_mutex_unlock(&st->lock);
		if (i == st->set->n)
			break;
		orc_buf_reset(&text);
		report = NULL;
		replay_run(&report, &text, st->cfg, &st->set->v[i], st->opts);
		pthread_mutex_lock(&st->lock);
		st->reports[i] = report;
		if (!st->json_output && text.len) {
			fputs(text.ptr, stdout);
			fflush(stdout);
		}
		pthread_mutex_unlock(&st->lock);
	}
	orc_buf_release(&text);
	return NULL;
}

static int64_t int_of(json_object *o, const char *key)
{
	json_object *v;

	return json_object_object_get_ex(o, key, &v) ? json_object_get_int64(v) : 0;
}

struct replay_args {
	struct replay_opts o;
	long parallel;
	enum cli_output output;
	const char *file;
};

static int parse_args(struct replay_args *a, struct cli_config *cfg, int argc, char **argv)
{
	int64_t v;
	int opt, rc;

	a->parallel = PARALLEL_DEFAULT;
	a->o.ready_timeout_s = 300;
	optind = 0;
	while ((opt = getopt_long(argc, argv, "o:", replay_opts, NULL)) != -1) {
		switch (opt) {
		case OPT_IMAGE:
			if (!*optarg || !orc_utf8_valid(optarg, strlen(optarg)))
				return cli_usage_error(replay_usage, "replay: invalid --image");
			a->o.image = optarg;
			break;
		case OPT_COMPARE:
			if (orc_traj_compare_parse(&a->o.compare, optarg) < 0)
				return cli_usage_error(replay_usage, "replay: --compare wants exact, exit-code or "
						       "none, not \"%s\"", optarg);
			break;
		case OPT_KEEP: a->o.keep = 1; break;
		case OPT_PARALLEL:
			if (orc_parse_i64(&v, optarg, 1, PARALLEL_MAX) < 0)
				return cli_usage_error(replay_usage, "replay: --parallel wants 1 to %d, not \"%s\"",
						       PARALLEL_MAX, optarg);
			a->parallel = (long)v;
			break;
		case OPT_READY:
			if (cli_parse_duration(&v, optarg, 1, 86400) < 0)
				return cli_usage_error(replay_usage, "replay: --ready-timeout wants 1s to 1d, "
						       "not \"%s\"", optarg);
			a->o.ready_timeout_s = (long)v;
			break;
		case 'o':
			if ((rc = cli_output_arg(&a->output, optarg, "replay", replay_usage, 0)) != 0)
				return rc;
			break;
		default:
			if (cli_common_option(cfg, opt, optarg) < 0)
				return cli_bad_option(replay_usage);
		}
	}
	if (argc - optind != 1)
		return cli_usage_error(replay_usage, "replay: expected one FILE");
	a->file = argv[optind];
	return cli_config_check(cfg);
}

int cmd_replay(struct cli_config *cfg, int argc, char **argv)
{
	struct replay_run_state st;
	struct replay_args a;
	struct orc_traj_set set = ORC_TRAJ_SET_INIT;
	pthread_t threads[PARALLEL_MAX];
	json_object *sum = NULL, *out = NULL, *arr;
	size_t i, nthreads;
	int rc, all_matched = 0;

	memset(&a, 0, sizeof(a));
	if ((rc = parse_args(&a, cfg, argc, argv)) != 0)
		return rc;
	set.max = TRAJ_MAX;
	if (load(&set, a.file) < 0) {
		rc = CLI_USAGE;
		goto done;
	}
	memset(&st, 0, sizeof(st));
	pthread_mutex_init(&st.lock, NULL);
	st.cfg = cfg;
	st.opts = &a.o;
	st.set = &set;
	st.reports = xcalloc(set.n, sizeof(*st.reports));
	st.json_output = cli_output_is_doc(a.output);
	nthreads = set.n < (size_t)a.parallel ? set.n : (size_t)a.parallel;
	for (i = 0; i < nthreads; i++)
		if (pthread_create(&threads[i], NULL, worker, &st)) {
			cli_error("pthread_create() failed; replaying on %zu threads", i);
			break;
		}
	nthreads = i;
	if (!nthreads)
		worker(&st);
	for (i = 0; i < nthreads; i++)
		pthread_join(threads[i], NULL);
	pthread_mutex_destroy(&st.lock);

	sum = orc_traj_summary(st.reports, set.n, a.o.compare, &all_matched);
	if (cli_output_is_doc(a.output)) {
		out = json_object_new_object();
		json_object_object_add(out, "summary", json_object_get(sum));
		arr = json_object_new_array();
		for (i = 0; i < set.n; i++)
			json_object_array_add(arr, json_object_get(st.reports[i]));
		json_object_object_add(out, "trajectories", arr);
		if (cli_print_doc(a.output, out) != 0)
			all_matched = 0;
	} else {
		json_object *steps = json_object_object_get(sum, "steps");
		printf("summary: %lld trajector%s (compare %s): %lld matched, %lld diverged, %lld failed; "
		       "steps: %lld matched, %lld diverged, %lld skipped, %lld errors\n",
		       (long long)int_of(sum, "trajectories"), set.n == 1 ? "y" : "ies",
		       orc_traj_compare_name(a.o.compare), (long long)int_of(sum, "matched"),
		       (long long)int_of(sum, "diverged"), (long long)int_of(sum, "errors"),
		       (long long)int_of(steps, "matched"), (long long)int_of(steps, "diverged"),
		       (long long)int_of(steps, "skipped"), (long long)int_of(steps, "errors"));
	}
	for (i = 0; i < set.n; i++)
		json_object_put(st.reports[i]);
	free(st.reports);
	rc = all_matched ? CLI_OK : CLI_DIFFERS;
done:
	json_object_put(out);
	json_object_put(sum);
	orc_traj_set_release(&set);
	return rc;
}
