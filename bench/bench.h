#ifndef BENCH_H
#define BENCH_H
/*
 * orchard-bench: the load generator of issue 8 (bench/README.md).
 *
 * Every scenario measures operations into `struct bench_op`s (latency
 * samples in milliseconds), compares them with baselines measured in the
 * same run, prints a table and adds its figures to one JSON report.
 * Every request loop is bounded by a count and by a deadline, and every
 * target is 127.0.0.1/localhost or a unix socket (checked in main.c).
 */
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <json-c/json.h>
#include <curl/curl.h>

#include "buf.h"

/* ---- configuration (main.c) ------------------------------------------- */

struct bench_cfg {
	const char *url;          /* https://127.0.0.1:PORT, no trailing slash */
	const char *api_key;
	const char *cacert;
	const char *database_url; /* for the agent's address and token (psql) */
	const char *agent;        /* unix:/path, overrides the database lookup */
	const char *agent_token;
	const char *stack_dir;    /* scripts/stack.sh var dir, for memory */
	const char *image;
	long n;                   /* operations (scenario's meaning) */
	long concurrency;
	long execs;               /* execs per sandbox (scale) */
	long warmup;
	double max_seconds;       /* deadline of the whole scenario */
	size_t file_bytes;        /* files scenario: the raw file */
	long small_files;         /* files scenario: files in the tar */
	const char *baseline_url; /* files scenario: a plain nginx (bench/run.sh) */
	const char *baseline_dir; /* its root (the bench writes the file there) */
};

/* ---- latency samples and reports (stats.c) ---------------------------- */

struct bench_op {
	char name[48];
	double *ms;           /* latency of every successful operation */
	size_t n_ok, alloc;
	size_t n_fail;
	double busy_s;        /* seconds the throughput is computed over */
	char first_error[160];
};

struct bench_stats {
	double min, p50, p90, p99, max, mean;
	double tput;          /* successful operations per second */
	double success;       /* ok / (ok + failed), 0..1 */
};

void bench_op_init(struct bench_op *op, const char *name);
void bench_op_release(struct bench_op *op);
void bench_op_ok(struct bench_op *op, double ms);
void bench_op_fail(struct bench_op *op, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Merge src's samples into dst (threads keep their own ops). */
void bench_op_merge(struct bench_op *dst, const struct bench_op *src);
void bench_op_stats(struct bench_stats *out, struct bench_op *op);

/* A scenario's report: operations, ratios, targets, free-form extras. */
struct bench_report {
	json_object *root;    /* {"scenario", "params", "ops", "ratios", ...} */
	const char *scenario;
};

void bench_report_init(struct bench_report *r, const char *scenario,
		       const struct bench_cfg *cfg);
void bench_report_release(struct bench_report *r);
/* Print the table of ops and record them. busy_s must be set. */
void bench_report_ops(struct bench_report *r, struct bench_op *ops, size_t n);
/* ratio = a / b, printed as "name: a / b = x.xx" */
void bench_report_ratio(struct bench_report *r, const char *name, double a,
			double b, const char *what);
/* A difference between two figures (a cost of one layer), in unit. */
void bench_report_delta(struct bench_report *r, const char *name, double v,
			const char *unit, const char *what);
/* A target: value compared with limit (le: value <= limit, else >=). */
void bench_report_target(struct bench_report *r, const char *name, double value,
			 int le, double limit, const char *unit);
void bench_report_extra(struct bench_report *r, const char *key, json_object *v);
void bench_report_note(struct bench_report *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Write the report as one JSON object to path (replaced atomically). */
int bench_report_write(struct bench_report *r, const char *path);

double bench_now_ms(void);   /* monotonic */

/* ---- HTTP (client.c) -------------------------------------------------- */

/* One easy handle per worker: keep-alive, TLS session reuse, auth header. */
struct bench_http {
	CURL *h;
	struct curl_slist *hdrs;
	struct orc_buf body;      /* last response body */
	long status;
	char err[CURL_ERROR_SIZE];
	const char *base;         /* URL prefix, or "http://agent" on a socket */
};

/* To the stack through nginx (cfg->url, key, CA). */
int bench_http_init_api(struct bench_http *c, const struct bench_cfg *cfg);
/* Straight to an agent: addr "unix:/path", bearer token. */
int bench_http_init_agent(struct bench_http *c, const char *addr, const char *token);
void bench_http_release(struct bench_http *c);
/* method + path (appended to base) + optional JSON body. Returns 0 when a
 * response arrived (status in c->status, body in c->body), -1 otherwise
 * (message in c->err). timeout_ms bounds the whole request. */
int bench_http_do(struct bench_http *c, const char *method, const char *path,
		  const char *body, long timeout_ms);
/* Parse c->body as a JSON object (NULL when it is not one). */
json_object *bench_http_json(struct bench_http *c);

/* ---- the stack's sandboxes (sandbox.c) -------------------------------- */

/* Create (image) and wait until ready: id into out (64 bytes). */
int bench_sandbox_create_ready(char *out, size_t outlen, struct bench_http *c,
			       const char *image, long timeout_s);
int bench_sandbox_delete(struct bench_http *c, const char *id);
/* The agent address and token of a ready sandbox (psql on database_url). */
int bench_sandbox_agent(char *addr, size_t addrlen, char *token, size_t toklen,
			const char *database_url, const char *id);
int bench_valid_id(const char *id);

/* ---- the stack's processes (mem.c) ------------------------------------ */

/* Which part of the stack a process belongs to (its tree's root). */
enum { BENCH_PROC_NONE, BENCH_PROC_POSTGRES, BENCH_PROC_API, BENCH_PROC_CONTROLLER,
       BENCH_PROC_NGINX, BENCH_PROC_SANDBOX, BENCH_PROC_PARTS };

struct bench_proc {
	long pid, ppid;
	int in;        /* BENCH_PROC_* */
	int cand;      /* a candidate sandbox root: detached, or bwrap */
};

/* The processes of the stack in stack_dir: postgres, api, controller,
 * nginx and their descendants, and every detached or bwrap process whose
 * command line names stack_dir/sandboxes/ (the sandboxes' launchers, their
 * agents and descendants). Returns how many; *out (free()) holds them, or
 * is NULL when stack_dir does not exist. */
size_t bench_stack_procs(struct bench_proc **out, const char *stack_dir);
/* Read a small /proc file, NUL-terminated; its length or -1. */
ssize_t bench_read_small(const char *path, char *buf, size_t len);

/* ---- memory of the stack (mem.c) -------------------------------------- */

struct bench_mem {
	double rss_mb, pss_mb;
	long procs;
	long sandbox_procs;
};

/* Sum RSS (and PSS when want_pss) of the stack in stack_dir
 * (bench_stack_procs). */
int bench_mem_sample(struct bench_mem *out, const char *stack_dir, int want_pss);

/* A background thread sampling RSS every interval_ms and keeping the peak. */
struct bench_mem_sampler;
struct bench_mem_sampler *bench_mem_sampler_start(const char *stack_dir, long interval_ms);
/* Stop and return the peak (the sampler is freed). */
void bench_mem_sampler_stop(struct bench_mem_sampler *s, struct bench_mem *peak);

/* ---- scenarios ---------------------------------------------------------- */

int bench_exec_latency(const struct bench_cfg *cfg, struct bench_report *r);
int bench_bash_baseline(const struct bench_cfg *cfg, struct bench_report *r);
int bench_agent_baseline(const struct bench_cfg *cfg, struct bench_report *r);
int bench_stack_exec(const struct bench_cfg *cfg, struct bench_report *r);
int bench_create_latency(const struct bench_cfg *cfg, struct bench_report *r);
int bench_scale(const struct bench_cfg *cfg, struct bench_report *r);
int bench_read_path(const struct bench_cfg *cfg, struct bench_report *r);
int bench_nginx_baseline(const struct bench_cfg *cfg, struct bench_report *r);
int bench_files(const struct bench_cfg *cfg, struct bench_report *r);
int bench_exec_cpu(const struct bench_cfg *cfg, struct bench_report *r);

/* Shared pieces of the exec scenario (exec.c). bench_exec_parts splits an
 * exec's client time ms by the answer's own timestamps into parts[0..2]
 * (job created->started, started->completed, outside the job) or, for an
 * agent's answer, parts[0] (duration_ms) and parts[2] (the rest). */
void bench_exec_parts(struct bench_op *parts, json_object *o, double ms);
int bench_spawn_bash_true(double *ms_out);
/* bash -c script, spawned like bench_spawn_bash_true; -1 unless it exits 0. */
int bench_spawn_bash(const char *script, double *ms_out);
/* One exec (POST path body on c); ok when the answer says exit code 0. */
#define BENCH_EXEC_BODY "{\"command\":\"true\",\"wait\":true}"
void bench_exec_one(struct bench_op *op, struct bench_op *parts, struct bench_http *c,
		    const char *path, const char *body);

#endif
