#ifndef AGENT_SERVER_H
#define AGENT_SERVER_H
#include <stddef.h>
#include <json-c/json.h>

#include "buf.h"

struct MHD_Connection;
struct MHD_Response;
/*
 * The agent's HTTP server (libmicrohttpd, one thread per connection so a
 * long exec never holds up /health): bearer-token auth on every request,
 * a static route table, bounded request bodies, JSON replies and one log
 * line per request.
 */
struct agent_request {
	const char *method;
	const char *path;
	const char *body;          /* NUL-terminated; "" when none */
	size_t body_len;
	struct MHD_Connection *conn; /* headers and query arguments */
	void *upload;              /* streamed routes: what upload->begin made */
};

struct agent_reply {
	unsigned status;
	struct orc_buf body;       /* JSON */
	struct MHD_Response *response; /* if set, sent instead of body (and destroyed) */
};

typedef void (*agent_handler_fn)(struct agent_reply *reply, const struct agent_request *req);

/*
 * A route whose request body is streamed (uploads of any size) instead of
 * collected into req->body: begin runs once the headers are in, data for
 * each piece of the body as it arrives, then the route's handler with
 * req->upload set, and free when the request ends (also when it was cut
 * short). begin may refuse with ORC_ETOOBIG, answered 413 at once (by the
 * Content-Length); any other failure is the upload's to remember and to
 * report from the handler: data cannot fail, a failed upload ignores the
 * rest of the body.
 */
struct agent_upload_ops {
	int (*begin)(void **out, const struct agent_request *req);
	void (*data)(void *upload, const char *data, size_t len);
	void (*free)(void *upload);
};

/* Reply with o (which the reply does not take). */
void agent_reply_json(struct agent_reply *reply, unsigned status, json_object *o);
/* Reply {"error": msg}. */
void agent_reply_error(struct agent_reply *reply, unsigned status, const char *msg);

struct agent_server;

/* listen is "unix:PATH" or "tcp:HOST:PORT"; token is copied. */
int agent_server_start(struct agent_server **out, const char *listen, const char *token);
void agent_server_free(struct agent_server *s);

/* listen.c: a listening socket for "unix:PATH" or "tcp:HOST:PORT". A stale
 * unix socket file is removed first; *unix_path_out (malloc'd, or NULL) is
 * the file to remove at shutdown. */
int agent_listen_open(int *fd_out, char **unix_path_out, const char *spec);

/* The handlers (one file each). */
void agent_handle_health(struct agent_reply *reply, const struct agent_request *req);
void agent_handle_exec(struct agent_reply *reply, const struct agent_request *req);
#endif
