/*
 * orchardctl replay FILE [--image X] [--compare exact|exit-code|none]
 *                        [--keep] [--parallel N] [-o json]
 *
 * Reads the trajectories of FILE (one, or many from a bulk export), checks
 * that each is a complete trajectory of a version we read, replays them on
 * up to N threads (replay.c), prints each one's report as it finishes and
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
	"                         [--keep] [--parallel N] [-o json]\n"
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
	"  -o json             print the report as JSON instead of text\n";

enum { OPT_IMAGE = CLI_OPT_FIRST_FREE, OPT_COMPARE, OPT_KEEP, OPT_PARALLEL, OPT_READY };

const struct option replay_opts[] = {
	CLI_COMMON_OPTIONS,
	{ "image", required_argument, NULL, OPT_IMAGE },
	{ "compare", required_argument, NULL, OPT_COMPARE },
	{ "keep", no_argument, NULL, OPT_KEEP },
	{ "parallel", required_argument, NULL, OPT_PARALLEL },
	{ "ready-timeout", required_argument, NULL, OPT_READY },
	{ "output", required_argument, NULL, 'o' },
	{ NULL, 0, NULL, 0 },
};

static const char *const compare_names[] = { "exact", "exit-code", "none" };

/* ---- reading FILE ------------------------------------------------------- */

struct traj_set {
	struct replay_traj *v;
	size_t n, alloc;
};

static void traj_set_release(struct traj_set *s)
{
	size_t i;

	for (i = 0; i < s->n; i++)
		json_object_put(s->v[i].lines);
	free(s->v);
	memset(s, 0, sizeof(*s));
}

static struct replay_traj *traj_find(struct traj_set *s, const char *id)
{
	size_t i;

	/* Lines of one trajectory are contiguous: look at the newest first. */
	for (i = s->n; i-- > 0;)
		if (!strcmp(s->v[i].sandbox_id, id))
			return &s->v[i];
	return NULL;
}

static int check_header(json_object *line, const char *file, size_t lineno)
{
	json_object *v;

	if (strcmp(cli_field_text(line, "format"), REPLAY_FORMAT)) {
		cli_error("%s:%zu: not an %s header (format \"%s\")", file, lineno, REPLAY_FORMAT,
			  cli_field_text(line, "format"));
		return ORC_EINVALID;
	}
	if (!json_object_object_get_ex(line, "version", &v) || !json_object_is_type(v, json_type_int) ||
	    json_object_get_int64(v) != REPLAY_VERSION) {
		cli_error("%s:%zu: trajectory version %s is not supported (this orchardctl reads version %d)",
			  file, lineno, cli_field_text(line, "version"), REPLAY_VERSION);
		return ORC_EINVALID;
	}
	if (!json_object_object_get_ex(line, "sandbox", &v) || !json_object_is_type(v, json_type_object)) {
		cli_error("%s:%zu: the header has no \"sandbox\" object", file, lineno);
		return ORC_EINVALID;
	}
	return 0;
}

/* One line: a header starts a trajectory, other lines join theirs. */
static int add_line(struct traj_set *s, json_object *line, const char *file, size_t lineno)
{
	const char *type = cli_field_text(line, "type"), *id = cli_field_text(line, "sandbox_id");
	struct replay_traj *t;
	int err;

	if (!strcmp(id, "-")) {
		cli_error("%s:%zu: a line without \"sandbox_id\"", file, lineno);
		return ORC_EINVALID;
	}
	if (!strcmp(type, "error")) {
		cli_error("%s:%zu: the export of %s failed on the server: %s", file, lineno, id,
			  cli_field_text(line, "detail"));
		return ORC_EINVALID;
	}
	if (!strcmp(type, "header")) {
		if ((err = check_header(line, file, lineno)) < 0)
			return err;
		if (s->n == TRAJ_MAX) {
			cli_error("%s: more than %d trajectories", file, TRAJ_MAX);
			return ORC_ETOOBIG;
		}
		if (s->n == s->alloc) {
			s->alloc = s->alloc ? 2 * s->alloc : 16;
			s->v = xrealloc(s->v, orc_mul_size(s->alloc, sizeof(*s->v)));
		}
		t = &s->v[s->n++];
		memset(t, 0, sizeof(*t));
		t->lines = json_object_new_array();
		json_object_array_add(t->lines, line);
		t->sandbox_id = json_object_get_string(json_object_object_get(line, "sandbox_id"));
		return 0;
	}
	if (!(t = traj_find(s, id)) || t->complete) {
		cli_error("%s:%zu: a \"%s\" line of %s outside its trajectory (header ... end)", file, lineno,
			  type, id);
		return ORC_EINVALID;
	}
	json_object_array_add(t->lines, line);
	if (!strcmp(type, "end"))
		t->complete = 1;
	return 0;
}

static int load(struct traj_set *s, const char *file)
{
	FILE *f = strcmp(file, "-") ? fopen(file, "re") : stdin;
	char *buf = NULL, msg[256];
	size_t cap = 0, lineno = 0, i;
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
		if ((err = add_line(s, line, file, lineno)) < 0) {
			json_object_put(line);
			goto done;
		}
	}
	if (ferror(f)) {
		cli_error("reading \"%s\" failed: %s", file, strerror(errno));
		err = ORC_ERROR;
		goto done;
	}
	if (!s->n) {
		cli_error("%s: no trajectory in it", file);
		err = ORC_EINVALID;
		goto done;
	}
	for (i = 0; i < s->n; i++) {
		if (!s->v[i].complete) {
			cli_error("%s: the trajectory of %s has no \"end\" line (a truncated export?)", file,
				  s->v[i].sandbox_id);
			err = ORC_EINVALID;
			goto done;
		}
	}
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
	struct traj_set *set;
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

/* The summary object; *all_matched says whether the exit status is 0. */
static json_object *summarize(json_object **reports, size_t n, enum replay_compare mode, int *all_matched)
{
	static const char *const counts[] = { "matched", "diverged", "skipped", "errors" };
	json_object *sum = json_object_new_object(), *steps = json_object_new_object();
	int64_t totals[4] = { 0 }, matched = 0, diverged = 0, failed = 0;
	size_t i, k;

	for (i = 0; i < n; i++) {
		const char *res = cli_field_text(reports[i], "result");
		if (!strcmp(res, "match"))
			matched++;
		else if (!strcmp(res, "diverged"))
			diverged++;
		else
			failed++;
		for (k = 0; k < 4; k++)
			totals[k] += int_of(reports[i], counts[k]);
	}
	json_object_object_add(sum, "trajectories", json_object_new_int64((int64_t)n));
	json_object_object_add(sum, "matched", json_object_new_int64(matched));
	json_object_object_add(sum, "diverged", json_object_new_int64(diverged));
	json_object_object_add(sum, "errors", json_object_new_int64(failed));
	json_object_object_add(sum, "compare", json_object_new_string(compare_names[mode]));
	for (k = 0; k < 4; k++)
		json_object_object_add(steps, counts[k], json_object_new_int64(totals[k]));
	json_object_object_add(sum, "steps", steps);
	*all_matched = matched == (int64_t)n;
	return sum;
}

struct replay_args {
	struct replay_opts o;
	long parallel;
	int json_output;
	const char *file;
};

static int parse_args(struct replay_args *a, struct cli_config *cfg, int argc, char **argv)
{
	int64_t v;
	size_t i;
	int opt;

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
			for (i = 0; i < 3 && strcmp(optarg, compare_names[i]); i++)
				;
			if (i == 3)
				return cli_usage_error(replay_usage, "replay: --compare wants exact, exit-code or "
						       "none, not \"%s\"", optarg);
			a->o.compare = (enum replay_compare)i;
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
			if (strcmp(optarg, "json"))
				return cli_usage_error(replay_usage, "replay: -o wants json, not \"%s\"", optarg);
			a->json_output = 1;
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
	struct traj_set set = { 0 };
	pthread_t threads[PARALLEL_MAX];
	json_object *sum = NULL, *out = NULL, *arr;
	size_t i, nthreads;
	int rc, all_matched = 0;

	memset(&a, 0, sizeof(a));
	if ((rc = parse_args(&a, cfg, argc, argv)) != 0)
		return rc;
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
	st.json_output = a.json_output;
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

	sum = summarize(st.reports, set.n, a.o.compare, &all_matched);
	if (a.json_output) {
		out = json_object_new_object();
		json_object_object_add(out, "summary", json_object_get(sum));
		arr = json_object_new_array();
		for (i = 0; i < set.n; i++)
			json_object_array_add(arr, json_object_get(st.reports[i]));
		json_object_object_add(out, "trajectories", arr);
		cli_print_json(out);
	} else {
		json_object *steps = json_object_object_get(sum, "steps");
		printf("summary: %lld trajector%s (compare %s): %lld matched, %lld diverged, %lld failed; "
		       "steps: %lld matched, %lld diverged, %lld skipped, %lld errors\n",
		       (long long)int_of(sum, "trajectories"), set.n == 1 ? "y" : "ies",
		       compare_names[a.o.compare], (long long)int_of(sum, "matched"),
		       (long long)int_of(sum, "diverged"), (long long)int_of(sum, "errors"),
		       (long long)int_of(steps, "matched"), (long long)int_of(steps, "diverged"),
		       (long long)int_of(steps, "skipped"), (long long)int_of(steps, "errors"));
	}
	for (i = 0; i < set.n; i++)
		json_object_put(st.reports[i]);
	free(st.reports);
	rc = all_matched ? CLI_OK : CLI_FAIL;
done:
	json_object_put(out);
	json_object_put(sum);
	traj_set_release(&set);
	return rc;
}
