/*
 * exec-cpu (issue 23): the CPU the stack's own processes spend per exec,
 * read from /proc, against the CPU of spawning the same command with bash
 * here, in the same run.
 *
 * Two commands, N sequential execs of each through nginx+TLS+api+agent:
 * `true`, and a command that writes its output in PIECES pieces (the
 * per-piece cost of storing output for attached readers). Before and after
 * each block of execs, every process of the stack (bench_stack_procs) is
 * read from /proc/PID/stat: utime+stime of the process itself, plus
 * cutime+cstime, the CPU of its children that ended and were reaped (a
 * postgres backend that exited, say). The agents' reaped children are the
 * commands themselves: they are reported apart, as "the commands", and
 * not counted as the stack's. The baseline blocks, interleaved with the
 * stack's, spawn `bash -c COMMAND` here (bench_spawn_bash) and take its CPU
 * from getrusage(RUSAGE_CHILDREN). The benchmark's own CPU (the client's
 * TLS and JSON) is printed too and counted nowhere.
 *
 * Kernel accounting is in clock ticks per process but sums the exact run
 * time, so the figures are good to a few percent over a few hundred execs.
 * Anything else the stack does meanwhile (the controller's passes, the
 * api's lease thread, autovacuum) is counted too: it is the stack's CPU.
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "xalloc.h"

#define BLOCK 100
#define PIECES 5
#define PIECES_SCRIPT "for i in 1 2 3 4 5; do echo line $i; sleep 0.02; done"
#define GOAL_MS 1.0   /* issue 23: stack CPU per exec */

static const char *const part_names[BENCH_PROC_PARTS] = {
	"other", "postgres", "orchard-api", "orchard-controller", "nginx", "sandbox (agent, bwrap)",
};

struct cpu_proc {
	long pid;
	int in;
	double own_ms, child_ms;
};

struct cpu_snap {
	struct cpu_proc *p;
	size_t n;
};

/* utime, stime, cutime, cstime (fields 14-17 of /proc/PID/stat) in ms. */
static int read_times(struct cpu_proc *c, long pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut, st;
	long long cut, cst;
	double tick = 1000.0 / (double)sysconf(_SC_CLK_TCK);

	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	if (bench_read_small(path, buf, sizeof(buf)) < 0 || !(p = strrchr(buf, ')')))
		return -1;
	/* after "pid (comm)": state ppid pgrp session tty_nr tpgid flags
	 * minflt cminflt majflt cmajflt utime stime cutime cstime */
	if (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %lld %lld",
		   &ut, &st, &cut, &cst) != 4)
		return -1;
	c->pid = pid;
	c->own_ms = (double)(ut + st) * tick;
	c->child_ms = (double)(cut + cst) * tick;
	return 0;
}

static int snap_take(struct cpu_snap *s, const char *stack_dir)
{
	struct bench_proc *v = NULL;
	size_t n, i;

	s->n = 0;
	s->p = NULL;
	if (!(n = bench_stack_procs(&v, stack_dir)) && !v)
		return -1;
	s->p = xcalloc(n ? n : 1, sizeof(*s->p));
	for (i = 0; i < n; i++)
		if (read_times(&s->p[s->n], v[i].pid) == 0)
			s->p[s->n++].in = v[i].in;
	free(v);
	return 0;
}

static int cmp_pid(const void *a, const void *b)
{
	const struct cpu_proc *x = a, *y = b;

	return (x->pid > y->pid) - (x->pid < y->pid);
}

/* Add what each part spent between a and b (both sorted by pid, as
 * bench_stack_procs returns them) to parts, the commands' CPU to *cmds. */
static void snap_delta(double parts[BENCH_PROC_PARTS], double *cmds, const struct cpu_snap *a,
		       const struct cpu_snap *b)
{
	size_t i;

	for (i = 0; i < b->n; i++) {
		const struct cpu_proc *e = &b->p[i];
		const struct cpu_proc *s = bsearch(e, a->p, a->n, sizeof(*a->p), cmp_pid);
		double own = e->own_ms, child = e->child_ms;

		if (s && s->own_ms <= e->own_ms && s->child_ms <= e->child_ms) {
			own -= s->own_ms;   /* else a new process (or a reused pid) */
			child -= s->child_ms;
		}
		parts[e->in] += own;
		if (e->in == BENCH_PROC_SANDBOX)
			*cmds += child;
		else
			parts[e->in] += child;
	}
}

static double rusage_ms(int who)
{
	struct rusage ru;

	getrusage(who, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

/* One command's figures: sums over its blocks. */
struct cpu_case {
	const char *label, *script, *body;
	struct bench_op op;
	double parts[BENCH_PROC_PARTS], cmds_ms, client_ms, bash_ms;
	long execs, spawns;
};

static int cpu_block(struct cpu_case *c, struct bench_http *api, const char *path,
		     const char *stack_dir, long b)
{
	struct cpu_snap s0, s1;
	double t0, ms;
	long i, ok0 = (long)c->op.n_ok;

	t0 = rusage_ms(RUSAGE_CHILDREN);
	for (i = 0; i < b; i++) {
		if (bench_spawn_bash(c->script, &ms) < 0)
			return -1;
		c->spawns++;
	}
	c->bash_ms += rusage_ms(RUSAGE_CHILDREN) - t0;
	if (snap_take(&s0, stack_dir) < 0)
		return -1;
	t0 = rusage_ms(RUSAGE_SELF);
	for (i = 0; i < b; i++)
		bench_exec_one(&c->op, NULL, api, path, c->body);
	c->client_ms += rusage_ms(RUSAGE_SELF) - t0;
	if (snap_take(&s1, stack_dir) < 0) {
		free(s0.p);
		return -1;
	}
	snap_delta(c->parts, &c->cmds_ms, &s0, &s1);
	c->execs += (long)c->op.n_ok - ok0;
	free(s0.p);
	free(s1.p);
	return 0;
}

static void cpu_report(struct bench_report *r, struct cpu_case *c, int with_target)
{
	json_object *o = json_object_new_object(), *parts = json_object_new_object();
	double total = 0, n = c->execs ? (double)c->execs : 1, bash;
	char name[96];
	int k;

	printf("\nCPU per exec of `%s`, %ld execs (ms):\n", c->label, c->execs);
	for (k = 0; k < BENCH_PROC_PARTS; k++) {
		if (k == BENCH_PROC_NONE)
			continue;
		total += c->parts[k];
		printf("  %-28s %8.3f\n", part_names[k], c->parts[k] / n);
		json_object_object_add(parts, part_names[k], json_object_new_double(c->parts[k] / n));
	}
	bash = c->spawns ? c->bash_ms / (double)c->spawns : 0;
	printf("  %-28s %8.3f\n", "= the stack", total / n);
	printf("  %-28s %8.3f   (not the stack's)\n", "the commands in the sandbox", c->cmds_ms / n);
	printf("  %-28s %8.3f   (counted nowhere)\n", "the client (orchard-bench)", c->client_ms / n);
	printf("  %-28s %8.3f   (%ld spawns, same run)\n", "bash -c spawned here", bash, c->spawns);
	json_object_object_add(o, "command", json_object_new_string(c->script));
	json_object_object_add(o, "execs", json_object_new_int64(c->execs));
	json_object_object_add(o, "stack_ms_per_exec", json_object_new_double(total / n));
	json_object_object_add(o, "parts_ms_per_exec", parts);
	json_object_object_add(o, "commands_ms_per_exec", json_object_new_double(c->cmds_ms / n));
	json_object_object_add(o, "client_ms_per_exec", json_object_new_double(c->client_ms / n));
	json_object_object_add(o, "bash_ms_per_spawn", json_object_new_double(bash));
	snprintf(name, sizeof(name), "cpu_%s", c->label[0] == 't' ? "true" : "pieces");
	bench_report_extra(r, name, o);
	snprintf(name, sizeof(name), "stack CPU/exec / bash CPU (%s)", c->label);
	bench_report_ratio(r, name, total / n, bash, "the stack's CPU per exec against a bare spawn");
	if (with_target)
		bench_report_target(r, "stack CPU per `true` exec", total / n, 1, GOAL_MS, "ms");
}

int bench_exec_cpu(const struct bench_cfg *cfg, struct bench_report *r)
{
	struct cpu_case cases[2] = {
		{ .label = "true", .script = "true", .body = BENCH_EXEC_BODY },
		{ .label = "5 output pieces", .script = PIECES_SCRIPT,
		  .body = "{\"command\":\"" PIECES_SCRIPT "\",\"wait\":true}" },
	};
	struct bench_http api;
	char id[64], path[128];
	double deadline = bench_now_ms() + cfg->max_seconds * 1e3;
	long done = 0, b;
	size_t i;
	int err = -1;

	if (!cfg->stack_dir) {
		fprintf(stderr, "orchard-bench: exec-cpu needs --stack-dir (the stack's var dir)\n");
		return -1;
	}
	for (i = 0; i < 2; i++)
		bench_op_init(&cases[i].op, cases[i].label);
	if (bench_http_init_api(&api, cfg) < 0)
		goto out;
	if (bench_sandbox_create_ready(id, sizeof(id), &api, cfg->image, 60) < 0) {
		fprintf(stderr, "orchard-bench: sandbox for exec-cpu: %s\n", api.err);
		goto release;
	}
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", id);
	for (i = 0; i < (size_t)cfg->warmup; i++)
		bench_exec_one(&cases[0].op, NULL, &api, path, cases[0].body);
	bench_op_release(&cases[0].op);
	bench_op_init(&cases[0].op, cases[0].label);
	while (done < cfg->n && bench_now_ms() < deadline) {
		b = cfg->n - done < BLOCK ? cfg->n - done : BLOCK;
		for (i = 0; i < 2; i++)
			if (cpu_block(&cases[i], &api, path, cfg->stack_dir, b) < 0) {
				fprintf(stderr, "orchard-bench: exec-cpu: cannot read the stack's processes "
					"or spawn bash\n");
				goto delete;
			}
		done += b;
	}
	if (bench_now_ms() >= deadline)
		bench_report_note(r, "deadline of %.0f s reached before n=%ld", cfg->max_seconds, cfg->n);
	{
		struct bench_op ops[2] = { cases[0].op, cases[1].op };

		bench_report_ops(r, ops, 2);
	}
	cpu_report(r, &cases[0], 1);
	cpu_report(r, &cases[1], 0);
	err = cases[0].op.n_fail || cases[1].op.n_fail ? -1 : 0;
delete:
	bench_sandbox_delete(&api, id);
release:
	bench_http_release(&api);
out:
	for (i = 0; i < 2; i++)
		bench_op_release(&cases[i].op);
	return err;
}
