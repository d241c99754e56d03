#ifndef AGENT_STREAM_EXEC_H
#define AGENT_STREAM_EXEC_H
#include <json-c/json.h>

#include "exec.h"
#include "server.h"
/*
 * Streaming exec responses: 200 with chunked NDJSON (application/x-ndjson),
 * one JSON object per line, written as the command produces output:
 *
 *   {"type":"stdout","data":"<base64>"}
 *   {"type":"stderr","data":"<base64>"}
 *   {"type":"exit", ...the exec result without the stdout/stderr bodies}
 *
 * The command runs in a thread of its own (run below); the connection's
 * thread blocks in libmicrohttpd's content callback until lines are
 * queued. The queue is bounded: past AGENT_STREAM_QUEUE_MAX bytes the
 * sink reports "not ready" and the runner stops reading the command's
 * pipes until the client has caught up. When the client goes away the
 * command still runs to its end (as a plain exec does); its output is
 * dropped.
 */
#define AGENT_STREAM_QUEUE_MAX (1024 * 1024)

struct agent_stream;
typedef void (*agent_stream_run_fn)(struct agent_stream *s, void *arg);

/* Start a thread running run(s, arg), then free_arg(arg); the response
 * goes into reply (status 200). ORC_ERROR if no thread could be started
 * (free_arg has then been called and reply is untouched). */
int agent_stream_start(struct agent_reply *reply, agent_stream_run_fn run, void *arg,
		       void (*free_arg)(void *arg));
/* The sink for agent_exec_spec (valid during run). */
const struct agent_exec_sink *agent_stream_sink(struct agent_stream *s);
/* Drop bash's no-terminal warnings from the start of stderr (login
 * shells); returns how many bytes were dropped so far. */
void agent_stream_filter_warnings(struct agent_stream *s);
size_t agent_stream_dropped(struct agent_stream *s);
/* Queue o as one line (o is not taken). Flushes held stderr first. */
void agent_stream_line(struct agent_stream *s, json_object *o);
#endif
