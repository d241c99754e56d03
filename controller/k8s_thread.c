/*
 * A background thread of the kubernetes driver (the pod watch, the node
 * listing): it calls step until stopped, napping between calls for as
 * long as step asks, in slices short enough that stopping is prompt.
 * Stopping also makes the client's calls in flight give up
 * (k8s_client_stop), so a long watch never holds it.
 */
#include "k8s.h"

#include <errno.h>
#include <time.h>

#include "err.h"
#include "log.h"

#define NAP_SLICE_MS 100

void k8s_thread_nap(struct k8s_thread *t, int64_t ms)
{
	struct timespec ts;
	int64_t step;

	while (ms > 0 && !t->stop) {
		step = ms < NAP_SLICE_MS ? ms : NAP_SLICE_MS;
		ts.tv_sec = 0;
		ts.tv_nsec = (long)step * 1000000L;
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
		ms -= step;
	}
}

static void *run(void *arg)
{
	struct k8s_thread *t = arg;

	while (!t->stop)
		k8s_thread_nap(t, t->step(t->arg));
	k8s_client_thread_done();
	return NULL;
}

int k8s_thread_start(struct k8s_thread *t, struct k8s_client *c, const char *what,
		     int64_t (*step)(void *arg), void *arg)
{
	t->client = c;
	t->step = step;
	t->arg = arg;
	if (pthread_create(&t->thread, NULL, run, t) != 0) {
		orc_log(ORC_LOG_ERROR, "cannot start a kubernetes thread", "thread", what, NULL);
		return ORC_ERROR;
	}
	t->started = 1;
	return 0;
}

void k8s_thread_stop(struct k8s_thread *t)
{
	t->stop = 1;
	if (!t->started)
		return;
	k8s_client_stop(t->client);
	pthread_join(t->thread, NULL);
	t->started = 0;
}
