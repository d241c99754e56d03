/*
 * Failed key checks, limited per key id and per client address.
 *
 * Each key check that misses the cache costs an argon2id verification
 * (19 MiB, ~80 ms), wrong keys included: random secrets with one's own key
 * id, or random key ids, would keep every verification slot busy and slow
 * everyone's first request (issue 19, item 9). Each key id and each client
 * address has a bucket of failures that refills at a steady rate; while
 * either is empty a key that is not already cached as valid is refused at
 * once (403, as any wrong key), without argon2. A valid cached key never
 * gets here, so a tenant's working key keeps working while someone floods
 * its key id.
 *
 *   ORCHARD_API_AUTH_FAILURES   failures a key id may have in a burst
 *                               (default 20), an address ten times as many
 *                               (several clients may share one, behind a
 *                               NAT); they refill over a minute. 0 turns
 *                               the limit off.
 *
 * Buckets are a fixed direct-mapped table: a collision shares (or takes
 * over) a bucket, which only ever limits sooner, never lets more through.
 */
#include <pthread.h>
#include <string.h>

#include "api.h"
#include "log.h"
#include "strutil.h"

#define BUCKETS 4096
#define TAG_MAX 64
#define REFILL_MS 60000

struct bucket {
	char tag[TAG_MAX];       /* "k:<key id>" or "a:<address>" */
	double tokens;
	int64_t at_ms;
};

static struct {
	pthread_mutex_t lock;
	struct bucket b[BUCKETS];
	int burst;
} L = { .lock = PTHREAD_MUTEX_INITIALIZER, .burst = 20 };

void api_auth_limit_init(int burst)
{
	L.burst = burst;
}

static struct bucket *bucket_locked(const char *kind, const char *name, int64_t now)
{
	int burst = *kind == 'a' ? L.burst * 10 : L.burst;
	char tag[TAG_MAX];
	uint32_t h = 2166136261u;
	struct bucket *b;
	const char *p;

	snprintf(tag, sizeof(tag), "%s:%s", kind, name ? name : "");
	for (p = tag; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	b = &L.b[h % BUCKETS];
	if (strcmp(b->tag, tag)) {
		memcpy(b->tag, tag, sizeof(tag));
		b->tokens = burst;
		b->at_ms = now;
	}
	b->tokens += (double)(now - b->at_ms) * burst / REFILL_MS;
	if (b->tokens > burst)
		b->tokens = burst;
	b->at_ms = now;
	return b;
}

int api_auth_limit_allows(const char *key_id, const char *addr)
{
	int64_t now = orc_mono_ms();
	int ok;

	if (L.burst <= 0)
		return 1;
	pthread_mutex_lock(&L.lock);
	ok = bucket_locked("k", key_id, now)->tokens >= 1 && bucket_locked("a", addr, now)->tokens >= 1;
	pthread_mutex_unlock(&L.lock);
	return ok;
}

void api_auth_limit_failed(const char *key_id, const char *addr)
{
	int64_t now = orc_mono_ms();
	struct bucket *b;

	if (L.burst <= 0)
		return;
	pthread_mutex_lock(&L.lock);
	b = bucket_locked("k", key_id, now);
	if (b->tokens >= 1)
		b->tokens -= 1;
	b = bucket_locked("a", addr, now);
	if (b->tokens >= 1)
		b->tokens -= 1;
	pthread_mutex_unlock(&L.lock);
}
