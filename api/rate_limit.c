/*
 * Per-tenant request rate limits: a token bucket per tenant, per api
 * process (docs/configuration.md, ORCHARD_API_RATE_LIMIT). Off unless
 * configured. A keyed request takes a token; with none left it is 429
 * (code rate_limited) with Retry-After, and every answer of a limited
 * tenant carries RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset
 * (draft-ietf-httpapi-ratelimit-headers). A long request (a wait, a
 * stream) is one token however long it lasts: threads are limited by
 * tenant_share.c.
 *
 * Buckets live in a fixed open-addressed table; when a probe window is
 * full, the bucket seen longest ago is reused (it had refilled anyway
 * unless it was used within the last burst / rate).
 */
#include <pthread.h>
#include <stdio.h>

#include "api.h"
#include "err.h"
#include "strutil.h"

#define NBUCKETS 4096
#define PROBE 16

struct bucket {
	int64_t tenant;           /* 0: free */
	double tokens;
	int64_t at_ms;            /* when tokens was computed */
};

static struct {
	pthread_mutex_t lock;
	double per_ms;            /* tokens per millisecond; 0: off */
	double burst;
	struct bucket b[NBUCKETS];
} R = { .lock = PTHREAD_MUTEX_INITIALIZER };

void api_rate_limit_init(int64_t per_minute, int64_t burst)
{
	R.per_ms = (double)per_minute / 60000.0;
	R.burst = burst > 0 ? (double)burst : per_minute > 0 ? (double)(per_minute + 59) / 60 * 2 : 0;
	if (R.burst < 1)
		R.burst = 1;
}

static struct bucket *bucket_of(int64_t tenant, int64_t now)
{
	unsigned h = (unsigned)((uint64_t)tenant * 2654435761u) % NBUCKETS, i;
	struct bucket *victim = NULL, *b;

	for (i = 0; i < PROBE; i++) {
		b = &R.b[(h + i) % NBUCKETS];
		if (b->tenant == tenant)
			return b;
		if (!victim || (victim->tenant && (!b->tenant || b->at_ms < victim->at_ms)))
			victim = b;   /* a free bucket, else the one seen longest ago */
	}
	victim->tenant = tenant;
	victim->tokens = R.burst;
	victim->at_ms = now;
	return victim;
}

int api_rate_limit_take(struct api_req *r)
{
	struct bucket *b;
	int64_t now = orc_mono_ms();
	double tokens;
	long retry = 0, reset;
	int ok;

	if (R.per_ms <= 0 || r->tenant_id <= 0)
		return 0;
	pthread_mutex_lock(&R.lock);
	b = bucket_of(r->tenant_id, now);
	b->tokens += (double)(now - b->at_ms) * R.per_ms;
	if (b->tokens > R.burst)
		b->tokens = R.burst;
	b->at_ms = now;
	if ((ok = b->tokens >= 1))
		b->tokens -= 1;
	else
		retry = (long)((1 - b->tokens) / R.per_ms / 1000) + 1;
	tokens = b->tokens;
	pthread_mutex_unlock(&R.lock);
	reset = (long)((R.burst - tokens) / R.per_ms / 1000 + 0.999);
	api_req_add_header(r, "RateLimit-Limit", "%ld", (long)R.burst);
	api_req_add_header(r, "RateLimit-Remaining", "%ld", (long)tokens);
	api_req_add_header(r, "RateLimit-Reset", "%ld", reset);
	if (ok)
		return 0;
	api_req_add_header(r, "Retry-After", "%ld", retry);
	return api_reply_error(r, API_ERATE, "too many requests: this tenant may send %ld in a burst and "
			       "%.6g a minute; retry after %ld s", (long)R.burst, R.per_ms * 60000, retry);
}
