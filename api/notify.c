/*
 * LISTEN/NOTIFY: one thread with its own connection listens on the
 * channels of the handlers[] table and only dispatches: each notification
 * goes to the handlers of its channel (wake-ups of waiting request threads
 * here; the jobs waiting for their turn in a sandbox's lane, lanes.c:
 * orchard_lane when a job of the sandbox ended, orchard_sandbox when the
 * sandbox changed; the key cache, auth.c; revoked keys' streams,
 * key_revoke.c). The connection runs nothing but LISTEN.
 *
 * Waiters do not trust payloads: a notification only bumps the generation of
 * a bucket (hash of the row id), and a waiter whose bucket moved re-reads its
 * row. Waits are bounded and also re-check every few seconds, so a lost
 * notification (the listener reconnecting) costs latency, never a hang. When
 * the listener (re)connects, the epoch moves, every waiter re-reads and
 * every lane tries its next job again. One payload is kept:
 * orchard_checkpoint_taken names a checkpoint whose state the controller has
 * captured (step_policy.c's barrier); losing one only means waiting for
 * the row.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "checkpoint.h"
#include "err.h"
#include "log.h"
#include "strutil.h"
#include "xalloc.h"

#define NBUCKETS 256
#define RECHECK_MS 5000
/*
 * Waiters sleep on the condition variable of their bucket (modulo NCONDS),
 * so a notification wakes the few threads whose bucket it names instead of
 * every waiting request thread (hundreds of them with 128 waiting clients).
 */
#define NCONDS 64

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond[NCONDS];
	uint64_t gen[API_CHAN_COUNT][NBUCKETS];
	uint64_t epoch;
	char *conninfo;
} N = { .lock = PTHREAD_MUTEX_INITIALIZER };

static unsigned bucket_of(const char *id)
{
	uint32_t h = 2166136261u; /* FNV-1a */

	for (; *id; id++)
		h = (h ^ (unsigned char)*id) * 16777619u;
	return h % NBUCKETS;
}

void api_waiter_init(struct api_waiter *w, enum api_channel chan, const char *id)
{
	w->chan = chan;
	w->bucket = bucket_of(id);
	pthread_mutex_lock(&N.lock);
	w->gen = N.gen[chan][w->bucket];
	w->epoch = N.epoch;
	pthread_mutex_unlock(&N.lock);
}

static void mono_deadline(struct timespec *ts, int64_t deadline_ms)
{
	ts->tv_sec = deadline_ms / 1000;
	ts->tv_nsec = (deadline_ms % 1000) * 1000000L;
}

int api_waiter_wait(struct api_waiter *w, int64_t deadline_ms)
{
	int64_t until = orc_mono_ms() + RECHECK_MS;
	struct timespec ts;
	int woken = 0;

	if (deadline_ms < until)
		until = deadline_ms;
	mono_deadline(&ts, until);
	pthread_mutex_lock(&N.lock);
	for (;;) {
		if (N.gen[w->chan][w->bucket] != w->gen || N.epoch != w->epoch) {
			woken = 1;
			break;
		}
		if (orc_mono_ms() >= until)
			break;
		if (pthread_cond_timedwait(&N.cond[w->bucket % NCONDS], &N.lock, &ts) == ETIMEDOUT)
			continue; /* the loop re-checks the clock */
	}
	w->gen = N.gen[w->chan][w->bucket];
	w->epoch = N.epoch;
	pthread_mutex_unlock(&N.lock);
	return woken;
}

void api_notify_local(enum api_channel chan, const char *id)
{
	unsigned b = bucket_of(id);

	pthread_mutex_lock(&N.lock);
	N.gen[chan][b]++;
	pthread_cond_broadcast(&N.cond[b % NCONDS]);
	pthread_mutex_unlock(&N.lock);
}

/* The listener may have missed notifications: every waiter re-reads. */
static void bump_epoch(void)
{
	int i;

	pthread_mutex_lock(&N.lock);
	N.epoch++;
	for (i = 0; i < NCONDS; i++)
		pthread_cond_broadcast(&N.cond[i]);
	pthread_mutex_unlock(&N.lock);
}

/* The waits of notify.c's own channels; NULL (missed) is the epoch's. */
static void on_sandbox(const char *id)
{
	if (id)
		api_notify_local(API_CHAN_SANDBOX, id);
}

static void on_job(const char *id)
{
	if (!id)
		return;
	api_notify_local(API_CHAN_JOB, id);
	api_notify_local(API_CHAN_JOB_OUTPUT, id);   /* readers see it end */
}

static void on_job_output(const char *id)
{
	if (id)
		api_notify_local(API_CHAN_JOB_OUTPUT, id);
}

static void on_checkpoint(const char *id)
{
	if (id)
		api_notify_local(API_CHAN_CHECKPOINT, id);
}

/*
 * Who hears what. A channel may have several rows (LISTENed once); each
 * handler gets the payload, or NULL when the listener (re)connected and
 * may have missed notifications: it then re-reads whatever it caches.
 */
static const struct {
	const char *channel;
	void (*handler)(const char *payload);
} handlers[] = {
	{ "orchard_sandbox", on_sandbox },
	{ "orchard_sandbox", api_lanes_notified },       /* a job waiting in a failed sandbox ends */
	{ "orchard_job", on_job },
	{ "orchard_key", api_auth_notified },            /* the key cache (auth.c) */
	{ "orchard_key", api_key_revoke_notified },      /* its open streams (key_revoke.c) */
	{ "orchard_lane", api_lanes_notified },
	{ "orchard_checkpoint", on_checkpoint },
	{ "orchard_checkpoint_taken", api_step_taken },  /* the step barrier's (step_policy.c) */
	{ "orchard_job_output", on_job_output },
};

#define NHANDLERS (sizeof(handlers) / sizeof(*handlers))

static void handle(PGnotify *n)
{
	size_t i;

	for (i = 0; i < NHANDLERS; i++)
		if (!strcmp(n->relname, handlers[i].channel))
			handlers[i].handler(n->extra);
}

/* Notifications may have been lost (connected, reconnected, or lost). */
static void missed(void)
{
	size_t i;

	bump_epoch();
	for (i = 0; i < NHANDLERS; i++)
		handlers[i].handler(NULL);
}

static int listen_connect(PGconn **out)
{
	PGconn *c = NULL;
	size_t i;
	int err;

	if ((err = orc_pg_connect(&c, N.conninfo)) < 0)
		return err;
	for (i = 0; i < NHANDLERS; i++) {
		char sql[64];
		if (i && !strcmp(handlers[i].channel, handlers[i - 1].channel))
			continue;   /* rows of one channel are adjacent */
		snprintf(sql, sizeof(sql), "LISTEN %s", handlers[i].channel);
		if ((err = orc_pg_query(NULL, c, sql, 0, NULL)) < 0) {
			PQfinish(c);
			return err;
		}
	}
	*out = c;
	return 0;
}

static void drain(PGconn *c)
{
	PGnotify *n;

	while ((n = PQnotifies(c))) {
		handle(n);
		PQfreemem(n);
	}
}

static void *listener_main(void *arg)
{
	PGconn *c = NULL;
	unsigned backoff = 1;

	(void)arg;
	for (;;) {
		struct pollfd pfd;

		if (!c) {
			if (listen_connect(&c) < 0) {
				sleep(backoff);
				backoff = backoff < 8 ? backoff * 2 : 8;
				continue;
			}
			backoff = 1;
			/* Anything may have changed while we were not listening. */
			missed();
			orc_log(ORC_LOG_INFO, "listening for notifications", NULL);
		}
		drain(c);
		pfd.fd = PQsocket(c);
		pfd.events = POLLIN;
		pfd.revents = 0;
		if (poll(&pfd, 1, 1000) < 0 && errno != EINTR)
			orc_logf(ORC_LOG_ERROR, "poll() on the listen connection failed: %s", strerror(errno));
		if (!PQconsumeInput(c) || PQstatus(c) != CONNECTION_OK) {
			orc_log(ORC_LOG_WARN, "listen connection lost; reconnecting",
				"error", PQerrorMessage(c), NULL);
			PQfinish(c);
			c = NULL;
			missed();
			continue;
		}
		drain(c);
	}
	return NULL;
}

int api_notify_start(const char *conninfo)
{
	pthread_condattr_t ca;
	pthread_t t;
	int rc, i;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	for (i = 0; i < NCONDS; i++)
		pthread_cond_init(&N.cond[i], &ca);
	pthread_condattr_destroy(&ca);
	N.conninfo = xstrdup(conninfo);
	if ((rc = pthread_create(&t, NULL, listener_main, NULL)) != 0) {
		orc_logf(ORC_LOG_ERROR, "pthread_create() for the listener failed: %s", strerror(rc));
		return ORC_ERROR;
	}
	pthread_detach(t);
	return 0;
}
