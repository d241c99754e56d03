/*
 * Per-sandbox lanes: jobs of one sandbox start in the order this process
 * accepted them and never overlap. Each sandbox with work has a lane, a FIFO
 * of entries; only its head runs. A synchronous exec (wait: true) runs its
 * job on its own request thread when its turn comes; an asynchronous one is
 * run by a worker thread. A synchronous caller that gives up waiting for its
 * turn hands the entry to the workers, so the job still runs exactly once.
 *
 * Scope: one api process. Ordering across replicas is later work (issue 4);
 * the agent serializes exec calls too.
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

struct lane;

struct api_lane_entry {
	struct api_lane_entry *next;      /* in the lane */
	struct api_lane_entry *run_next;  /* in the worker queue */
	struct lane *lane;
	char job_id[64];
	char request_id[129];
	int sync;                         /* the request thread runs it */
	int turn;                         /* dispatched */
	pthread_cond_t cond;
};

struct lane {
	struct lane *hnext;
	char sandbox_id[API_MAX_ID + 1];
	struct api_lane_entry *head, *tail;
	int busy;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t work;
	struct lane *buckets[LANE_BUCKETS];
	struct api_lane_entry *run_head, *run_tail;
	int queued;
} L = { .lock = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER };

static unsigned hash(const char *s)
{
	uint32_t h = 2166136261u;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h % LANE_BUCKETS;
}

static struct lane *lane_get(const char *sandbox_id, int create)
{
	struct lane **b = &L.buckets[hash(sandbox_id)], *l;

	for (l = *b; l; l = l->hnext)
		if (!strcmp(l->sandbox_id, sandbox_id))
			return l;
	if (!create)
		return NULL;
	l = xcalloc(1, sizeof(*l));
	snprintf(l->sandbox_id, sizeof(l->sandbox_id), "%s", sandbox_id);
	l->hnext = *b;
	*b = l;
	return l;
}

static void lane_drop(struct lane *l)
{
	struct lane **p = &L.buckets[hash(l->sandbox_id)];

	while (*p && *p != l)
		p = &(*p)->hnext;
	if (*p)
		*p = l->hnext;
	free(l);
}

/* Start the lane's head if nothing of the lane runs. Locked. */
static void lane_dispatch(struct lane *l)
{
	struct api_lane_entry *e = l->head;

	if (l->busy || !e)
		return;
	l->busy = 1;
	e->turn = 1;
	if (e->sync) {
		pthread_cond_signal(&e->cond);
		return;
	}
	e->run_next = NULL;
	if (L.run_tail)
		L.run_tail->run_next = e;
	else
		L.run_head = e;
	L.run_tail = e;
	pthread_cond_signal(&L.work);
}

int api_lane_enqueue(struct api_lane_entry **out, const char *sandbox_id, const char *job_id,
		     const char *request_id, int sync)
{
	struct api_lane_entry *e;
	pthread_condattr_t ca;
	struct lane *l;

	pthread_mutex_lock(&L.lock);
	if (L.queued >= QUEUE_MAX) {
		pthread_mutex_unlock(&L.lock);
		return ORC_EUNAVAIL;
	}
	e = xcalloc(1, sizeof(*e));
	snprintf(e->job_id, sizeof(e->job_id), "%s", job_id);
	snprintf(e->request_id, sizeof(e->request_id), "%s", request_id ? request_id : "");
	e->sync = sync;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&e->cond, &ca);
	pthread_condattr_destroy(&ca);
	l = lane_get(sandbox_id, 1);
	e->lane = l;
	if (l->tail)
		l->tail->next = e;
	else
		l->head = e;
	l->tail = e;
	L.queued++;
	lane_dispatch(l);
	pthread_mutex_unlock(&L.lock);
	*out = e;
	return 0;
}

int api_lane_wait_turn(struct api_lane_entry *e, int64_t deadline_ms)
{
	struct timespec ts = { deadline_ms / 1000, (deadline_ms % 1000) * 1000000L };
	int turn;

	pthread_mutex_lock(&L.lock);
	while (!e->turn && orc_mono_ms() < deadline_ms)
		pthread_cond_timedwait(&e->cond, &L.lock, &ts);
	turn = e->turn;
	if (!turn)
		e->sync = 0; /* a worker runs it when its turn comes; e is theirs now */
	pthread_mutex_unlock(&L.lock);
	return turn;
}

void api_lane_done(struct api_lane_entry *e)
{
	struct lane *l = e->lane;

	pthread_mutex_lock(&L.lock);
	l->head = e->next;
	if (!l->head)
		l->tail = NULL;
	l->busy = 0;
	L.queued--;
	if (l->head)
		lane_dispatch(l);
	else
		lane_drop(l);
	pthread_mutex_unlock(&L.lock);
	pthread_cond_destroy(&e->cond);
	free(e);
}

static void *worker_main(void *arg)
{
	struct api_lane_entry *e;

	(void)arg;
	for (;;) {
		pthread_mutex_lock(&L.lock);
		while (!L.run_head)
			pthread_cond_wait(&L.work, &L.lock);
		e = L.run_head;
		L.run_head = e->run_next;
		if (!L.run_head)
			L.run_tail = NULL;
		pthread_mutex_unlock(&L.lock);
		api_job_run(e->job_id, e->request_id[0] ? e->request_id : NULL);
		api_lane_done(e);
	}
	return NULL;
}

int api_lanes_start(int workers)
{
	int i, rc;

	for (i = 0; i < workers; i++) {
		pthread_t t;
		if ((rc = pthread_create(&t, NULL, worker_main, NULL)) != 0) {
			orc_logf(ORC_LOG_ERROR, "pthread_create() for an exec worker failed: %s", strerror(rc));
			return ORC_ERROR;
		}
		pthread_detach(t);
	}
	return 0;
}
