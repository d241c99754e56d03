/*
 * One tenant's share of the request threads.
 *
 * A request holds its thread until it answers, and some hold it long (a
 * /wait, exec wait:true, a streamed exec, a slow raw upload). 280 long polls
 * of one tenant used to take every thread, so another tenant's GET timed
 * out (issue 19, item 2). A tenant may have at most ORCHARD_API_TENANT_THREADS
 * requests in flight (default: three quarters of ORCHARD_API_THREADS); past
 * that it gets 429 at once, and the rest of the threads stay free for the
 * others. Public routes (health) have no tenant and are not counted.
 */
#include <pthread.h>

#include "api.h"
#include "err.h"
#include "xalloc.h"

static struct {
	pthread_mutex_t lock;
	struct {
		int64_t tenant;      /* 0: free */
		int n;
	} *slots;
	int nslots;
	int cap;
} S = { .lock = PTHREAD_MUTEX_INITIALIZER };

void api_tenant_share_init(int threads, int cap)
{
	S.nslots = threads;
	S.slots = xcalloc((size_t)threads, sizeof(*S.slots));
	S.cap = cap;
}

int api_tenant_share_enter(int64_t tenant)
{
	int i, free_slot = -1, err = 0;

	if (!S.slots || tenant <= 0)
		return 0;
	pthread_mutex_lock(&S.lock);
	for (i = 0; i < S.nslots; i++) {
		if (S.slots[i].tenant == tenant)
			break;
		if (free_slot < 0 && !S.slots[i].tenant)
			free_slot = i;
	}
	if (i == S.nslots)
		i = free_slot;   /* a request thread per slot: one is free */
	if (i < 0 || S.slots[i].n >= S.cap) {
		err = ORC_EQUOTA;
	} else {
		S.slots[i].tenant = tenant;
		S.slots[i].n++;
	}
	pthread_mutex_unlock(&S.lock);
	return err;
}

void api_tenant_share_leave(int64_t tenant)
{
	int i;

	if (!S.slots || tenant <= 0)
		return;
	pthread_mutex_lock(&S.lock);
	for (i = 0; i < S.nslots; i++)
		if (S.slots[i].tenant == tenant) {
			if (--S.slots[i].n <= 0) {
				S.slots[i].n = 0;
				S.slots[i].tenant = 0;
			}
			break;
		}
	pthread_mutex_unlock(&S.lock);
}
