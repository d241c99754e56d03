#ifndef CLI_TRANSFER_H
#define CLI_TRANSFER_H
/*
 * Moving bytes, not JSON: the raw file and tar streams of cp and files cat
 * (stream.c), the progress bar they show (progress.c), local tar streams
 * (tar_create.c, tar_extract.c), a sandbox path "ID:PATH" (remote.c) and
 * the PTY WebSocket (ws.c, shell.c, term.c).
 */
#include <pthread.h>
#include <stdint.h>
#include <curl/curl.h>

#include "cli.h"

/* ---- http.c: what every handle has ---- */
/*
 * An easy handle with the URL, key, TLS, timeouts (req->timeout_s < 0:
 * no overall timeout) and headers set; *hdrs_out is the caller's to free
 * after the transfer. NULL when curl cannot make one.
 */
CURL *cli_curl_open(struct curl_slist **hdrs_out, const struct cli_config *cfg, const struct cli_request *req,
		    const char *url, char *errbuf);
/* CURLOPT_HEADERFUNCTION for a struct cli_response: X-Request-ID, Retry-After. */
size_t cli_on_header(char *data, size_t size, size_t nmemb, void *arg);
/* The value of header line data (n bytes) when it is name ("x-file-size:"), trimmed. */
const char *cli_header_value(const char *data, size_t n, const char *name, size_t *len);

/* ---- debug.c: -v, --debug, ORCHARD_DEBUG=1 ---- */
void cli_debug_enable(void);
int cli_debug_enabled(void);
/* After a transfer on curl ended with CURLcode rc and HTTP status (0: as curl saw it): method,
 * URL, status, request id, the masked key and timings on stderr, when debugging is on. */
void cli_debug_request(CURL *curl, const struct cli_config *cfg, const char *method, const char *url, int rc,
		       long status, const char *request_id);

/* ---- progress.c: "NAME  42% [=====>    ] 42.0 MiB / 100.0 MiB  12.3 MiB/s  ETA 5s" ---- */
struct cli_progress {
	const char *label;
	int64_t started_ms, last_ms;
	int enabled;                 /* stderr is a terminal and not --quiet */
	int shown;                   /* a line was drawn */
};
void cli_progress_init(struct cli_progress *p, const char *label, int enabled);
/* total < 0: unknown. Drawn at most 4 times a second, from 1 s after the start. */
void cli_progress_update(struct cli_progress *p, int64_t done, int64_t total);
/* The last state and a newline, when anything was drawn. */
void cli_progress_end(struct cli_progress *p, int64_t done, int64_t total);
/* "12.3 MiB" */
void cli_format_bytes(char *out, size_t outlen, double bytes);

/* ---- stream.c: a request whose body or answer is a byte stream ---- */
struct cli_stream {
	int in_fd;                   /* the request body, read to its end; -1: none */
	int64_t in_size;             /* its size (Content-Length); -1: unknown, sent chunked */
	int in_rewind;               /* in_fd can be rewound for a retry (a regular file) */
	/* Called at the body's end: < 0 aborts the upload (the producer failed). */
	int (*in_end)(void *arg);
	void *in_arg;
	int out_fd;                  /* a 2xx answer's body goes here; -1: buffered as JSON */
	/* Or, with out_fd -1, a 2xx answer's body is handed here as it
	 * arrives; < 0 stops the transfer (ORC_ERROR, no message). */
	int (*out_fn)(void *arg, const char *data, size_t n);
	void *out_arg;
	long stall_s;                /* give up after this long without a byte; 0: 300 s */
	struct cli_progress *progress;
	/* Filled in: */
	int64_t file_size;           /* X-File-Size, else Content-Length; -1 */
	unsigned file_mode;          /* X-File-Mode; 0 when absent */
	int64_t sent, received;      /* body bytes sent and written to out_fd */
	int out_errno;               /* writing to out_fd failed with this */
};
void cli_stream_init(struct cli_stream *s);
/*
 * Send one request. 0 when an answer arrived (any status; a non-2xx
 * answer's body is in out, never in out_fd); a transport failure is
 * reported and returned. Retried like cli_http (connection failure or 503)
 * while nothing was written to out_fd and the body, if any, can be rewound.
 * A write to out_fd that fails sets out_errno and returns ORC_ERROR
 * without a message (the caller knows what out_fd is).
 */
int cli_http_stream(struct cli_response *out, const struct cli_config *cfg, const struct cli_request *req,
		    struct cli_stream *s);

/* ---- exec_stream.c: exec with the output printed as the command writes ---- */
/*
 * POST req (an exec with "stream": true) and copy the NDJSON output lines
 * to our stdout and stderr as they arrive. *job is the job of the last
 * line ({"type":"exit","job"}), or the whole answer of a server that does
 * not stream (then *streamed is 0 and nothing was printed).
 */
int cli_exec_stream(json_object **job, int *streamed, const struct cli_config *cfg,
		    const struct cli_request *req, long stall_s);
/*
 * Write job_id's output to our stdout and stderr as it is produced (GET
 * /v1/jobs/{id}/stream), reconnecting from the bytes written after a
 * dropped connection, until the job has ended; *job is the finished job.
 */
int cli_job_follow(json_object **job, const struct cli_config *cfg, const char *job_id);

/* ---- tar_create.c / tar_extract.c / tar_thread.c: a directory as a tar stream, in a thread ---- */
struct cli_tar {
	pthread_t thread;
	int started;
	int fd;                      /* the thread's end of the pipe */
	char *dir;                   /* the directory (extraction: its real path) */
	int failed;                  /* set by the thread before it closes fd */
	char msg[1024];              /* why */
	int64_t entries;
};
/*
 * Write a pax tar of dir's contents (names relative to it; files,
 * directories and symlinks as symlinks; modes and mtimes) into a pipe whose
 * other end is *read_fd (the caller closes it).
 */
int cli_tar_create_start(struct cli_tar *t, int *read_fd, const char *dir);
/*
 * Extract the tar written into *write_fd (the caller closes it) into dir
 * (created with parents). Refused, with the entry named in msg: absolute
 * names, ".." components, writing through a symlink, and anything but
 * files, directories, symlinks and hard links inside dir. Symlinks are
 * kept as symlinks; modes and mtimes are restored, owners are not.
 */
int cli_tar_extract_start(struct cli_tar *t, int *write_fd, const char *dir);
/* Wait for the thread: 0, or ORC_ERROR with t->msg. Harmless if never started. */
int cli_tar_finish(struct cli_tar *t);
/* For cli_stream.in_end: the producer's verdict. */
int cli_tar_in_end(void *arg);
/* tar_thread.c, for the two above: start fn(t) in a thread on its end of
 * a new pipe (t->fd: the write end when writes, else the read end); the
 * other end in *other_fd. ORC_ERROR (reported) when it could not start. */
int cli_tar_thread_start(struct cli_tar *t, int *other_fd, int writes, void *(*fn)(void *));
/* The thread's first failure, kept in t->msg. */
void cli_tar_fail(struct cli_tar *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- remote.c: "ID:PATH" ---- */
/* Split "ID:PATH" (ID a DNS label); 0, or ORC_EINVALID when arg is a local path. */
int cli_remote_split(char **id_out, char **path_out, const char *arg);
/*
 * GET /v1/sandboxes/ID/files/stat: *out is the entry. ORC_ENOTFOUND,
 * quietly, when the path does not exist; other failures are reported.
 */
int cli_remote_stat(json_object **out, const struct cli_config *cfg, const char *id, const char *path);
/* A 404 that names the sandbox ("sandbox ID not found"), not a path in it. */
int cli_sandbox_missing(const struct cli_response *r, const char *id);
/* "/v1/sandboxes/ID/SUFFIX?path=PATH"; caller frees. */
char *cli_remote_route(const char *id, const char *suffix, const char *path);
#endif
