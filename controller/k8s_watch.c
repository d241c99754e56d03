/*
 * The watch of our pods and the table it keeps (client-go's reflector in
 * miniature): LIST with our label selector (paginated), then WATCH from
 * the list's resourceVersion with bookmarks; a watch that ends is resumed
 * from the last resourceVersion seen, one that breaks is resumed after a
 * backoff, and 410 Gone (an ERROR event or the status) starts over with a
 * LIST. A LIST replaces the table, so pods that vanished while no watch
 * was open are noticed too.
 *
 * One thread of its own; the controller's loop reads the table under the
 * mutex and is woken through a pipe when a sandbox's pod changed in a way
 * it cares about (ready, failed, vanished, got an IP, a new message).
 *
 * create() puts the pod it just made into the table at once (k8s_watch_put)
 * so that its status never reads "gone" while the watch lags behind. Such
 * an entry is pinned to its uid until the watch reports that uid: events
 * of an older pod of the same name are ignored meanwhile, and a LIST that
 * started before the put may not remove or replace it.
 */
#include "k8s.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "json.h"
#include "log.h"
#include "strutil.h"
#include "url.h"
#include "xalloc.h"

#define NBUCKETS 4096
#define MAX_QUEUE 65536
#define MAX_RV 256
#define PAGE "500"
#define BACKOFF_MAX_MS 5000

struct entry {
	struct entry *next;
	char *id;
	struct k8s_pod_state st;
	int64_t unsched_since_ms;      /* monotonic; 0 while schedulable */
	int64_t pinned_ms;             /* put by create() at this time (monotonic), and
					* the watch has not reported its uid yet; 0: not */
	int seen;                      /* mark of the current LIST */
};

struct k8s_watch {
	struct k8s_client *client;
	const struct k8s_config *cfg;
	struct k8s_thread thr;
	int64_t backoff;               /* the watch thread's own: ms before retrying */

	pthread_mutex_t lock;          /* everything below */
	pthread_cond_t changed;
	uint64_t gen;
	int synced;                    /* a LIST has succeeded */
	struct entry *buckets[NBUCKETS];
	char **queue;                  /* ids for drain() */
	size_t nqueue, aqueue;
	int pipe_r, pipe_w;

	char *rv;                      /* the watch thread's own */
	int expired;
};

/* A listed pod before it goes into the table. */
struct listed {
	char *id;
	struct k8s_pod_state st;
};

/* ---- the table (caller holds the lock) ---------------------------------------- */

static size_t bucket(const char *id)
{
	uint32_t h = 2166136261u;

	while (*id)
		h = (h ^ (unsigned char)*id++) * 16777619u;
	return h % NBUCKETS;
}

static struct entry **find(struct k8s_watch *w, const char *id)
{
	struct entry **p = &w->buckets[bucket(id)];

	while (*p && strcmp((*p)->id, id))
		p = &(*p)->next;
	return p;
}

static void notify(struct k8s_watch *w, const char *id)
{
	char one = 1;
	ssize_t n;

	if (w->nqueue >= MAX_QUEUE)
		return;  /* the loop's fallback polling covers the rest */
	if (w->nqueue == w->aqueue) {
		w->aqueue = w->aqueue ? orc_mul_size(w->aqueue, 2) : 64;
		w->queue = xrealloc(w->queue, orc_mul_size(w->aqueue, sizeof(*w->queue)));
	}
	w->queue[w->nqueue++] = xstrdup(id);
	if (w->nqueue == 1) {
		do
			n = write(w->pipe_w, &one, 1);
		while (n < 0 && errno == EINTR);
	}
}

static void entry_remove(struct k8s_watch *w, struct entry **p)
{
	struct entry *e = *p;

	*p = e->next;
	notify(w, e->id);
	free(e->id);
	free(e);
}

/*
 * Record the state of sandbox id's pod. pinned: it comes from create()'s
 * own answer; otherwise from the watch or a LIST, which must not overwrite
 * a pinned entry with another pod's state (an older pod of that name).
 */
static void put_state(struct k8s_watch *w, const char *id, const struct k8s_pod_state *st,
		      int pinned)
{
	struct entry **p = find(w, id), *e = *p;
	int changed;

	if (!e) {
		e = xcalloc(1, sizeof(*e));
		e->id = xstrdup(id);
		e->st.phase = K8S_POD_PENDING;
		*p = e;
	} else if (pinned ? !strcmp(e->st.uid, st->uid) : e->pinned_ms && strcmp(e->st.uid, st->uid)) {
		/* create()'s answer is older than what the watch has of that pod;
		 * the watch's news of another pod is older than create()'s. */
		e->seen = 1;
		return;
	}
	/* What the loop acts on: a phase, the address, the message for the user. */
	changed = e->st.phase != st->phase || e->st.deleting != st->deleting ||
		  strcmp(e->st.uid, st->uid) || strcmp(e->st.ip, st->ip) ||
		  strcmp(e->st.message, st->message);
	e->st = *st;
	e->seen = 1;
	e->pinned_ms = pinned ? orc_mono_ms() : 0;
	if (!st->unschedulable)
		e->unsched_since_ms = 0;
	else if (!e->unsched_since_ms)
		e->unsched_since_ms = orc_mono_ms();
	if (changed)
		notify(w, id);
}

static void changed(struct k8s_watch *w)
{
	w->gen++;
	pthread_cond_broadcast(&w->changed);
}

/* ---- events ------------------------------------------------------------------ */

static void set_rv(struct k8s_watch *w, json_object *obj)
{
	const char *rv = k8s_meta_str(obj, "resourceVersion");

	if (rv && *rv && strlen(rv) < MAX_RV) {
		free(w->rv);
		w->rv = xstrdup(rv);
	}
}

/* One watch event line; nonzero stops the stream. */
static int on_event(void *arg, const char *line, size_t len)
{
	struct k8s_watch *w = arg;
	json_object *ev = NULL, *obj = NULL, *code;
	struct k8s_pod_state st;
	const char *type = NULL, *id;
	struct entry **p;
	char msg[128] = "";

	if (orc_json_parse_object(&ev, line, len, msg, sizeof(msg)) < 0 ||
	    orc_json_get_str(ev, "type", &type, NULL, 0) != 0 ||
	    orc_json_get_object(ev, "object", &obj, NULL, 0) != 0) {
		orc_log(ORC_LOG_WARN, "kubernetes watch: malformed event; reconnecting", "error", msg, NULL);
		json_object_put(ev);
		return 1;
	}
	if (!strcmp(type, "ERROR")) {
		code = NULL;
		json_object_object_get_ex(obj, "code", &code);
		if (code && json_object_get_int(code) == 410)
			w->expired = 1;
		else
			orc_log(ORC_LOG_WARN, "kubernetes watch: error event", "event", line, NULL);
		json_object_put(ev);
		return 1;
	}
	if (!strcmp(type, "BOOKMARK")) {
		set_rv(w, obj);
		json_object_put(ev);
		return 0;
	}
	id = k8s_object_sandbox(obj);
	if (id && (!strcmp(type, "ADDED") || !strcmp(type, "MODIFIED"))) {
		k8s_pod_state_read(&st, obj);
		pthread_mutex_lock(&w->lock);
		put_state(w, id, &st, 0);
		changed(w);
		pthread_mutex_unlock(&w->lock);
	} else if (id && !strcmp(type, "DELETED")) {
		pthread_mutex_lock(&w->lock);
		p = find(w, id);
		/* Only the pod we know: a newer one of the same name stays. */
		if (*p && (!k8s_meta_str(obj, "uid") || !strcmp((*p)->st.uid, k8s_meta_str(obj, "uid"))))
			entry_remove(w, p);
		changed(w);
		pthread_mutex_unlock(&w->lock);
	} else if (strcmp(type, "ADDED") && strcmp(type, "MODIFIED") && strcmp(type, "DELETED")) {
		orc_log(ORC_LOG_WARN, "kubernetes watch: unknown event type", "type", type, NULL);
	}
	set_rv(w, obj);
	json_object_put(ev);
	return 0;
}

/* ---- LIST ------------------------------------------------------------------------ */

static void listed_free(struct listed *l, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		free(l[i].id);
	free(l);
}

/* One page: its items into *l, its continue token into *next. */
static int list_page(struct k8s_watch *w, struct listed **l, size_t *n, char **rv, char **next,
		     const char *cont)
{
	struct k8s_response r = K8S_RESPONSE_INIT;
	json_object *list = NULL, *items = NULL, *meta = NULL, *v;
	char *esc = cont ? orc_url_escape(cont, "") : NULL, *path, *why;
	const char *id;
	size_t i, m;
	int err;

	path = xasprintf("/api/v1/namespaces/%s/pods?%s&limit=" PAGE "%s%s", w->cfg->ns,
			 K8S_SELECTOR, esc ? "&continue=" : "", esc ? esc : "");
	if ((err = k8s_call(w->client, &r, "GET", path, NULL, 0)) < 0)
		goto done;
	if (r.status != 200) {
		why = k8s_status_message(&r);
		orc_log(ORC_LOG_WARN, "kubernetes: listing pods failed", "error", why, NULL);
		free(why);
		err = r.status == 410 ? ORC_ECONFLICT : ORC_EUNAVAIL;
		goto done;
	}
	if ((err = orc_json_parse_object(&list, r.body.ptr, r.body.len, NULL, 0)) < 0 ||
	    !json_object_object_get_ex(list, "items", &items) ||
	    !json_object_is_type(items, json_type_array) ||
	    !json_object_object_get_ex(list, "metadata", &meta)) {
		orc_log(ORC_LOG_WARN, "kubernetes: malformed pod list", NULL);
		err = ORC_EUNAVAIL;
		goto done;
	}
	if (!*rv && json_object_object_get_ex(meta, "resourceVersion", &v) &&
	    json_object_is_type(v, json_type_string) && strlen(json_object_get_string(v)) < MAX_RV)
		*rv = xstrdup(json_object_get_string(v));
	*next = json_object_object_get_ex(meta, "continue", &v) && json_object_is_type(v, json_type_string) &&
		json_object_get_string_len(v) > 0 ? xstrdup(json_object_get_string(v)) : NULL;
	m = json_object_array_length(items);
	*l = xrealloc(*l, orc_mul_size(orc_add_size(*n, m) + 1, sizeof(**l)));
	for (i = 0; i < m; i++) {
		json_object *pod = json_object_array_get_idx(items, i);
		if (!(id = k8s_object_sandbox(pod)))
			continue;
		(*l)[*n].id = xstrdup(id);
		k8s_pod_state_read(&(*l)[*n].st, pod);
		(*n)++;
	}
done:
	json_object_put(list);
	k8s_response_release(&r);
	free(path);
	free(esc);
	return err;
}

/* LIST every page, then make the table exactly that (but for pods
 * create() put there after the LIST began: they may be newer than it). */
static int relist(struct k8s_watch *w)
{
	struct listed *l = NULL;
	size_t n = 0, i, b;
	char *rv = NULL, *cont = NULL, *next = NULL;
	struct entry **p, *e;
	int64_t started = orc_mono_ms();
	int err, restarts = 0;

	for (;;) {
		err = list_page(w, &l, &n, &rv, &next, cont);
		free(cont);
		cont = next;
		next = NULL;
		if (err == ORC_ECONFLICT && restarts++ < 3) {
			/* the continue token expired: start over */
			listed_free(l, n);
			l = NULL;
			n = 0;
			free(rv);
			rv = NULL;
			free(cont);
			cont = NULL;
			continue;
		}
		if (err < 0 || !cont)
			break;
	}
	if (err < 0 || !rv) {
		err = err < 0 ? err : ORC_EUNAVAIL;
		goto done;
	}
	pthread_mutex_lock(&w->lock);
	for (b = 0; b < NBUCKETS; b++)
		for (p = &w->buckets[b]; *p; p = &(*p)->next)
			(*p)->seen = 0;
	for (i = 0; i < n; i++) {
		e = *find(w, l[i].id);
		if (e && e->pinned_ms >= started) {
			e->seen = 1;
			if (!strcmp(e->st.uid, l[i].st.uid))
				put_state(w, l[i].id, &l[i].st, 0);
			continue;
		}
		if (e)
			e->pinned_ms = 0;   /* the LIST is newer than create()'s answer */
		put_state(w, l[i].id, &l[i].st, 0);
	}
	for (b = 0; b < NBUCKETS; b++) {
		p = &w->buckets[b];
		while (*p) {
			if (!(*p)->seen && (*p)->pinned_ms < started)
				entry_remove(w, p);   /* vanished while we were not watching */
			else
				p = &(*p)->next;
		}
	}
	w->synced = 1;
	changed(w);
	pthread_mutex_unlock(&w->lock);
	free(w->rv);
	w->rv = rv;
	rv = NULL;
	orc_log(ORC_LOG_INFO, "kubernetes: listed our pods", ORC_LOG_INT("pods", n),
		"resource_version", w->rv, NULL);
done:
	listed_free(l, n);
	free(rv);
	free(cont);
	return err;
}

/* ---- WATCH ------------------------------------------------------------------------- */

/* One watch connection: 0 when it ended cleanly, ORC_ECONFLICT on 410,
 * ORC_EUNAVAIL when it broke or was refused. */
static int watch_once(struct k8s_watch *w)
{
	struct orc_buf errbody = ORC_BUF_INIT;
	struct k8s_response r = K8S_RESPONSE_INIT;
	char *rv = orc_url_escape(w->rv, ""), *path, *why;
	long status = 0;
	int err;

	path = xasprintf("/api/v1/namespaces/%s/pods?watch=1&allowWatchBookmarks=true"
			 "&resourceVersion=%s&timeoutSeconds=%lld&%s",
			 w->cfg->ns, rv, (long long)w->cfg->watch_timeout_s, K8S_SELECTOR);
	orc_buf_init(&errbody, 65536);
	w->expired = 0;
	err = k8s_stream(w->client, &status, &errbody, path, on_event, w,
			 (w->cfg->watch_timeout_s + 30) * 1000);
	if (w->expired || status == 410) {
		err = ORC_ECONFLICT;
	} else if (status && status != 200) {
		r.status = status;
		r.body = errbody;
		why = k8s_status_message(&r);
		orc_log(ORC_LOG_WARN, "kubernetes watch refused", "error", why, NULL);
		free(why);
		err = ORC_EUNAVAIL;
	}
	orc_buf_release(&errbody);
	free(path);
	free(rv);
	return err;
}

/* The thread's step: a LIST or a WATCH, then no wait, or a backoff
 * doubling from 200 ms to BACKOFF_MAX_MS while they fail. */
static int64_t step(void *arg)
{
	struct k8s_watch *w = arg;
	int err;

	if (!w->rv) {
		err = relist(w);
	} else {
		err = watch_once(w);
		if (err == ORC_ECONFLICT) {
			orc_log(ORC_LOG_INFO, "kubernetes watch expired (410); listing again",
				"resource_version", w->rv, NULL);
			free(w->rv);
			w->rv = NULL;
			return 0;
		}
	}
	if (err == 0) {
		w->backoff = 0;
		return 0;
	}
	w->backoff = w->backoff ? w->backoff * 2 : 200;
	if (w->backoff > BACKOFF_MAX_MS)
		w->backoff = BACKOFF_MAX_MS;
	return w->backoff;
}

/* ---- the interface ------------------------------------------------------------------- */

int k8s_watch_start(struct k8s_watch **out, struct k8s_client *c, const struct k8s_config *cfg)
{
	struct k8s_watch *w = xcalloc(1, sizeof(*w));
	pthread_condattr_t ca;
	int fds[2];

	w->client = c;
	w->cfg = cfg;
	pthread_mutex_init(&w->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->changed, &ca);
	pthread_condattr_destroy(&ca);
	if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0) {
		orc_log(ORC_LOG_ERROR, "pipe2() failed", "error", strerror(errno), NULL);
		w->pipe_r = w->pipe_w = -1;
		k8s_watch_stop(w);
		return ORC_ERROR;
	}
	w->pipe_r = fds[0];
	w->pipe_w = fds[1];
	if (k8s_thread_start(&w->thr, c, "watch", step, w) < 0) {
		k8s_watch_stop(w);
		return ORC_ERROR;
	}
	*out = w;
	return 0;
}

void k8s_watch_stop(struct k8s_watch *w)
{
	struct entry *e, *next;
	size_t b;

	if (!w)
		return;
	k8s_thread_stop(&w->thr);
	for (b = 0; b < NBUCKETS; b++)
		for (e = w->buckets[b]; e; e = next) {
			next = e->next;
			free(e->id);
			free(e);
		}
	ctl_ids_free(w->queue, w->nqueue);
	if (w->pipe_r >= 0)
		close(w->pipe_r);
	if (w->pipe_w >= 0)
		close(w->pipe_w);
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->changed);
	free(w->rv);
	free(w);
}

int k8s_watch_get(struct k8s_watch *w, struct k8s_pod_state *out, int64_t *unsched_ms,
		  const char *id)
{
	struct entry *e;
	int err = 0;

	pthread_mutex_lock(&w->lock);
	if (!(e = *find(w, id))) {
		err = w->synced ? ORC_ENOTFOUND : ORC_EUNAVAIL;
	} else {
		*out = e->st;
		if (unsched_ms)
			*unsched_ms = e->unsched_since_ms ? orc_mono_ms() - e->unsched_since_ms : 0;
	}
	pthread_mutex_unlock(&w->lock);
	return err;
}

void k8s_watch_put(struct k8s_watch *w, json_object *pod)
{
	struct k8s_pod_state st;
	const char *id = k8s_object_sandbox(pod);

	if (!id)
		return;
	k8s_pod_state_read(&st, pod);
	pthread_mutex_lock(&w->lock);
	put_state(w, id, &st, 1);
	changed(w);
	pthread_mutex_unlock(&w->lock);
}

uint64_t k8s_watch_generation(struct k8s_watch *w)
{
	uint64_t g;

	pthread_mutex_lock(&w->lock);
	g = w->gen;
	pthread_mutex_unlock(&w->lock);
	return g;
}

void k8s_watch_wait(struct k8s_watch *w, uint64_t seen, int64_t until_ms)
{
	struct timespec ts;
	int64_t now;

	pthread_mutex_lock(&w->lock);
	while (w->gen == seen && (now = orc_mono_ms()) < until_ms) {
		/* orc_mono_ms() is CLOCK_MONOTONIC, the condition's clock */
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += (until_ms - now) / 1000;
		ts.tv_nsec += (long)((until_ms - now) % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		if (pthread_cond_timedwait(&w->changed, &w->lock, &ts) == ETIMEDOUT)
			break;
	}
	pthread_mutex_unlock(&w->lock);
}

int k8s_watch_fd(struct k8s_watch *w)
{
	return w->pipe_r;
}

void k8s_watch_drain(struct k8s_watch *w, ctl_ready_fn fn, void *arg)
{
	char buf[256], **q;
	size_t n, i;

	while (read(w->pipe_r, buf, sizeof(buf)) > 0)
		;
	pthread_mutex_lock(&w->lock);
	q = w->queue;
	n = w->nqueue;
	w->queue = NULL;
	w->nqueue = w->aqueue = 0;
	pthread_mutex_unlock(&w->lock);
	for (i = 0; i < n; i++)
		fn(q[i], arg);
	ctl_ids_free(q, n);
}
