#ifndef CLI_H
#define CLI_H
#include <getopt.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <json-c/json.h>

#include "buf.h"
/*
 * orchardctl: the command-line client. commands.c holds the commands[]
 * table (names, summaries, usage, examples, options), from which main.c
 * dispatches and help.c and completion.c generate their text; config.c
 * resolves the server, key and CA; http.c talks to the API (debug.c shows
 * each request with -v); output.c prints tables and errors and parses -o,
 * output_doc.c prints JSON, YAML and jsonpath; cmd_*.c are the command
 * groups (git's builtin/, curl's tool_*). transfer.h declares the byte
 * streams of cp and files (stream.c, tar_*.c, remote.c, progress.c); ws.h
 * and term.h the PTY session of shell and exec -t (ws.c, term.c, shell.c).
 *
 * A command returns the process exit status (exec: the command's own;
 * orchardctl's own failures are 125, below).
 */
#define CLI_VERSION "0.2.0"

/*
 * Exit statuses, reserved the way docker reserves them: 125 is orchardctl's
 * own failure (usage, configuration, an unknown sandbox, an API or network
 * error); 126 and 127 come from the sandbox when the command could not be
 * run (not executable, not found); any other status of exec, jobs wait and
 * shell is the command's own. CLI_USAGE and CLI_FAIL are apart in name only,
 * so code says which it means. replay's "a step diverged" is CLI_DIFFERS,
 * like diff(1).
 */
enum { CLI_OK = 0, CLI_DIFFERS = 1, CLI_FAIL = 125, CLI_USAGE = 125 };
#define CLI_EXIT_TIMED_OUT 124

/*
 * Where to talk to. Flags set the fields directly; cli_config_resolve()
 * fills the rest: a --context's values, then ORCHARD_URL / ORCHARD_API_KEY /
 * ORCHARD_CACERT, then the config file's current context.
 */
struct cli_config {
	const char *url;
	const char *api_key;
	const char *cacert;
	const char *context;         /* --context NAME */
	json_object *file;           /* the config file once loaded; owned */
	int resolved;
};
void cli_config_release(struct cli_config *cfg);

/* What a command's positional arguments name, for shell completion. */
enum cli_arg { CLI_ARG_NONE, CLI_ARG_SANDBOX, CLI_ARG_CONTEXT, CLI_ARG_COMMAND, CLI_ARG_SHELL,
	       CLI_ARG_FILE /* a local path or ID:PATH */ };

struct cli_cmd {
	const char *name;
	int (*fn)(struct cli_config *cfg, int argc, char **argv);
	const char *summary;
	const char *usage;           /* synopsis, description, options */
	const char *examples;        /* shown by help; NULL: none */
	const struct option *opts;   /* its getopt table, for completion */
	const struct cli_cmd *sub;   /* a group's subcommands; fn is NULL */
	enum cli_arg arg;
};
/* The table (commands.c), each list ending with a NULL name. */
extern const struct cli_cmd cli_commands[];
extern const char cli_main_usage[];
const struct cli_cmd *cli_find_cmd(const struct cli_cmd *table, const char *name);
/* help.c: a command's usage (a group's with its subcommands) and examples. */
void cli_print_help(FILE *f, const struct cli_cmd *c);
void cli_print_main_help(FILE *f);
/* A missing (sub NULL) or unknown subcommand of a group, with its usage; CLI_USAGE. */
int cli_group_usage_error(const struct cli_cmd *group, const char *sub);

/*
 * Options every command accepts (after the command name too), for
 * getopt_long tables: CLI_COMMON_OPTIONS, then handle unknown codes with
 * cli_common_option(), which returns 0 when it took the option.
 */
enum { CLI_OPT_URL = 0x100, CLI_OPT_API_KEY, CLI_OPT_CACERT, CLI_OPT_CONTEXT, CLI_OPT_DEBUG,
       CLI_OPT_NO_HEADERS, CLI_OPT_FIRST_FREE };
#define CLI_COMMON_OPTIONS \
	{ "url", required_argument, NULL, CLI_OPT_URL }, \
	{ "api-key", required_argument, NULL, CLI_OPT_API_KEY }, \
	{ "cacert", required_argument, NULL, CLI_OPT_CACERT }, \
	{ "context", required_argument, NULL, CLI_OPT_CONTEXT }, \
	{ "debug", no_argument, NULL, CLI_OPT_DEBUG }
int cli_common_option(struct cli_config *cfg, int opt, const char *arg);
/* The options of a command that prints an object or a list (-o takes 'o'). */
#define CLI_OUTPUT_OPTIONS \
	{ "output", required_argument, NULL, 'o' }, \
	{ "no-headers", no_argument, NULL, CLI_OPT_NO_HEADERS }
/*
 * Fill in what flags left unset and check the result: 0, or CLI_USAGE (no
 * server URL) / CLI_FAIL (a config file that is unsafe or broken), after
 * saying what to do.
 */
int cli_config_check(struct cli_config *cfg);
/* 1 when a server URL is configured, 0 when none is, < 0 (reported) when the config is broken. */
int cli_config_has_server(struct cli_config *cfg);

/* ---- config.c: the config file ---- */
/* ORCHARD_CONFIG, else $XDG_CONFIG_HOME/orchard/config, else ~/.config/orchard/config. */
int cli_config_path(char **out);
/*
 * Load the file: *out is its object ({"current-context", "contexts"}), or
 * an empty one when there is no file. A file group- or world-accessible, not
 * a regular file, too big or not valid is refused with a message that says
 * how to fix it (ORC_EFORBIDDEN, ORC_EINVALID, ORC_ERROR).
 */
int cli_config_load(json_object **out, const char *path);
/* Write atomically (temporary file, fsync, rename), 0600 in a 0700 directory. */
int cli_config_save(const char *path, json_object *file);
/* The context object called name, or NULL. */
json_object *cli_config_context(json_object *file, const char *name);
const char *cli_config_current(json_object *file);
int cli_context_name_ok(const char *name);
/* 1-1024 printable ASCII characters, no spaces: safe in a header. */
int cli_api_key_ok(const char *key);
/* "orch_0123456789ab_****": a key that shows which it is, not its secret. */
void cli_mask_key(char *out, size_t outlen, const char *key);

/* ---- http.c ---- */
/* Called about once a second while a request is in flight. */
typedef void cli_tick_fn(void *arg);

struct cli_request {
	const char *method;          /* "GET", "POST", "DELETE" */
	const char *path;            /* "/v1/sandboxes"; already escaped */
	const char *body;            /* JSON text or NULL */
	const char *idempotency_key; /* makes a POST safe to retry */
	long timeout_s;              /* whole request; 0: 60 s */
	cli_tick_fn *tick;           /* optional: progress display */
	void *tick_arg;
};

struct cli_response {
	long status;
	struct orc_buf body;
	json_object *json;           /* the body parsed, when it is JSON */
	char request_id[129];        /* X-Request-ID, or "" */
	long retry_after_s;          /* Retry-After in seconds, or -1 */
	int too_big;                 /* the body passed its maximum */
};
#define CLI_RESPONSE_INIT { 0, ORC_BUF_INIT, NULL, "", -1, 0 }
void cli_response_release(struct cli_response *r);
/* r->json from r->body when the body is JSON (left NULL otherwise). */
void cli_response_parse(struct cli_response *r);

/*
 * Send one request. 0 when an HTTP response arrived (any status). A request
 * that is safe to repeat (GET, DELETE, or carrying an Idempotency-Key) is
 * retried after a connection failure or a 503, up to CLI_HTTP_ATTEMPTS in
 * all, waiting Retry-After (capped) or an exponential backoff with jitter.
 * A failure that remains is reported on stderr and returned (ORC_EUNAVAIL,
 * ORC_ETIMEOUT, ORC_ETOOBIG, ORC_ERROR).
 */
#define CLI_HTTP_ATTEMPTS 4
int cli_http(struct cli_response *out, const struct cli_config *cfg, const struct cli_request *req);
/*
 * cli_http plus: a non-2xx status or a body that is not JSON is
 * reported on stderr ("orchardctl: <detail> (HTTP 404, request <id>)") and
 * returned as a negative orc_err. On success *out is the parsed value,
 * owned by the caller (json_object_put).
 */
int cli_call(json_object **out, const struct cli_config *cfg, const struct cli_request *req);
/* "<prefix>/<id><suffix>" with id escaped; caller frees. */
char *cli_path(const char *prefix, const char *id, const char *suffix);
/* Append "?k=v" or "&k=v" to a path, v escaped. */
void cli_path_add_query(struct orc_buf *path, const char *key, const char *value);
/* 32 random hex characters for an Idempotency-Key (out: 33 bytes). */
void cli_new_idempotency_key(char *out);
/* A 404 for a route this server lacks, or a 405: an API older than the command. */
int cli_route_missing(const struct cli_response *r);
/* The server URL (without trailing slashes) plus path; caller frees. */
char *cli_url(const struct cli_config *cfg, const char *path);
/* Report a CURLcode (rc) of method url ("cannot reach the server at ...",
 * TLS, timeout); returns ORC_ETIMEOUT or ORC_EUNAVAIL. */
int cli_curl_failed(const struct cli_config *cfg, const char *method, const char *url, int rc,
		    const char *errbuf);
/*
 * Attempt n (>= 1) of a request that may be repeated ended with CURLcode rc
 * (and, when rc is CURLE_OK, answer r). 1 when another attempt is worth it
 * (nothing, or nothing complete, came back; or a 503), after saying so on a
 * terminal and sleeping the pause (Retry-After of a 503, capped, or backoff
 * with jitter), ticking req's display if any (req may be NULL); else 0.
 */
int cli_retry_pause(const struct cli_response *r, int rc, const char *errbuf, int attempt,
		    const struct cli_request *req);

/* ---- output.c ---- */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int cli_usage_error(const char *usage, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* After getopt printed its own complaint. */
int cli_bad_option(const char *usage);
/* Report a failed response: detail, status, request id, and a hint. */
void cli_report_response(const struct cli_response *r);
/* Pretty JSON on stdout. */
void cli_print_json(json_object *o);
/* A field as display text ("-" when absent or null); owned by o or static. */
const char *cli_field_text(json_object *o, const char *key);
/* "12s", "5m", "3h", "2d" since a time (epoch number or ISO 8601). */
void cli_format_age(char *out, size_t outlen, json_object *when);
/* "90s", "30m", "2h", "1d12h" for a number of seconds. */
void cli_format_duration(char *out, size_t outlen, int64_t seconds);

/* A table printed with aligned columns. */
struct cli_table {
	size_t ncols;
	size_t nrows;
	size_t alloc;
	char **cells;                /* row-major, header first */
};
void cli_table_init(struct cli_table *t, size_t ncols, const char *const *headers);
void cli_table_add(struct cli_table *t, const char *const *cells);
void cli_table_print(const struct cli_table *t);
void cli_table_release(struct cli_table *t);

/*
 * -o VALUE: json, yaml, jsonpath=EXPR (the documents, output_doc.c), table
 * or wide; a leading "=" is dropped (-o=json). A jsonpath expression is
 * checked here and kept for cli_print_doc. --no-headers (CLI_OUTPUT_OPTIONS)
 * drops the header row of every table.
 */
enum cli_output { CLI_OUT_DEFAULT, CLI_OUT_JSON, CLI_OUT_TABLE, CLI_OUT_WIDE, CLI_OUT_YAML, CLI_OUT_JSONPATH };
int cli_parse_output(enum cli_output *out, const char *arg);
/*
 * A command's -o: parse arg into *out, or report a usage error naming what
 * it takes (documents only unless tables) and return CLI_USAGE.
 */
int cli_output_arg(enum cli_output *out, const char *arg, const char *cmd, const char *usage, int tables);
void cli_output_set_no_headers(void);
/* 0 after --no-headers: for a command that prints its own header line. */
int cli_output_headers(void);
/* fmt is json, yaml or jsonpath. */
int cli_output_is_doc(enum cli_output fmt);
/* Print o in a document format: 0, or CLI_FAIL when a jsonpath found nothing (said on stderr). */
int cli_print_doc(enum cli_output fmt, json_object *o);
/* The same as one item of a stream: JSON on one line, YAML after "---". */
int cli_print_doc_line(enum cli_output fmt, json_object *o);
/* output_doc.c: 0 when expr is a jsonpath we can evaluate. */
int cli_jsonpath_check(const char *expr);
void cli_output_set_jsonpath(const char *expr);

/* ---- args.c: checked arguments ---- */
/* "90", "90s", "30m", "2h", "1d" -> seconds in [min, max]. */
int cli_parse_duration(int64_t *out, const char *arg, int64_t min, int64_t max);
/* Add "K=V" to an object (K non-empty, UTF-8); ORC_EINVALID otherwise. */
int cli_kv_add(json_object *obj, const char *kv);
/* Ask "prompt [y/N] " on the terminal; 1 for yes. */
int cli_confirm(const char *prompt);
/* stderr is a terminal that can take control sequences. */
int cli_stderr_is_tty(void);

/* ---- spinner.c: "waiting for X (12s)" on a terminal ---- */
struct cli_spinner {
	const char *what;
	int64_t started_ms;
	unsigned frame;
	int active;                  /* stderr is a terminal */
};
void cli_spinner_start(struct cli_spinner *s, const char *what);
cli_tick_fn cli_spinner_tick;
void cli_spinner_stop(struct cli_spinner *s);
/* Before a message: erase the spinner's line (it is redrawn on the next tick). */
void cli_spinner_clear_line(void);

/* ---- sandbox.c: shared by sandbox commands ---- */
/*
 * Wait until a sandbox is ready, for at most timeout_s (with a spinner
 * when spin). *out gets the final sandbox object; a failed or late sandbox
 * is reported.
 */
int cli_sandbox_wait(json_object **out, const struct cli_config *cfg, const char *id, long timeout_s,
		     int spin);
/* A list response's array ("sandboxes", "jobs", "items" or a bare array). */
json_object *cli_list_items(json_object *list, const char *key);
/*
 * GET a listing and follow next_cursor until done (at most max items, a
 * warning past it). *out is a fresh array of the items. base is the path
 * with its filters; page is the page size (0: the server's). With missing,
 * a route this server lacks sets *missing and is not reported.
 */
int cli_list_all(json_object **out, const struct cli_config *cfg, const char *base, const char *key,
		 long page, size_t max, int *missing);

/* ---- job.c: shared by exec and jobs ---- */
int cli_job_is_done(json_object *job);
/* Wait until the job finished or timeout_s passed (0: no limit); *job is replaced. */
int cli_job_wait(json_object **job, const struct cli_config *cfg, long timeout_s);
/* Write its stdout and stderr to ours (unless they were streamed
 * already); warn about truncation. */
int cli_job_write_output(json_object *job, int streamed);
/* Our exit status for a finished job: its exit code, 124 on a timeout. */
int cli_job_exit_status(json_object *job, long timeout_s);
/* JOB ID, STATUS, EXIT, AGE, COMMAND, oldest first; only the last `last` (0: all). */
void cli_job_table(json_object *jobs, size_t last);

/* ---- shell.c: an interactive session on the PTY WebSocket ---- */
struct cli_pty_opts {
	const char *id;
	int argc;                    /* 0: the login shell */
	char **argv;
	const char *cwd;             /* NULL: the sandbox's */
	json_object *env;            /* NULL: none */
	int login;                   /* login_shell */
};
/* Run it with the local terminal raw; the command's exit status (128+N: signal N), or CLI_FAIL. */
int cli_pty_run(const struct cli_config *cfg, const struct cli_pty_opts *o);

/* ---- commands ---- */
#define CLI_CMD(name) int cmd_##name(struct cli_config *cfg, int argc, char **argv)
CLI_CMD(create); CLI_CMD(ls); CLI_CMD(get); CLI_CMD(describe); CLI_CMD(wait); CLI_CMD(rm);
CLI_CMD(heartbeat); CLI_CMD(exec); CLI_CMD(version); CLI_CMD(help); CLI_CMD(completion);
CLI_CMD(config_set_context); CLI_CMD(config_use_context); CLI_CMD(config_get_contexts);
CLI_CMD(config_current_context); CLI_CMD(config_view); CLI_CMD(config_delete_context);
CLI_CMD(jobs_get); CLI_CMD(jobs_wait); CLI_CMD(jobs_ls); CLI_CMD(jobs_cancel); CLI_CMD(jobs_logs);
CLI_CMD(cp); CLI_CMD(files_ls); CLI_CMD(files_cat); CLI_CMD(files_rm); CLI_CMD(files_mkdir);
CLI_CMD(patch_apply); CLI_CMD(patch_diff); CLI_CMD(patch_reset); CLI_CMD(shell);
CLI_CMD(keys_ls); CLI_CMD(keys_revoke); CLI_CMD(tenants_ls); CLI_CMD(tenants_create); CLI_CMD(tenants_set);
CLI_CMD(keys_create); CLI_CMD(tenants_delete);
#undef CLI_CMD

/* Usage texts and option tables, kept beside each command's code. */
extern const char create_usage[], ls_usage[], get_usage[], describe_usage[], wait_usage[],
	rm_usage[], heartbeat_usage[], exec_usage[], version_usage[], help_usage[],
	completion_usage[], config_usage[], config_set_context_usage[], config_use_context_usage[],
	config_get_contexts_usage[], config_current_context_usage[], config_view_usage[],
	config_delete_context_usage[], jobs_usage[], jobs_get_usage[], jobs_wait_usage[],
	jobs_ls_usage[], jobs_cancel_usage[], jobs_logs_usage[], cp_usage[],
	files_usage[], files_ls_usage[], files_cat_usage[], files_rm_usage[], files_mkdir_usage[],
	patch_usage[], patch_apply_usage[], patch_diff_usage[], patch_reset_usage[], shell_usage[],
	keys_usage[], keys_ls_usage[], keys_revoke_usage[], tenants_usage[], tenants_ls_usage[],
	tenants_create_usage[], tenants_set_usage[], keys_create_usage[], tenants_delete_usage[];
extern const struct option create_opts[], ls_opts[], get_opts[], describe_opts[], wait_opts[],
	rm_opts[], heartbeat_opts[], exec_opts[], common_opts[], completion_opts[], version_opts[],
	config_set_context_opts[], config_get_contexts_opts[], config_view_opts[], jobs_get_opts[], jobs_wait_opts[],
	jobs_ls_opts[], jobs_logs_opts[], cp_opts[],
	files_ls_opts[], files_rm_opts[], files_mkdir_opts[], patch_apply_opts[], patch_diff_opts[],
	patch_reset_opts[], shell_opts[], keys_ls_opts[], tenants_ls_opts[], tenants_set_opts[],
	keys_create_opts[], tenants_delete_opts[];
/* cmd_checkpoint.c: checkpoints, forks, pause and resume (docs/checkpoints.md). */
int cmd_checkpoint_create(struct cli_config *cfg, int argc, char **argv);
int cmd_checkpoint_ls(struct cli_config *cfg, int argc, char **argv);
int cmd_checkpoint_get(struct cli_config *cfg, int argc, char **argv);
int cmd_checkpoint_rm(struct cli_config *cfg, int argc, char **argv);
int cmd_fork(struct cli_config *cfg, int argc, char **argv);
int cmd_pause(struct cli_config *cfg, int argc, char **argv);
int cmd_resume(struct cli_config *cfg, int argc, char **argv);
extern const char checkpoint_usage[], checkpoint_create_usage[], checkpoint_ls_usage[],
	checkpoint_get_usage[], checkpoint_rm_usage[], fork_usage[], pause_usage[], resume_usage[];
extern const struct option checkpoint_opts[];
#endif
