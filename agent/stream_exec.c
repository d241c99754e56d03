#include "stream_exec.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>
#include <microhttpd.h>

#include "command.h"
#include "err.h"
#include "json.h"
#include "log.h"
#include "base64.h"
#include "xalloc.h"

#define RUNNER_STACK (256 * 1024)
/* Stderr held back while it may still be a bash warning. */
#define HOLD_MAX 512

struct line {
	char *data;
	size_t len, off;
	struct line *next;
};

struct agent_stream {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct line *head, *tail;
	size_t queued;               /* bytes in the queue */
	int finished;                /* the runner queued its last line */
	int consumer_gone;           /* libmicrohttpd freed the response */
	int refs;                    /* runner + response */
	int wake[2];                 /* to the runner: the queue drained */
	struct agent_exec_sink sink;
	/* the runner's side only */
	agent_stream_run_fn run;
	void *arg;
	void (*free_arg)(void *arg);
	int filter;                  /* login shell: strip the warnings */
	int filter_done;
	int lines;                   /* warning lines dropped */
	struct orc_buf held;         /* stderr not yet known not to be a warning */
	size_t dropped;
};

static void stream_unref(struct agent_stream *s)
{
	struct line *l, *next;
	int last;

	pthread_mutex_lock(&s->lock);
	last = --s->refs == 0;
	pthread_mutex_unlock(&s->lock);
	if (!last)
		return;
	for (l = s->head; l; l = next) {
		next = l->next;
		free(l->data);
		free(l);
	}
	close(s->wake[0]);
	close(s->wake[1]);
	orc_buf_release(&s->held);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->cond);
	free(s);
}

/* Take b's contents as one line. */
static void push(struct agent_stream *s, struct orc_buf *b)
{
	struct line *l;

	orc_buf_addc(b, '\n');
	pthread_mutex_lock(&s->lock);
	if (s->consumer_gone) {
		pthread_mutex_unlock(&s->lock);
		orc_buf_reset(b);
		return;
	}
	l = xcalloc(1, sizeof(*l));
	l->data = orc_buf_detach(b, &l->len);
	if (s->tail)
		s->tail->next = l;
	else
		s->head = l;
	s->tail = l;
	s->queued += l->len;
	pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

static void push_output(struct agent_stream *s, int fd, const char *data, size_t n)
{
	struct orc_buf b = ORC_BUF_INIT;

	if (!n)
		return;
	orc_buf_adds(&b, fd == 1 ? "{\"type\":\"stdout\",\"data\":\"" : "{\"type\":\"stderr\",\"data\":\"");
	orc_base64_encode(&b, data, n);
	orc_buf_adds(&b, "\"}");
	push(s, &b);
}

static void flush_held(struct agent_stream *s)
{
	s->filter_done = 1;
	push_output(s, 2, s->held.ptr, s->held.len);
	orc_buf_release(&s->held);
}

/* Stderr of a login shell: drop up to two warning lines at its start. */
static void filter_stderr(struct agent_stream *s, const char *data, size_t n)
{
	size_t line = 0;
	int m;

	orc_buf_add(&s->held, data, n);
	for (;;) {
		m = agent_command_match_warning(s->held.ptr, s->held.len, &line);
		if (m == 1 && s->lines < 2) {
			memmove(s->held.ptr, s->held.ptr + line, s->held.len - line + 1);
			s->held.len -= line;
			s->dropped += line;
			s->lines++;
			continue;
		}
		if ((m == -1 && s->held.len < HOLD_MAX) || (s->held.len == 0 && s->lines < 2))
			return; /* wait for more */
		flush_held(s);
		return;
	}
}

static void sink_output(void *arg, int fd, const char *data, size_t n)
{
	struct agent_stream *s = arg;

	if (fd == 2 && s->filter && !s->filter_done)
		filter_stderr(s, data, n);
	else
		push_output(s, fd, data, n);
}

static int sink_ready(void *arg)
{
	struct agent_stream *s = arg;
	int ready;

	pthread_mutex_lock(&s->lock);
	ready = s->consumer_gone || s->queued < AGENT_STREAM_QUEUE_MAX;
	pthread_mutex_unlock(&s->lock);
	return ready;
}

static void wake_runner(struct agent_stream *s)
{
	ssize_t w;

	do
		w = write(s->wake[1], "x", 1);
	while (w < 0 && errno == EINTR);
}

/* libmicrohttpd's content callback; blocking is fine with a thread per
 * connection. */
static ssize_t reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct agent_stream *s = cls;
	struct line *l;
	size_t n, before;

	(void)pos;
	pthread_mutex_lock(&s->lock);
	while (!s->head && !s->finished)
		pthread_cond_wait(&s->cond, &s->lock);
	if (!s->head) {
		pthread_mutex_unlock(&s->lock);
		return MHD_CONTENT_READER_END_OF_STREAM;
	}
	l = s->head;
	n = l->len - l->off < max ? l->len - l->off : max;
	memcpy(buf, l->data + l->off, n);
	l->off += n;
	if (l->off == l->len) {
		s->head = l->next;
		if (!s->head)
			s->tail = NULL;
		free(l->data);
		free(l);
	}
	before = s->queued;
	s->queued -= n;
	pthread_mutex_unlock(&s->lock);
	if (before >= AGENT_STREAM_QUEUE_MAX && before - n < AGENT_STREAM_QUEUE_MAX)
		wake_runner(s);
	return (ssize_t)n;
}

static void reader_free(void *cls)
{
	struct agent_stream *s = cls;
	struct line *l, *next;

	pthread_mutex_lock(&s->lock);
	s->consumer_gone = 1;
	for (l = s->head; l; l = next) {
		next = l->next;
		free(l->data);
		free(l);
	}
	s->head = s->tail = NULL;
	s->queued = 0;
	pthread_mutex_unlock(&s->lock);
	wake_runner(s);
	stream_unref(s);
}

static void *runner_main(void *arg)
{
	struct agent_stream *s = arg;

	s->run(s, s->arg);
	if (!s->filter_done && s->held.len)
		flush_held(s);
	s->free_arg(s->arg);
	pthread_mutex_lock(&s->lock);
	s->finished = 1;
	pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
	stream_unref(s);
	return NULL;
}

int agent_stream_start(struct agent_reply *reply, agent_stream_run_fn run, void *arg,
		       void (*free_arg)(void *arg))
{
	struct agent_stream *s = xcalloc(1, sizeof(*s));
	struct MHD_Response *resp = NULL;
	pthread_attr_t attr;
	pthread_t t;
	int rc;

	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	s->wake[0] = s->wake[1] = -1;
	if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) < 0)
		goto fail;
	s->run = run;
	s->arg = arg;
	s->free_arg = free_arg;
	s->sink = (struct agent_exec_sink){ sink_output, sink_ready, s->wake[0], s };
	orc_buf_init(&s->held, 0);
	s->refs = 2;
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, reader, s, reader_free);
	if (!resp)
		goto fail;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/x-ndjson");
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, RUNNER_STACK);
	rc = pthread_create(&t, &attr, runner_main, s);
	pthread_attr_destroy(&attr);
	if (rc != 0) {
		orc_log(ORC_LOG_ERROR, "starting a streaming exec thread failed", NULL);
		s->refs = 1; /* only the response's reference is left */
		MHD_destroy_response(resp);
		free_arg(arg);
		return ORC_ERROR;
	}
	reply->status = MHD_HTTP_OK;
	reply->response = resp;
	return 0;
fail:
	if (s->wake[0] >= 0) {
		close(s->wake[0]);
		close(s->wake[1]);
	}
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->cond);
	free(s);
	free_arg(arg);
	return ORC_ERROR;
}

const struct agent_exec_sink *agent_stream_sink(struct agent_stream *s)
{
	return &s->sink;
}

void agent_stream_filter_warnings(struct agent_stream *s)
{
	s->filter = 1;
}

size_t agent_stream_dropped(struct agent_stream *s)
{
	return s->dropped;
}

void agent_stream_line(struct agent_stream *s, json_object *o)
{
	struct orc_buf b = ORC_BUF_INIT;
	size_t len;
	const char *text = orc_json_str(o, &len);

	if (!s->filter_done && s->held.len)
		flush_held(s);
	orc_buf_add(&b, text, len);
	push(s, &b);
}
