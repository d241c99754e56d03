/*
 * orchard-bench SCENARIO [options]: see usage() and bench/README.md.
 */
#include "bench.h"

#include <getopt.h>
#include <math.h>

#include "strutil.h"

struct command {
	const char *name;
	int (*run)(const struct bench_cfg *cfg, struct bench_report *r);
	int needs_api;
	long n, concurrency, warmup;
	double max_seconds;
	const char *help;
};

static const struct command commands[] = {
	{ "exec-latency", bench_exec_latency, 1, 1000, 1, 20, 600,
	  "sequential `true` execs: full stack, agent alone, bash -c true (interleaved)" },
	{ "stack-exec", bench_stack_exec, 1, 1000, 1, 20, 600,
	  "only the full-stack execs of exec-latency (for profiling)" },
	{ "exec-cpu", bench_exec_cpu, 1, 300, 1, 20, 600,
	  "CPU of the stack's processes per exec (from /proc, needs --stack-dir) vs bash's" },
	{ "create-latency", bench_create_latency, 1, 200, 1, 5, 600,
	  "sequential create + wait + delete" },
	{ "scale", bench_scale, 1, 1000, 128, 0, 600,
	  "N sandboxes at concurrency C, EXECS execs each, then deleted" },
	{ "read-path", bench_read_path, 1, 20000, 64, 0, 240,
	  "GET ladder: nginx static, api root, auth only, GET /sandboxes/{id}" },
	{ "files", bench_files, 1, 5, 1, 1, 1200,
	  "raw file PUT/GET, a tar of small files, base64 (n rounds), with baselines" },
	{ "bash-baseline", bench_bash_baseline, 0, 1000, 1, 20, 300,
	  "baseline: posix_spawn/wait of bash -c true" },
	{ "agent-baseline", bench_agent_baseline, 1, 1000, 1, 20, 300,
	  "baseline: the agent alone over its unix socket (plus bash)" },
	{ "nginx-baseline", bench_nginx_baseline, 1, 20000, 64, 0, 120,
	  "baseline: nginx's own static answer through TLS" },
};

static void usage(FILE *f)
{
	size_t i;

	fprintf(f, "usage: orchard-bench SCENARIO [options]\n\nscenarios:\n");
	for (i = 0; i < sizeof(commands) / sizeof(*commands); i++)
		fprintf(f, "  %-16s %s (n=%ld, c=%ld)\n", commands[i].name, commands[i].help,
			commands[i].n, commands[i].concurrency);
	fprintf(f, "\noptions:\n"
		"  -n N                operations (sandboxes for scale, requests for read-path)\n"
		"  -c, --concurrency C client concurrency\n"
		"  --execs E           execs per sandbox in scale (4)\n"
		"  --warmup W          unrecorded operations first\n"
		"  --max-seconds S     deadline of the scenario\n"
		"  --json FILE         write the figures as JSON\n"
		"  --url URL           https://127.0.0.1:PORT ($ORCHARD_URL)\n"
		"  --api-key KEY       ($ORCHARD_API_KEY)\n"
		"  --cacert FILE       ($ORCHARD_CACERT)\n"
		"  --database-url URL  to read an agent's address ($ORCHARD_DATABASE_URL)\n"
		"  --agent unix:PATH --agent-token TOKEN   the agent, instead of the database\n"
		"  --stack-dir DIR     scripts/stack.sh var dir: measure the stack's memory and CPU\n"
		"  --image IMAGE       sandbox image (host)\n"
		"  --file-mib M        files: size of the raw file in MiB (256)\n"
		"  --small-files K     files: files in the tar (10000)\n"
		"  --baseline-url URL  files: a plain nginx serving --baseline-dir (PUT with dav)\n"
		"  --baseline-dir DIR  files: its root\n");
}

/* Only this machine: 127.0.0.1, ::1 or localhost, http or https. */
static int url_is_local(const char *url)
{
	static const char *const ok[] = {
		"https://127.0.0.1:", "https://localhost:", "https://[::1]:",
		"http://127.0.0.1:", "http://localhost:", "http://[::1]:",
	};
	size_t i;

	for (i = 0; i < sizeof(ok) / sizeof(*ok); i++)
		if (!strncmp(url, ok[i], strlen(ok[i])))
			return 1;
	return 0;
}

static int parse_long(long *out, const char *opt, const char *s, long min, long max)
{
	int64_t v;

	if (orc_parse_i64(&v, s, min, max) < 0) {
		fprintf(stderr, "orchard-bench: %s \"%s\" must be an integer in [%ld, %ld]\n",
			opt, s, min, max);
		return -1;
	}
	*out = (long)v;
	return 0;
}

enum { O_EXECS = 256, O_WARMUP, O_MAXS, O_JSON, O_URL, O_KEY, O_CACERT, O_DB, O_AGENT,
       O_TOKEN, O_STACK, O_IMAGE, O_FILE_MIB, O_SMALL, O_BURL, O_BDIR };

static const struct option longopts[] = {
	{ "concurrency", required_argument, NULL, 'c' },
	{ "execs", required_argument, NULL, O_EXECS },
	{ "warmup", required_argument, NULL, O_WARMUP },
	{ "max-seconds", required_argument, NULL, O_MAXS },
	{ "json", required_argument, NULL, O_JSON },
	{ "url", required_argument, NULL, O_URL },
	{ "api-key", required_argument, NULL, O_KEY },
	{ "cacert", required_argument, NULL, O_CACERT },
	{ "database-url", required_argument, NULL, O_DB },
	{ "agent", required_argument, NULL, O_AGENT },
	{ "agent-token", required_argument, NULL, O_TOKEN },
	{ "stack-dir", required_argument, NULL, O_STACK },
	{ "image", required_argument, NULL, O_IMAGE },
	{ "file-mib", required_argument, NULL, O_FILE_MIB },
	{ "small-files", required_argument, NULL, O_SMALL },
	{ "baseline-url", required_argument, NULL, O_BURL },
	{ "baseline-dir", required_argument, NULL, O_BDIR },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

int main(int argc, char **argv)
{
	const struct command *cmd = NULL;
	struct bench_cfg cfg;
	struct bench_report rep;
	const char *json_path = NULL;
	size_t i;
	int opt, rc;

	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	for (i = 0; i < sizeof(commands) / sizeof(*commands); i++)
		if (!strcmp(argv[1], commands[i].name))
			cmd = &commands[i];
	if (!cmd) {
		fprintf(stderr, "orchard-bench: unknown scenario \"%s\"\n", argv[1]);
		usage(stderr);
		return 2;
	}
	memset(&cfg, 0, sizeof(cfg));
	cfg.url = getenv("ORCHARD_URL");
	cfg.api_key = getenv("ORCHARD_API_KEY");
	cfg.cacert = getenv("ORCHARD_CACERT");
	cfg.database_url = getenv("ORCHARD_DATABASE_URL");
	cfg.image = "host";
	cfg.n = cmd->n;
	cfg.concurrency = cmd->concurrency;
	cfg.warmup = cmd->warmup;
	cfg.execs = 4;
	cfg.max_seconds = cmd->max_seconds;
	cfg.file_bytes = (size_t)256 << 20;
	cfg.small_files = 10000;
	optind = 2;
	while ((opt = getopt_long(argc, argv, "n:c:h", longopts, NULL)) != -1) {
		long v;

		switch (opt) {
		case 'n':
			if (parse_long(&cfg.n, "-n", optarg, 1, 10000000) < 0)
				return 2;
			break;
		case 'c':
			if (parse_long(&cfg.concurrency, "-c", optarg, 1, 1024) < 0)
				return 2;
			break;
		case O_EXECS:
			if (parse_long(&cfg.execs, "--execs", optarg, 0, 1000) < 0)
				return 2;
			break;
		case O_WARMUP:
			if (parse_long(&cfg.warmup, "--warmup", optarg, 0, 100000) < 0)
				return 2;
			break;
		case O_MAXS:
			if (parse_long(&v, "--max-seconds", optarg, 1, 86400) < 0)
				return 2;
			cfg.max_seconds = (double)v;
			break;
		case O_JSON: json_path = optarg; break;
		case O_URL: cfg.url = optarg; break;
		case O_KEY: cfg.api_key = optarg; break;
		case O_CACERT: cfg.cacert = optarg; break;
		case O_DB: cfg.database_url = optarg; break;
		case O_AGENT: cfg.agent = optarg; break;
		case O_TOKEN: cfg.agent_token = optarg; break;
		case O_STACK: cfg.stack_dir = optarg; break;
		case O_IMAGE: cfg.image = optarg; break;
		case O_FILE_MIB:
			if (parse_long(&v, "--file-mib", optarg, 1, 2048) < 0)
				return 2;
			cfg.file_bytes = (size_t)v << 20;
			break;
		case O_SMALL:
			if (parse_long(&cfg.small_files, "--small-files", optarg, 1, 1000000) < 0)
				return 2;
			break;
		case O_BURL: cfg.baseline_url = optarg; break;
		case O_BDIR: cfg.baseline_dir = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "orchard-bench: unexpected argument \"%s\"\n", argv[optind]);
		return 2;
	}
	/* agent-baseline with --agent and --agent-token needs no stack */
	if (cmd->needs_api && !(!strcmp(cmd->name, "agent-baseline") && cfg.agent && cfg.agent_token)) {
		if (!cfg.url || !cfg.api_key) {
			fprintf(stderr, "orchard-bench: %s needs --url and --api-key "
				"(or ORCHARD_URL and ORCHARD_API_KEY)\n", cmd->name);
			return 2;
		}
		if (!url_is_local(cfg.url)) {
			fprintf(stderr, "orchard-bench: refusing \"%s\": only 127.0.0.1, ::1 or "
				"localhost are benchmarked\n", cfg.url);
			return 2;
		}
	}
	if (cfg.baseline_url && !url_is_local(cfg.baseline_url)) {
		fprintf(stderr, "orchard-bench: refusing baseline \"%s\": only 127.0.0.1, ::1 or "
			"localhost\n", cfg.baseline_url);
		return 2;
	}
	if (cfg.agent && strncmp(cfg.agent, "unix:", 5)) {
		fprintf(stderr, "orchard-bench: --agent must be unix:PATH\n");
		return 2;
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		fprintf(stderr, "orchard-bench: curl_global_init failed\n");
		return 1;
	}
	bench_report_init(&rep, cmd->name, &cfg);
	rc = cmd->run(&cfg, &rep);
	if (rc == 0 && json_path && bench_report_write(&rep, json_path) < 0)
		rc = -1;
	bench_report_release(&rep);
	curl_global_cleanup();
	return rc == 0 ? 0 : 1;
}
