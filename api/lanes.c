/*
 * Lanes: this process's serial jobs of a sandbox, tried one at a time in
 * acceptance order, each run once its turn has come across all replicas.
 * A concurrent job (the default, sql/migrations/019_job_concurrency.sql)
 * has a lane of its own, keyed by its id, so nothing holds it back; it is
 * tried here only when accepting it did not run it at once (wait: false, or
 * the database was unavailable for the claim).
 *
 * The order itself lives in the database (sql/migrations/007_job_order.sql):
 * every job has a per-sandbox seq, and a job is claimed only when no job of
 * its sandbox is running and none with a smaller seq is queued (job_run.c),
 * whichever replica accepted it. A lane is one process's share of that
 * order: its entries sorted by seq, the lowest one tried, never two at once.
 *
 * A try that finds an earlier job still open (on another replica) holds no
 * thread: the lane parks until a job of the sandbox ends anywhere (the
 * orchard_lane notification) or the sandbox changes state (orchard_sandbox;
 * notify.c calls api_lanes_wake), and at the latest RECHECK_MS later, so a
 * lost notification costs latency, never a hang. Wake-ups that arrive while
 * a try is under way are counted and the try is repeated instead of parked:
 * interest is registered before the check, so none is missed.
 *
 * A concurrent job accepted under exec limits (exec_limit.c) may find no
 * free slot: its lane parks like a serial one, and every end of a job
 * (of any sandbox: the slot may be the tenant's) tries the parked ones.
 *
 * An asynchronous job is tried by a worker thread; a synchronous one (wait:
 * true) by its request thread. A synchronous job whose turn had come when it
 * was accepted was claimed then (exec.c) and never enters a lane. A
 * synchronous caller that gives up waiting hands its entry to the workers;
 * the job still runs exactly once, since only a claim (queued -> running, in
 * the database) runs it, and an entry is tried by one thread at a time.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "err.h"
#include "log.h"
#include "strutil.h"
#include "xalloc.h"

#define LANE_BUCKETS 1024
#define QUEUE_MAX 10000   /* accepted-but-not-started jobs in this process */
#define RECHECK_MS 5000   /* parked lanes are tried again this often */
#define WORKERS_MAX 256   /* wait: false jobs running at once in this process */
#define IDLE_EXIT_MS 60000 /* a worker above the minimum idle this long ends */
#define KEY_MAX ((API_MAX_ID > 64 ? API_MAX_ID : 64) + 2)

struct lane;

struct api_lane_entry {
	struct api_lane_entry *next;      /* in the lane, by seq */
	struct api_lane_entry *run_next;  /* in the worker queue */
	struct lane *lane;
	int64_t seq;
	char job_id[64];
	char request_id[129];
	struct orc_trace trace;           /* the accepting request's, for logs and the agent */
	int has_trace;
	int sync;                         /* the request thread tries it */
	int turn;                         /* sync: a try is due */
	int parked;                       /* counted in L.parked */
	PGresult *claimed;                /* claimed when accepted: run it, no claim */
	pthread_cond_t cond;
};

struct lane {
	struct lane *hnext;
	char key[KEY_MAX + 1];            /* "s:" sandbox id, or "j:" job id */
	struct api_lane_entry *head;      /* sorted by seq */
	struct api_lane_entry *trying;    /* dispatched, not yet back */
	uint64_t wakes;                   /* wake-ups and arrivals so far */
	uint64_t seen;                    /* wakes when the current try began */
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t work;
	struct lane *buckets[LANE_BUCKETS];
	struct api_lane_entry *run_head, *run_tail;
	int run_len;                      /* entries in the worker queue */
	int workers, idle, min_workers;   /* worker threads, those waiting */
	int queued;
	int parked;                       /* concurrent jobs that found no free slot */
	int64_t next_sweep;               /* orc_mono_ms of the next re-check */
} L = { .lock = PTHREAD_MUTEX_INITIALIZER };

static unsigned hash(const char *s)
{
	uint32_t h = 2166136261u;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h % LANE_BUCKETS;
}

static void cond_init_mono(pthread_cond_t *c)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(c, &ca);
	pthread_condattr_destroy(&ca);
}

static void mono_timespec(struct timespec *ts, int64_t ms)
{
	ts->tv_sec = ms / 1000;
	ts->tv_nsec = (ms % 1000) * 1000000L;
}

static struct lane *lane_get(const char *key, int create)
{
	struct lane **b = &L.buckets[hash(key)], *l;

	for (l = *b; l; l = l->hnext)
		if (!strcmp(l->key, key))
			return l;
	if (!create)
		return NULL;
	l = xcalloc(1, sizeof(*l));
	snprintf(l->key, sizeof(l->key), "%s", key);
	l->hnext = *b;
	*b = l;
	return l;
}

static void lane_drop(struct lane *l)
{
	struct lane **p = &L.buckets[hash(l->key)];

	while (*p && *p != l)
		p = &(*p)->hnext;
	if (*p)
		*p = l->hnext;
	free(l);
}

void api_lanes_notified(const char *sandbox_id)
{
	if (sandbox_id)
		api_lanes_wake(sandbox_id);
	else
		api_lanes_wake_all();   /* notifications may have been missed */
}

static void *worker_main(void *arg);

/* One more worker thread. Locked. */
static int worker_spawn(void)
{
	pthread_t t;
	int rc;

	if ((rc = pthread_create(&t, NULL, worker_main, NULL)) != 0) {
		orc_logf(ORC_LOG_ERROR, "pthread_create() for an exec worker failed: %s", strerror(rc));
		return ORC_ERROR;
	}
	pthread_detach(t);
	L.workers++;
	return 0;
}

/* Try the lane's lowest entry unless one is being tried. Locked. */
static void lane_dispatch(struct lane *l)
{
	struct api_lane_entry *e = l->head;

	if (l->trying || !e)
		return;
	l->trying = e;
	l->seen = l->wakes;
	if (e->sync) {
		e->turn = 1;
		pthread_cond_signal(&e->cond);
		return;
	}
	e->run_next = NULL;
	if (L.run_tail)
		L.run_tail->run_next = e;
	else
		L.run_head = e;
	L.run_tail = e;
	L.run_len++;
	pthread_cond_signal(&L.work);
	/* concurrent jobs each hold a worker while they run: grow the pool
	 * rather than let a long one hold back the rest */
	if (L.run_len > L.idle && L.workers < WORKERS_MAX)
		worker_spawn();
}

static void lane_wake(struct lane *l)
{
	l->wakes++;
	lane_dispatch(l);
}

/*
 * A try of e came back. done: the job ran or can never run (e leaves the
 * lane; the caller frees it); otherwise its turn had not come, and the lane
 * parks unless a wake-up arrived during the try. Locked.
 */
static void lane_try_end(struct api_lane_entry *e, int done)
{
	struct lane *l = e->lane;
	struct api_lane_entry **p;

	l->trying = NULL;
	if (!done) {
		if (l->key[0] == 'j' && !e->parked) {
			e->parked = 1;
			L.parked++;
		}
		if (l->wakes != l->seen)
			lane_dispatch(l);
		return;
	}
	if (e->parked)
		L.parked--;
	for (p = &l->head; *p && *p != e; p = &(*p)->next)
		;
	if (*p)
		*p = e->next;
	L.queued--;
	if (l->head)
		lane_dispatch(l);
	else
		lane_drop(l);
}

/* The safety re-check: try every parked lane again. Locked. */
static void sweep_if_due(void)
{
	int64_t now = orc_mono_ms();
	struct lane *l;
	int i;

	if (now < L.next_sweep)
		return;
	L.next_sweep = now + RECHECK_MS;
	for (i = 0; i < LANE_BUCKETS; i++)
		for (l = L.buckets[i]; l; l = l->hnext)
			lane_wake(l);
}

static void entry_free(struct api_lane_entry *e)
{
	PQclear(e->claimed);
	pthread_cond_destroy(&e->cond);
	free(e);
}

static void lane_key(char out[KEY_MAX + 1], char kind, const char *id)
{
	snprintf(out, KEY_MAX + 1, "%c:%s", kind, id);
}

static int enqueue(struct api_lane_entry **out, const char *sandbox_id, const char *job_id,
		   int64_t seq, const char *request_id, int sync, int serial, PGresult *claimed)
{
	struct api_lane_entry *e, **p;
	struct lane *l;
	char key[KEY_MAX + 1];

	pthread_mutex_lock(&L.lock);
	if (L.queued >= QUEUE_MAX) {
		pthread_mutex_unlock(&L.lock);
		return ORC_EUNAVAIL;
	}
	e = xcalloc(1, sizeof(*e));
	snprintf(e->job_id, sizeof(e->job_id), "%s", job_id);
	snprintf(e->request_id, sizeof(e->request_id), "%s", request_id ? request_id : "");
	if (orc_log_context_trace()) {
		e->trace = *orc_log_context_trace();
		e->has_trace = 1;
	}
	e->seq = seq;
	e->sync = sync;
	e->claimed = claimed;
	cond_init_mono(&e->cond);
	if (serial)
		lane_key(key, 's', sandbox_id);
	else
		lane_key(key, 'j', job_id);
	l = lane_get(key, 1);
	e->lane = l;
	/* Usually the tail; an earlier job accepted by a racing request
	 * thread of this process may arrive after a later one. */
	for (p = &l->head; *p && (*p)->seq <= seq; p = &(*p)->next)
		;
	e->next = *p;
	*p = e;
	L.queued++;
	lane_wake(l);
	pthread_mutex_unlock(&L.lock);
	*out = e;
	return 0;
}

int api_lane_enqueue(struct api_lane_entry **out, const char *sandbox_id, const char *job_id,
		     int64_t seq, const char *request_id, int sync, int serial)
{
	return enqueue(out, sandbox_id, job_id, seq, request_id, sync, serial, NULL);
}

int api_lane_hand_over(const char *sandbox_id, const char *job_id, int64_t seq,
		       const char *request_id, PGresult *claimed)
{
	struct api_lane_entry *e;

	return enqueue(&e, sandbox_id, job_id, seq, request_id, 0, 0, claimed);
}

static int try_run(PGresult **out, struct api_lane_entry *e, const struct api_job_sink *sink)
{
	const char *rid = e->request_id[0] ? e->request_id : NULL;

	/* A worker thread speaks for the request that accepted the job. */
	orc_log_context_set(rid, e->has_trace ? &e->trace : NULL);
	if (e->claimed) {
		api_job_run_claimed(out, e->claimed, e->job_id, rid, sink);
		return 0;   /* it ran: done, whatever storing its result said */
	}
	return sink ? api_job_run_stream(out, e->job_id, rid, sink) : api_job_run(out, e->job_id, rid);
}

int api_lane_run(PGresult **out, struct api_lane_entry *e, int64_t deadline_ms,
		 const struct api_job_sink *sink)
{
	struct timespec ts;
	int64_t until;
	int done;

	if (out)
		*out = NULL;
	pthread_mutex_lock(&L.lock);
	for (;;) {
		while (!e->turn && orc_mono_ms() < deadline_ms) {
			sweep_if_due();
			if (e->turn)
				break;
			until = L.next_sweep < deadline_ms ? L.next_sweep : deadline_ms;
			mono_timespec(&ts, until);
			pthread_cond_timedwait(&e->cond, &L.lock, &ts);
		}
		if (!e->turn) {
			/* not being tried: the next dispatch goes to a worker, and
			 * e is theirs now */
			e->sync = 0;
			pthread_mutex_unlock(&L.lock);
			return 0;
		}
		e->turn = 0;
		pthread_mutex_unlock(&L.lock);
		done = try_run(out, e, sink) != API_EAGAIN;
		pthread_mutex_lock(&L.lock);
		lane_try_end(e, done);
		if (done)
			break;
	}
	pthread_mutex_unlock(&L.lock);
	entry_free(e);
	return 1;
}

void api_lanes_wake(const char *sandbox_id)
{
	struct lane *l;
	char key[KEY_MAX + 1];
	int i;

	lane_key(key, 's', sandbox_id);
	pthread_mutex_lock(&L.lock);
	if ((l = lane_get(key, 0)))
		lane_wake(l);
	/* a slot under exec limits may have freed, for any sandbox of the
	 * tenant: the parked concurrent jobs (only limits park them) try */
	for (i = 0; L.parked && i < LANE_BUCKETS; i++)
		for (l = L.buckets[i]; l; l = l->hnext)
			if (l->key[0] == 'j')
				lane_wake(l);
	pthread_mutex_unlock(&L.lock);
}

void api_lanes_wake_all(void)
{
	pthread_mutex_lock(&L.lock);
	L.next_sweep = 0;
	sweep_if_due();
	pthread_mutex_unlock(&L.lock);
}

static void *worker_main(void *arg)
{
	struct api_lane_entry *e;
	struct timespec ts;
	int64_t idle_since;
	int done;

	(void)arg;
	for (;;) {
		pthread_mutex_lock(&L.lock);
		idle_since = orc_mono_ms();
		for (;;) {
			sweep_if_due();
			if (L.run_head)
				break;
			if (L.workers > L.min_workers && orc_mono_ms() - idle_since >= IDLE_EXIT_MS) {
				L.workers--;
				pthread_mutex_unlock(&L.lock);
				return NULL;
			}
			mono_timespec(&ts, L.next_sweep);
			L.idle++;
			pthread_cond_timedwait(&L.work, &L.lock, &ts);
			L.idle--;
		}
		e = L.run_head;
		L.run_head = e->run_next;
		if (!L.run_head)
			L.run_tail = NULL;
		L.run_len--;
		pthread_mutex_unlock(&L.lock);
		done = try_run(NULL, e, NULL) != API_EAGAIN;
		orc_log_context_clear();
		pthread_mutex_lock(&L.lock);
		lane_try_end(e, done);
		pthread_mutex_unlock(&L.lock);
		if (done)
			entry_free(e);
	}
	return NULL;
}

int api_lanes_start(int workers)
{
	int i, err = 0;

	cond_init_mono(&L.work);
	pthread_mutex_lock(&L.lock);
	L.min_workers = workers;
	for (i = 0; i < workers && err == 0; i++)
		err = worker_spawn();
	pthread_mutex_unlock(&L.lock);
	return err;
}
