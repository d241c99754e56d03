/*
 * POST /trajectories/replay[?image=&compare=&keep=&ready_timeout=]
 *   body: one trajectory as exported (JSON lines, header ... end)
 *   -> {"summary": {...}, "trajectories": [report]}, the shape of
 *      `orchardctl replay -o json` (docs/trajectory.md)
 *
 * The whole body is checked before anything is created: bad JSON is 400,
 * a body that is not one complete trajectory of a known version is 422,
 * past API_BODY_MAX it is 413 (request.c). The replay then runs in this
 * request's thread (replay_run.c) for as long as its steps take, so the
 * number running at once is bounded per process: ORCHARD_API_REPLAYS in
 * all (default a quarter of ORCHARD_API_THREADS, at least 1; beyond it
 * 503 with Retry-After) and ORCHARD_API_REPLAYS_PER_TENANT per tenant
 * (default 2; beyond it 429), so replays never take every request thread.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "json.h"
#include "log.h"
#include "replay.h"
#include "strutil.h"
#include "xalloc.h"

#define READY_DEFAULT_S 300
#define READY_MAX_S 3600
#define STEPS_MAX 10000
/* Below nginx's fastcgi_read_timeout (3700 s): no step starts after this. */
#define REPLAY_TIME_MAX_S 3500
#define PER_TENANT_DEFAULT 2
#define IMAGE_MAX 1024

/* ---- how many replays run at once ------------------------------------------------ */

struct replay_slot {
	int64_t tenant_id;
	int n;
};

static struct {
	pthread_once_t once;
	pthread_mutex_t lock;
	int max_total;
	int max_tenant;
	int total;
	struct replay_slot *slots;        /* max_total entries; n == 0 is free */
} limits = { PTHREAD_ONCE_INIT, PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, NULL };

static int env_limit(const char *name, int dflt, int max)
{
	const char *v = getenv(name);
	int64_t n;

	if (!v || !*v)
		return dflt;
	if (orc_parse_i64(&n, v, 1, max) < 0) {
		orc_logf(ORC_LOG_WARN, "%s=\"%s\" is not an integer in 1..%d; using %d", name, v, max, dflt);
		return dflt;
	}
	return (int)n;
}

static void limits_init(void)
{
	int threads = api_server.threads > 0 ? api_server.threads : 32;
	int dflt = threads / 4 > 0 ? threads / 4 : 1;

	limits.max_total = env_limit("ORCHARD_API_REPLAYS", dflt, threads);
	limits.max_tenant = env_limit("ORCHARD_API_REPLAYS_PER_TENANT", PER_TENANT_DEFAULT, threads);
	limits.slots = xcalloc((size_t)limits.max_total, sizeof(*limits.slots));
}

/* Take a slot for tenant: 0, ORC_EQUOTA (the tenant's bound), ORC_EUNAVAIL (the server's). */
static int slot_take(int64_t tenant_id, int *running_out)
{
	struct replay_slot *mine = NULL, *free_slot = NULL;
	int i, err = 0;

	pthread_once(&limits.once, limits_init);
	pthread_mutex_lock(&limits.lock);
	for (i = 0; i < limits.max_total; i++) {
		if (limits.slots[i].n && limits.slots[i].tenant_id == tenant_id)
			mine = &limits.slots[i];
		else if (!limits.slots[i].n && !free_slot)
			free_slot = &limits.slots[i];
	}
	*running_out = mine ? mine->n : 0;
	if (mine && mine->n >= limits.max_tenant) {
		err = ORC_EQUOTA;
	} else if (limits.total >= limits.max_total) {
		*running_out = limits.total;
		err = ORC_EUNAVAIL;
	} else {
		if (!mine) {
			mine = free_slot;     /* total < max_total: one is free */
			mine->tenant_id = tenant_id;
		}
		mine->n++;
		limits.total++;
	}
	pthread_mutex_unlock(&limits.lock);
	return err;
}

static void slot_put(int64_t tenant_id)
{
	int i;

	pthread_mutex_lock(&limits.lock);
	for (i = 0; i < limits.max_total; i++) {
		if (limits.slots[i].n && limits.slots[i].tenant_id == tenant_id) {
			limits.slots[i].n--;
			limits.total--;
			break;
		}
	}
	pthread_mutex_unlock(&limits.lock);
}

/* ---- the request ----------------------------------------------------------------- */

static int parse_opts(struct api_replay_opts *o, struct api_req *r)
{
	const char *v;
	int64_t n;

	memset(o, 0, sizeof(*o));
	o->ready_timeout_s = READY_DEFAULT_S;
	if ((v = api_req_query(r, "image"))) {
		if (!*v || strlen(v) > IMAGE_MAX || !orc_utf8_valid(v, strlen(v)) || strpbrk(v, " \t\r\n"))
			return api_reply_error(r, ORC_EINVALID, "query parameter 'image' must be an image "
					       "reference of 1-%d characters without whitespace", IMAGE_MAX);
		o->image = v;
	}
	if ((v = api_req_query(r, "compare")) && orc_traj_compare_parse(&o->compare, v) < 0)
		return api_reply_error(r, ORC_EINVALID, "query parameter 'compare' must be exact, "
				       "exit-code or none");
	if ((v = api_req_query(r, "keep"))) {
		if (!strcmp(v, "true") || !strcmp(v, "1"))
			o->keep = 1;
		else if (*v && strcmp(v, "false") && strcmp(v, "0"))
			return api_reply_error(r, ORC_EINVALID, "query parameter 'keep' must be true or false");
	}
	if ((v = api_req_query(r, "ready_timeout"))) {
		if (orc_parse_i64(&n, v, 1, READY_MAX_S) < 0)
			return api_reply_error(r, ORC_EINVALID, "query parameter 'ready_timeout' must be "
					       "whole seconds from 1 to %d", READY_MAX_S);
		o->ready_timeout_s = n;
	}
	return 0;
}

/* The body: JSON lines holding exactly one complete trajectory. */
static int parse_body(struct orc_traj_set *set, struct api_req *r)
{
	const char *p = orc_buf_cstr(&r->body), *end = p + r->body.len, *nl;
	json_object *line;
	size_t lineno = 0, len, steps = 0;
	int err;

	set->max = 1;
	for (; p < end; p = nl ? nl + 1 : end) {
		nl = memchr(p, '\n', (size_t)(end - p));
		len = (size_t)((nl ? nl : end) - p);
		lineno++;
		while (len && (p[len - 1] == '\r' || p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		if (!len)
			continue;
		if (orc_json_parse_object(&line, p, len, API_ERRBUF(r)) < 0)
			return api_reply_error(r, API_EBADREQ, "line %zu of the body is not a JSON object: %s "
					       "(the body is a trajectory as exported: JSON lines)", lineno,
					       r->error);
		if (json_object_object_get_ex(line, "step", NULL) && ++steps > STEPS_MAX) {
			json_object_put(line);
			return api_reply_error(r, ORC_EINVALID, "the trajectory has more than %d steps", STEPS_MAX);
		}
		if ((err = orc_traj_set_add(set, line, API_ERRBUF(r))) < 0) {
			json_object_put(line);
			if (err == ORC_ETOOBIG)
				return api_reply_error(r, ORC_EINVALID, "line %zu: the body holds more than one "
						       "trajectory; replay each with its own request", lineno);
			return api_reply_error(r, ORC_EINVALID, "line %zu: %s", lineno, r->error);
		}
	}
	if (orc_traj_set_check(set, API_ERRBUF(r)) < 0)
		return api_reply_error(r, ORC_EINVALID, "the body: %s", r->error);
	return 0;
}

int api_trajectory_replay(struct api_req *r)
{
	struct orc_traj_set set = ORC_TRAJ_SET_INIT;
	struct api_replay_opts o;
	json_object *report = NULL, *out, *list, *sum;
	int err, running = 0, all;

	if ((err = parse_opts(&o, r)) < 0 || (err = parse_body(&set, r)) < 0)
		goto done;
	if ((err = slot_take(r->tenant_id, &running)) < 0) {
		if (err == ORC_EQUOTA)
			err = api_reply_error_h(r, err, "Retry-After: 5\r\n", "this tenant already runs %d "
						"replays, its limit; retry when one finished", running);
		else
			err = api_reply_error(r, err, "the server already runs %d replays, its limit; "
					      "retry later", running);
		goto done;
	}
	o.deadline_ms = orc_mono_ms() + (int64_t)REPLAY_TIME_MAX_S * 1000;
	err = api_replay_run(&report, r, &set.v[0], &o);
	slot_put(r->tenant_id);
	if (err < 0)
		goto done;                /* replied: the create was refused */
	list = json_object_new_array();
	json_object_array_add(list, report);
	sum = orc_traj_summary(&report, 1, o.compare, &all);
	out = api_own_json(r, json_object_new_object());
	json_object_object_add(out, "summary", sum);
	json_object_object_add(out, "trajectories", list);
	err = api_reply_json(r, 200, out);
done:
	orc_traj_set_release(&set);
	return err;
}
