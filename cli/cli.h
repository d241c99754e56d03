#ifndef CLI_H
#define CLI_H
#include <json-c/json.h>

#include "buf.h"
/*
 * orchardctl: the command-line client. main.c holds the commands[] table and
 * the configuration; http.c talks to the API; output.c prints tables, JSON
 * and errors; cmd_*.c are the command groups (git's builtin/, curl's tool_*).
 *
 * A command returns the process exit status (exec: the command's own).
 */
#define CLI_VERSION "0.1.0"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* Flags override the environment (ORCHARD_URL, ORCHARD_API_KEY, ORCHARD_CACERT). */
struct cli_config {
	const char *url;
	const char *api_key;
	const char *cacert;
};

struct cli_cmd {
	const char *name;
	int (*fn)(struct cli_config *cfg, int argc, char **argv);
	const char *summary;
	const char *usage;      /* `orchardctl help CMD`, `CMD --help` */
};

/*
 * Options every command accepts (after the command name too), for
 * getopt_long tables: CLI_COMMON_OPTIONS, then handle unknown codes with
 * cli_common_option(), which returns 0 when it took the option.
 */
enum { CLI_OPT_URL = 0x100, CLI_OPT_API_KEY, CLI_OPT_CACERT, CLI_OPT_FIRST_FREE };
#define CLI_COMMON_OPTIONS \
	{ "url", required_argument, NULL, CLI_OPT_URL }, \
	{ "api-key", required_argument, NULL, CLI_OPT_API_KEY }, \
	{ "cacert", required_argument, NULL, CLI_OPT_CACERT }
int cli_common_option(struct cli_config *cfg, int opt, const char *arg);
/* The URL is set; else says how to set it and returns CLI_USAGE. */
int cli_config_check(const struct cli_config *cfg);

/* ---- http.c ---- */
struct cli_request {
	const char *method;          /* "GET", "POST", "DELETE" */
	const char *path;            /* "/v1/sandboxes"; already escaped */
	const char *body;            /* JSON text or NULL */
	const char *idempotency_key; /* makes a POST safe to retry */
	long timeout_s;              /* whole request; 0: 60 s */
};

struct cli_response {
	long status;
	struct orc_buf body;
	json_object *json;           /* the body parsed, when it is JSON */
	char request_id[129];        /* X-Request-ID, or "" */
	int too_big;                 /* the body passed its maximum */
};
#define CLI_RESPONSE_INIT { 0, ORC_BUF_INIT, NULL, "", 0 }
void cli_response_release(struct cli_response *r);

/*
 * Send one request. 0 when an HTTP response arrived (any status). A
 * connection failure is retried once when the request is safe to repeat
 * (GET, DELETE, or carrying an Idempotency-Key); a failure that remains is
 * reported on stderr and returned (ORC_EUNAVAIL, ORC_ETIMEOUT, ORC_ERROR).
 */
int cli_http(struct cli_response *out, const struct cli_config *cfg, const struct cli_request *req);
/*
 * cli_http plus: a non-2xx status or a body that is not JSON is
 * reported on stderr ("orchardctl: <detail> (HTTP 404, request <id>)") and
 * returned as a negative orc_err. On success *out is the parsed value,
 * owned by the caller (json_object_put).
 */
int cli_call(json_object **out, const struct cli_config *cfg, const struct cli_request *req);
/* "/v1/sandboxes/<id><suffix>" with id escaped; caller frees. */
char *cli_path(const char *prefix, const char *id, const char *suffix);
/* 32 random hex characters for an Idempotency-Key (out: 33 bytes). */
void cli_new_idempotency_key(char *out);

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
/* "12s", "5m", "3h", "2d" since created_at (epoch number or ISO 8601). */
void cli_format_age(char *out, size_t outlen, json_object *created_at);

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

/* -o VALUE: "json" or "table" ("wide" counts as table). */
enum cli_output { CLI_OUT_DEFAULT, CLI_OUT_JSON, CLI_OUT_TABLE };
int cli_parse_output(enum cli_output *out, const char *arg);

/* ---- commands ---- */
int cmd_create(struct cli_config *cfg, int argc, char **argv);
int cmd_ls(struct cli_config *cfg, int argc, char **argv);
int cmd_get(struct cli_config *cfg, int argc, char **argv);
int cmd_rm(struct cli_config *cfg, int argc, char **argv);
int cmd_wait(struct cli_config *cfg, int argc, char **argv);
int cmd_exec(struct cli_config *cfg, int argc, char **argv);
extern const char create_usage[], ls_usage[], get_usage[], rm_usage[], wait_usage[], exec_usage[];
#endif
