#ifndef ORC_AGENT_CLIENT_H
#define ORC_AGENT_CLIENT_H
#include <stddef.h>

#include "buf.h"
/*
 * HTTP calls to an orchard-agent (docs/agent-protocol.md). The address is
 * "unix:/path/to/agent.sock" or "http://host:port". Every call carries the
 * sandbox's bearer token and, when given, the request id; a thread that
 * serves a request (lib/log.h's context) sends its trace as traceparent,
 * so the agent's span is a child of the caller's.
 *
 * Returns 0 when an HTTP response arrived (its status in *status_out and
 * its body in out, bounded by out->max), ORC_EUNAVAIL when the agent could
 * not be reached, ORC_ETIMEOUT when timeout_ms passed, ORC_ETOOBIG when the
 * response exceeded out->max.
 */
struct orc_agent_req {
	const char *address;
	const char *token;
	const char *method;     /* "GET", "POST", ... */
	const char *path;       /* "/exec" */
	const char *body;       /* may be NULL */
	size_t body_len;
	long timeout_ms;
	const char *request_id; /* may be NULL */
	/* Called now and then while the call runs, also when nothing arrives
	 * (libcurl's progress callback: often during a transfer, about once a
	 * second when idle); < 0 ends the call (ORC_ERROR). May be NULL. */
	int (*tick)(void *arg);
	void *tick_arg;
};

int orc_agent_call(struct orc_buf *out, long *status_out, const struct orc_agent_req *req);

/*
 * The same call, the answer's body handed to fn piece by piece as it
 * arrives (a streaming exec's NDJSON). fn returning < 0 ends the transfer
 * (ORC_ERROR). The status is known once the first piece arrives.
 */
typedef int (*orc_agent_sink_fn)(void *arg, const char *data, size_t n);
int orc_agent_stream(long *status_out, const struct orc_agent_req *req, orc_agent_sink_fn fn,
		     void *arg);
#endif
