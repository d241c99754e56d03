/*
 * Scenario 1, exec latency: `true` through nginx+TLS+api+agent, straight to
 * the agent over its unix socket, and `bash -c true` spawned here. The three
 * run interleaved in blocks in the same process, so a noisy neighbour hurts
 * all three alike and the ratios stay meaningful.
 */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "json.h"

#define BLOCK 50
#define AGENT_BODY "{\"command\":\"true\"}"

/*
 * The baseline: bash -c true spawned the cheapest way there is, the way the
 * agent spawns (posix_spawn, vfork-like), then waited for. Its environment
 * is the one a command in a sandbox has (PATH and HOME from bwrap,
 * SHELL), not the benchmark's own: a LANG makes bash load a locale, and a
 * missing SHELL makes it read the password database, so the caller's shell
 * would move the ratio by 20 % (bench/results/agentexec-2026-12-03c.md).
 */
int bench_spawn_bash(const char *script, double *ms_out)
{
	static char a0[] = "bash", a1[] = "-c";
	static char e0[] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		e1[] = "HOME=/root", e2[] = "SHELL=/bin/bash";
	char a2[256];
	char *const argv[] = { a0, a1, a2, NULL };
	char *const envp[] = { e0, e1, e2, NULL };
	double t0 = bench_now_ms();
	posix_spawn_file_actions_t fa;
	int status, rc, fd;
	pid_t pid;

	if ((size_t)snprintf(a2, sizeof(a2), "%s", script) >= sizeof(a2))
		return -1;
	posix_spawn_file_actions_init(&fa);
	for (fd = 0; fd < 3; fd++)
		posix_spawn_file_actions_addopen(&fa, fd, "/dev/null", O_RDWR, 0);
	rc = posix_spawn(&pid, "/bin/bash", &fa, NULL, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	if (rc != 0)
		return -1;
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR)
			return -1;
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return -1;
	*ms_out = bench_now_ms() - t0;
	return 0;
}

int bench_spawn_bash_true(double *ms_out)
{
	return bench_spawn_bash("true", ms_out);
}

static void one_bash(struct bench_op *op)
{
	double ms;

	if (bench_spawn_bash_true(&ms) < 0) {
		bench_op_fail(op, "bash -c true failed");
		return;
	}
	bench_op_ok(op, ms);
	op->busy_s += ms / 1e3;
}

/*
 * Where an exec's time goes, from what the answers themselves report: a
 * job's created_at/started_at/completed_at (the api's clock), an agent's
 * duration_ms (the command alone). parts: [0] job created -> started,
 * [1] started -> completed, [2] the rest of the client's time (nginx, TLS,
 * auth, the api's request handling, the database before created_at).
 * For the agent: [0] the command's duration_ms, [2] the rest.
 */
void bench_exec_parts(struct bench_op *parts, json_object *o, double ms)
{
	double c = 0, st = 0, done = 0, dur = 0;

	if (!parts)
		return;
	if (!orc_json_get_number(o, "created_at", &c, 0, 1e11, NULL, 0) &&
	    !orc_json_get_number(o, "started_at", &st, 0, 1e11, NULL, 0) &&
	    !orc_json_get_number(o, "completed_at", &done, 0, 1e11, NULL, 0)) {
		bench_op_ok(&parts[0], (st - c) * 1e3);
		bench_op_ok(&parts[1], (done - st) * 1e3);
		bench_op_ok(&parts[2], ms - (done - c) * 1e3);
	} else if (!orc_json_get_number(o, "duration_ms", &dur, 0, 1e9, NULL, 0)) {
		bench_op_ok(&parts[0], dur);
		bench_op_ok(&parts[2], ms - dur);
	}
}

void bench_exec_one(struct bench_op *op, struct bench_op *parts, struct bench_http *c,
		     const char *path, const char *body)
{
	json_object *o = NULL;
	int64_t code = -1;
	double t0 = bench_now_ms(), ms;

	if (bench_http_do(c, "POST", path, body, 60000) < 0) {
		bench_op_fail(op, "%s", c->err);
		return;
	}
	ms = bench_now_ms() - t0;
	op->busy_s += ms / 1e3;
	o = bench_http_json(c);
	if (c->status != 200 || !o ||
	    orc_json_get_int(o, "exit_code", &code, -1000, 1000, NULL, 0) || code != 0) {
		bench_op_fail(op, "HTTP %ld %.120s", c->status, orc_buf_cstr(&c->body));
		json_object_put(o);
		return;
	}
	bench_exec_parts(parts, o, ms);
	json_object_put(o);
	bench_op_ok(op, ms);
}

struct exec_ctx {
	struct bench_http api, agent;
	int have_api, have_agent;
	char id[64];
	char stack_path[128];
	char addr[512], token[512];
};

static int exec_setup(struct exec_ctx *x, const struct bench_cfg *cfg, int want_api,
		      int want_agent, struct bench_report *r)
{
	memset(x, 0, sizeof(*x));
	/* The agent alone, given its address: no stack needed (before/after
	 * comparisons of agent builds). */
	if (!want_api && cfg->agent && cfg->agent_token)
		goto agent;
	if (bench_http_init_api(&x->api, cfg) < 0)
		return -1;
	x->have_api = 1;
	if (bench_sandbox_create_ready(x->id, sizeof(x->id), &x->api, cfg->image, 60) < 0) {
		fprintf(stderr, "orchard-bench: sandbox for the exec scenario: %s\n", x->api.err);
		return -1;
	}
	snprintf(x->stack_path, sizeof(x->stack_path), "/v1/sandboxes/%s/exec", x->id);
	bench_report_extra(r, "sandbox_id", json_object_new_string(x->id));
	if (!want_agent)
		return 0;
agent:
	if (cfg->agent && cfg->agent_token) {
		snprintf(x->addr, sizeof(x->addr), "%s", cfg->agent);
		snprintf(x->token, sizeof(x->token), "%s", cfg->agent_token);
	} else if (bench_sandbox_agent(x->addr, sizeof(x->addr), x->token, sizeof(x->token),
				       cfg->database_url, x->id) < 0) {
		fprintf(stderr, "orchard-bench: cannot read the agent address of %s "
			"(set ORCHARD_DATABASE_URL, or --agent and --agent-token)\n", x->id);
		return -1;
	}
	if (bench_http_init_agent(&x->agent, x->addr, x->token) < 0) {
		fprintf(stderr, "orchard-bench: agent address \"%s\" is not unix:PATH\n", x->addr);
		return -1;
	}
	x->have_agent = 1;
	return 0;
}

static void exec_teardown(struct exec_ctx *x)
{
	if (x->have_api && x->id[0])
		bench_sandbox_delete(&x->api, x->id);
	if (x->have_api)
		bench_http_release(&x->api);
	if (x->have_agent)
		bench_http_release(&x->agent);
}

/* Interleaved blocks of BLOCK: bash, agent, stack (each enabled one). */
static void exec_rounds(struct exec_ctx *x, const struct bench_cfg *cfg,
			struct bench_op *bash, struct bench_op *agent,
			struct bench_op *stack, struct bench_op *parts, long n, double deadline)
{
	long done = 0, i;

	while (done < n && bench_now_ms() < deadline) {
		long b = n - done < BLOCK ? n - done : BLOCK;
		for (i = 0; bash && i < b; i++)
			one_bash(bash);
		for (i = 0; agent && i < b; i++)
			bench_exec_one(agent, parts ? parts + 3 : NULL, &x->agent, "/exec", AGENT_BODY);
		for (i = 0; stack && i < b; i++)
			bench_exec_one(stack, parts, &x->api, x->stack_path, BENCH_EXEC_BODY);
		done += b;
	}
	(void)cfg;
}

static int exec_run(const struct bench_cfg *cfg, struct bench_report *r, int want_bash,
		    int want_agent, int want_stack)
{
	struct exec_ctx x;
	struct bench_op ops[3], warm[3], sel[3], parts[6];
	struct bench_stats sb, sa, ss;
	double deadline = bench_now_ms() + cfg->max_seconds * 1e3;
	size_t nops = 0, i;
	int err = -1;

	bench_op_init(&ops[0], "bash -c true (posix_spawn)");
	bench_op_init(&ops[1], "agent /exec (unix)");
	bench_op_init(&ops[2], "stack exec wait (https)");
	for (i = 0; i < 3; i++)
		bench_op_init(&warm[i], "warmup");
	bench_op_init(&parts[0], " job created -> started");
	bench_op_init(&parts[1], " job started -> completed");
	bench_op_init(&parts[2], " outside the job");
	bench_op_init(&parts[3], " agent duration_ms");
	bench_op_init(&parts[4], " (unused)");
	bench_op_init(&parts[5], " agent HTTP overhead");
	if ((want_agent || want_stack) &&
	    exec_setup(&x, cfg, want_stack, want_agent, r) < 0) {
		exec_teardown(&x);
		goto done;
	}
	if (!want_agent && !want_stack)
		memset(&x, 0, sizeof(x));
	exec_rounds(&x, cfg, want_bash ? &warm[0] : NULL, want_agent ? &warm[1] : NULL,
		    want_stack ? &warm[2] : NULL, NULL, cfg->warmup, deadline);
	exec_rounds(&x, cfg, want_bash ? &ops[0] : NULL, want_agent ? &ops[1] : NULL,
		    want_stack ? &ops[2] : NULL, parts, cfg->n, deadline);
	if (want_agent || want_stack)
		exec_teardown(&x);
	if (bench_now_ms() >= deadline)
		bench_report_note(r, "deadline of %.0f s reached before n=%ld", cfg->max_seconds, cfg->n);

	if (want_bash)
		sel[nops++] = ops[0];
	if (want_agent)
		sel[nops++] = ops[1];
	if (want_stack)
		sel[nops++] = ops[2];
	bench_report_ops(r, sel, nops);
	/* The breakdowns: no throughput of their own. */
	if (want_stack || want_agent) {
		struct bench_op br[5];
		size_t nb = 0;

		if (want_stack) {
			br[nb++] = parts[0];
			br[nb++] = parts[1];
			br[nb++] = parts[2];
		}
		if (want_agent) {
			br[nb++] = parts[3];
			br[nb++] = parts[5];
		}
		printf("where the time goes (from the answers' own timestamps):\n");
		bench_report_ops(r, br, nb);
	}
	bench_op_stats(&sb, &ops[0]);
	if (want_agent && want_bash) {
		bench_op_stats(&sa, &ops[1]);
		bench_report_ratio(r, "agent p50 / bash p50", sa.p50, sb.p50,
				   "agent HTTP + its spawn vs a bare spawn/wait");
		bench_report_target(r, "agent alone p50 / bash p50", sa.p50 / sb.p50, 1, 1.1, "x");
	}
	if (want_stack && want_bash) {
		bench_op_stats(&ss, &ops[2]);
		bench_report_ratio(r, "stack p50 / bash p50", ss.p50, sb.p50,
				   "full stack vs a bare spawn/wait");
		if (want_agent) {
			bench_report_ratio(r, "stack p50 / agent p50", ss.p50, sa.p50,
					   "nginx+TLS+api+database on top of the agent");
			bench_report_delta(r, "stack p50 - agent p50", ss.p50 - sa.p50, "ms",
					   "what the layers above the agent add per exec");
		}
		bench_report_target(r, "full stack p50 / bash p50", ss.p50 / sb.p50, 1, 1.3, "x");
	}
	err = 0;
done:
	for (i = 0; i < 3; i++)
		bench_op_release(&ops[i]);
	for (i = 0; i < 3; i++)
		bench_op_release(&warm[i]);
	for (i = 0; i < 6; i++)
		bench_op_release(&parts[i]);
	return err;
}

int bench_exec_latency(const struct bench_cfg *cfg, struct bench_report *r)
{
	return exec_run(cfg, r, 1, 1, 1);
}

int bench_stack_exec(const struct bench_cfg *cfg, struct bench_report *r)
{
	return exec_run(cfg, r, 0, 0, 1);
}

int bench_bash_baseline(const struct bench_cfg *cfg, struct bench_report *r)
{
	return exec_run(cfg, r, 1, 0, 0);
}

int bench_agent_baseline(const struct bench_cfg *cfg, struct bench_report *r)
{
	return exec_run(cfg, r, 1, 1, 0);
}
