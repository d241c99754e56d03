/*
 * Scenario 3, scale: N sandboxes created concurrently (client concurrency
 * C), then `execs` execs of `true` in each, then all deleted; in three
 * phases, so that all N are alive at once between the first two (the
 * plateau where memory per sandbox is measured). Each worker thread keeps
 * one kept-alive connection for all three phases.
 */
#include "bench.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "json.h"
#include "xalloc.h"

enum { OP_CREATE, OP_WAIT, OP_READY, OP_EXEC, OP_DELETE, OP_QUEUED, OP_RUN, OP_OUTSIDE, NOPS };
static const char *const op_names[NOPS] = {
	"create (POST)", "wait until ready", "create -> ready", "exec true (wait)", "delete",
	" exec: job created->started", " exec: job started->done", " exec: outside the job",
};

enum phase { PHASE_CREATE, PHASE_EXEC, PHASE_DELETE };

struct scale {
	const struct bench_cfg *cfg;
	enum phase phase;
	atomic_long next;
	char (*ids)[64];      /* "" when the sandbox was not created */
	double deadline;
};

struct worker {
	struct scale *sc;
	struct bench_http c;
	struct bench_op ops[NOPS];
	pthread_t tid;
};

static void do_create(struct worker *w, long i)
{
	struct bench_http *c = &w->c;
	json_object *o = NULL;
	const char *sid = NULL, *st = NULL;
	char path[128];
	double t0 = bench_now_ms(), t1, t2;
	long left = (long)((w->sc->deadline - t0) / 1e3);

	if (left < 1) {
		bench_op_fail(&w->ops[OP_CREATE], "deadline passed before the create");
		return;
	}
	if (bench_http_do(c, "POST", "/v1/sandboxes", "{\"image\":\"host\"}", 60000) < 0 ||
	    (c->status != 200 && c->status != 201) || !(o = bench_http_json(c)) ||
	    orc_json_get_str(o, "sandbox_id", &sid, NULL, 0) || !bench_valid_id(sid)) {
		bench_op_fail(&w->ops[OP_CREATE], "HTTP %ld %s %.100s", c->status, c->err,
			      orc_buf_cstr(&c->body));
		json_object_put(o);
		return;
	}
	snprintf(w->sc->ids[i], sizeof(w->sc->ids[i]), "%s", sid);
	json_object_put(o);
	o = NULL;
	t1 = bench_now_ms();
	bench_op_ok(&w->ops[OP_CREATE], t1 - t0);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/wait?timeout=%ld", w->sc->ids[i], left);
	if (bench_http_do(c, "GET", path, NULL, (left + 10) * 1000) < 0 || c->status != 200 ||
	    !(o = bench_http_json(c)) || orc_json_get_str(o, "status", &st, NULL, 0) ||
	    strcmp(st, "ready")) {
		bench_op_fail(&w->ops[OP_WAIT], "HTTP %ld %s %.100s", c->status, c->err,
			      orc_buf_cstr(&c->body));
		bench_op_fail(&w->ops[OP_READY], "not ready");
		json_object_put(o);
		return;
	}
	json_object_put(o);
	t2 = bench_now_ms();
	bench_op_ok(&w->ops[OP_WAIT], t2 - t1);
	bench_op_ok(&w->ops[OP_READY], t2 - t0);
}

static void do_execs(struct worker *w, long i)
{
	struct bench_http *c = &w->c;
	char path[128];
	long k;

	if (!w->sc->ids[i][0])
		return;
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", w->sc->ids[i]);
	for (k = 0; k < w->sc->cfg->execs; k++) {
		json_object *o = NULL;
		int64_t code = -1;
		double t0 = bench_now_ms();

		if (t0 >= w->sc->deadline) {
			bench_op_fail(&w->ops[OP_EXEC], "deadline passed");
			continue;
		}
		if (bench_http_do(c, "POST", path, "{\"command\":\"true\",\"wait\":true}", 60000) < 0 ||
		    c->status != 200 || !(o = bench_http_json(c)) ||
		    orc_json_get_int(o, "exit_code", &code, -1000, 1000, NULL, 0) || code) {
			bench_op_fail(&w->ops[OP_EXEC], "HTTP %ld %s %.100s", c->status, c->err,
				      orc_buf_cstr(&c->body));
			json_object_put(o);
			continue;
		}
		bench_exec_parts(&w->ops[OP_QUEUED], o, bench_now_ms() - t0);
		json_object_put(o);
		bench_op_ok(&w->ops[OP_EXEC], bench_now_ms() - t0);
	}
}

static void do_delete(struct worker *w, long i)
{
	double t0 = bench_now_ms();

	if (!w->sc->ids[i][0])
		return;
	/* Deletes run even after the deadline: nothing is left behind. */
	if (bench_sandbox_delete(&w->c, w->sc->ids[i]) < 0) {
		bench_op_fail(&w->ops[OP_DELETE], "%s", w->c.err);
		return;
	}
	bench_op_ok(&w->ops[OP_DELETE], bench_now_ms() - t0);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	long n = w->sc->cfg->n, i;

	while ((i = atomic_fetch_add(&w->sc->next, 1)) < n) {
		switch (w->sc->phase) {
		case PHASE_CREATE: do_create(w, i); break;
		case PHASE_EXEC: do_execs(w, i); break;
		case PHASE_DELETE: do_delete(w, i); break;
		}
	}
	return NULL;
}

/* Run one phase on every worker; its wall time in seconds. */
static double run_phase(struct scale *sc, struct worker *w, long nw, enum phase ph)
{
	double t0 = bench_now_ms();
	long i;

	sc->phase = ph;
	atomic_store(&sc->next, 0);
	for (i = 0; i < nw; i++)
		if (pthread_create(&w[i].tid, NULL, worker_main, &w[i]))
			w[i].tid = 0;
	for (i = 0; i < nw; i++)
		if (w[i].tid)
			pthread_join(w[i].tid, NULL);
	return (bench_now_ms() - t0) / 1e3;
}

static void mem_json(json_object *parent, const char *key, const struct bench_mem *m)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "rss_mb", json_object_new_double(m->rss_mb));
	json_object_object_add(o, "pss_mb", json_object_new_double(m->pss_mb));
	json_object_object_add(o, "processes", json_object_new_int64(m->procs));
	json_object_object_add(o, "sandbox_processes", json_object_new_int64(m->sandbox_procs));
	json_object_object_add(parent, key, o);
}

int bench_scale(const struct bench_cfg *cfg, struct bench_report *r)
{
	struct scale sc;
	long nw = cfg->concurrency < cfg->n ? cfg->concurrency : cfg->n, i, k;
	struct worker *w = xcalloc((size_t)nw, sizeof(*w));
	struct bench_op total[NOPS];
	struct bench_mem idle = { 0 }, plateau = { 0 }, peak = { 0 }, after = { 0 };
	struct bench_mem_sampler *sampler = NULL;
	struct bench_stats st;
	json_object *mem = json_object_new_object(), *phases = json_object_new_object();
	double t_create, t_exec, t_delete, e2e, t_teardown = -1;

	memset(&sc, 0, sizeof(sc));
	sc.cfg = cfg;
	sc.ids = xcalloc((size_t)cfg->n, sizeof(*sc.ids));
	sc.deadline = bench_now_ms() + cfg->max_seconds * 1e3;
	for (i = 0; i < nw; i++) {
		w[i].sc = &sc;
		bench_http_init_api(&w[i].c, cfg);
		for (k = 0; k < NOPS; k++)
			bench_op_init(&w[i].ops[k], op_names[k]);
	}
	if (cfg->stack_dir) {
		bench_mem_sample(&idle, cfg->stack_dir, 1);
		sampler = bench_mem_sampler_start(cfg->stack_dir, 1000);
	}
	t_create = run_phase(&sc, w, nw, PHASE_CREATE);
	if (cfg->stack_dir)
		bench_mem_sample(&plateau, cfg->stack_dir, 1);
	t_exec = run_phase(&sc, w, nw, PHASE_EXEC);
	t_delete = run_phase(&sc, w, nw, PHASE_DELETE);
	e2e = t_create + t_exec + t_delete;
	if (cfg->stack_dir) {
		/* Until the controller has torn every sandbox down (bounded). */
		double t0 = bench_now_ms();
		do {
			bench_mem_sample(&after, cfg->stack_dir, 0);
			if (!after.sandbox_procs) {
				t_teardown = (bench_now_ms() - t0) / 1e3;
				break;
			}
			usleep(200000);
		} while (bench_now_ms() - t0 < 120e3);
		bench_mem_sampler_stop(sampler, &peak);
	}

	for (k = 0; k < NOPS; k++) {
		bench_op_init(&total[k], op_names[k]);
		for (i = 0; i < nw; i++)
			bench_op_merge(&total[k], &w[i].ops[k]);
	}
	total[OP_CREATE].busy_s = total[OP_WAIT].busy_s = total[OP_READY].busy_s = t_create;
	total[OP_EXEC].busy_s = t_exec;
	total[OP_QUEUED].busy_s = total[OP_RUN].busy_s = total[OP_OUTSIDE].busy_s = t_exec;
	total[OP_DELETE].busy_s = t_delete;
	bench_report_ops(r, total, NOPS);

	json_object_object_add(phases, "create_s", json_object_new_double(t_create));
	json_object_object_add(phases, "exec_s", json_object_new_double(t_exec));
	json_object_object_add(phases, "delete_s", json_object_new_double(t_delete));
	json_object_object_add(phases, "end_to_end_s", json_object_new_double(e2e));
	json_object_object_add(phases, "teardown_after_delete_s", json_object_new_double(t_teardown));
	bench_report_extra(r, "phases", phases);
	printf("phases: create+ready %.2f s, execs %.2f s, delete %.2f s; end to end %.2f s; "
	       "teardown after the last delete %.2f s\n", t_create, t_exec, t_delete, e2e, t_teardown);
	{
		size_t ok_ready = total[OP_READY].n_ok, ok_exec = total[OP_EXEC].n_ok;
		size_t want_exec = (size_t)cfg->n * (size_t)cfg->execs;
		double success = (double)(ok_ready + ok_exec + total[OP_DELETE].n_ok) /
				 (double)(2 * (size_t)cfg->n + want_exec);

		bench_op_stats(&st, &total[OP_EXEC]);
		printf("sandboxes ready %zu/%ld, execs ok %zu/%zu, execs/s over the exec phase %.1f, "
		       "over end to end %.1f\n", ok_ready, cfg->n, ok_exec, want_exec,
		       st.tput, (double)ok_exec / e2e);
		bench_report_extra(r, "execs_per_s_end_to_end", json_object_new_double((double)ok_exec / e2e));
		bench_report_target(r, "success (ready+execs+deletes)", success * 100, 0, 100, "%");
		bench_report_target(r, "end to end", e2e, 1, 40, "s");
		/* issue 5 §7: the burst of creates all ready within 30 s */
		bench_report_target(r, "create burst: all ready", ok_ready == (size_t)cfg->n ?
				    t_create : NAN, 1, 30, "s");
		bench_report_target(r, "execs/s (exec phase)", st.tput, 0, 300, "/s");
	}
	if (cfg->stack_dir) {
		double per_pss = (plateau.pss_mb - idle.pss_mb) / (double)(total[OP_READY].n_ok ?
									     total[OP_READY].n_ok : 1);
		double per_rss = (plateau.rss_mb - idle.rss_mb) / (double)(total[OP_READY].n_ok ?
									     total[OP_READY].n_ok : 1);
		mem_json(mem, "idle", &idle);
		mem_json(mem, "plateau", &plateau);
		mem_json(mem, "peak_rss_sampled", &peak);
		json_object_object_add(mem, "per_sandbox_pss_mb", json_object_new_double(per_pss));
		json_object_object_add(mem, "per_sandbox_rss_mb", json_object_new_double(per_rss));
		bench_report_extra(r, "memory", mem);
		mem = NULL;
		printf("memory: idle PSS %.1f MB (RSS %.1f, %ld procs); with %zu sandboxes PSS %.1f MB "
		       "(RSS %.1f, %ld procs, %ld in sandboxes); peak RSS sum %.1f MB (%ld procs)\n",
		       idle.pss_mb, idle.rss_mb, idle.procs, total[OP_READY].n_ok, plateau.pss_mb,
		       plateau.rss_mb, plateau.procs, plateau.sandbox_procs, peak.rss_mb, peak.procs);
		printf("memory per sandbox: PSS %.2f MB, RSS %.2f MB\n", per_pss, per_rss);
		/* issue 5 §7 (MB here are MiB: mem.c divides kB by 1024) */
		bench_report_target(r, "memory per idle sandbox (PSS)", per_pss, 1, 8, "MiB");
		bench_report_target(r, "memory per idle sandbox (RSS)", per_rss, 1, 8, "MiB");
	}
	json_object_put(mem);
	for (k = 0; k < NOPS; k++)
		bench_op_release(&total[k]);
	for (i = 0; i < nw; i++) {
		for (k = 0; k < NOPS; k++)
			bench_op_release(&w[i].ops[k]);
		bench_http_release(&w[i].c);
	}
	free(w);
	free(sc.ids);
	return 0;
}
