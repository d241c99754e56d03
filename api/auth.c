/*
 * /_auth: nginx's auth_request target. Checks the API key and answers 204
 * with the tenant, key and role in X-Orchard-* headers, 401 without a key,
 * 403 for a malformed, unknown, wrong or revoked key.
 *
 * Keys are "orch_<key_id>_<secret>" (lib/apikey.h). The database holds an argon2id hash
 * of the secret, looked up by key_id. Verified (and rejected) keys are cached
 * for CACHE_TTL_MS, keyed by SHA-256 of the full key and compared in constant
 * time, so argon2 is paid once per key per minute, not per request. A
 * revocation (NOTIFY orchard_key, dispatched by notify.c) evicts at once; a
 * key generation counter keeps a verification that raced with a revocation
 * out of the cache. A used key's last_used_at is written at most once a
 * minute, by the request that finds it due, on a pool connection.
 */
#include <argon2.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <semaphore.h>
#include <string.h>
#include <strings.h>

#include "api.h"
#include "apikey.h"
#include "err.h"
#include "log.h"
#include "strutil.h"

#define CACHE_SETS 512
#define CACHE_WAYS 4
#define CACHE_TTL_MS 60000
#define TOUCH_EVERY_MS 60000
#define TOUCH_MAX 512
#define VERIFY_CONCURRENCY 4

struct key_entry {
	int used;
	int valid;                       /* 0: a cached rejection */
	unsigned char digest[SHA256_DIGEST_LENGTH];
	char key_id[ORC_KEY_ID_LEN + 1];
	char id[24];                     /* api_keys.id */
	char tenant[24];
	char role[8];
	int64_t expires_ms;
	int64_t touched_ms;
};

static struct {
	pthread_mutex_t lock;
	struct key_entry sets[CACHE_SETS][CACHE_WAYS];
	char touches[TOUCH_MAX][24];     /* api_keys.id whose last_used_at is due */
	int ntouches;
	uint64_t key_gen;                /* moves on every revocation */
	sem_t verify_slots;              /* argon2 is memory-hard: bound it */
	/* The hash an unknown key id is checked against, so that it costs
	 * what a known id with a wrong secret does (no timing oracle). */
	char dummy_hash[ORC_KEY_HASH_MAX];
} C = { .lock = PTHREAD_MUTEX_INITIALIZER };

void api_auth_init(void)
{
	struct orc_key k;

	sem_init(&C.verify_slots, 0, VERIFY_CONCURRENCY);
	if (orc_key_generate(&k) == 0)
		memcpy(C.dummy_hash, k.hash, sizeof(C.dummy_hash));
	else
		orc_log(ORC_LOG_WARN, "could not make the dummy key hash: unknown key ids answer "
			"faster than known ones", NULL);
	explicit_bzero(&k, sizeof(k));
}

/* argon2id of secret against hash; 1 when it matches. */
static int secret_matches(const char *hash, const char *secret)
{
	api_metrics_key_verification();
	return argon2id_verify(hash, secret, ORC_KEY_SECRET_LEN) == ARGON2_OK;
}

static void touch_locked(struct key_entry *e, int64_t now)
{
	int i;

	e->touched_ms = now;
	for (i = 0; i < C.ntouches; i++)
		if (!strcmp(C.touches[i], e->id))
			return;
	if (C.ntouches < TOUCH_MAX)
		memcpy(C.touches[C.ntouches++], e->id, sizeof(e->id));
}

/* 1 and *out on a live entry for digest; 0 otherwise. */
static int cache_get(struct key_entry *out, const unsigned char *digest)
{
	struct key_entry *set = C.sets[(digest[0] | (digest[1] << 8)) % CACHE_SETS];
	int64_t now = orc_mono_ms();
	int i, found = 0;

	pthread_mutex_lock(&C.lock);
	for (i = 0; i < CACHE_WAYS; i++) {
		struct key_entry *e = &set[i];
		if (!e->used || !orc_ct_equal(e->digest, digest, SHA256_DIGEST_LENGTH))
			continue;
		if (e->expires_ms <= now) {
			e->used = 0;
			continue;
		}
		if (e->valid && now - e->touched_ms >= TOUCH_EVERY_MS)
			touch_locked(e, now);
		*out = *e;
		found = 1;
		break;
	}
	pthread_mutex_unlock(&C.lock);
	return found;
}

static void cache_put(const struct key_entry *in, uint64_t key_gen)
{
	struct key_entry *set = C.sets[(in->digest[0] | (in->digest[1] << 8)) % CACHE_SETS];
	struct key_entry *victim = &set[0];
	int64_t now = orc_mono_ms();
	int i;

	pthread_mutex_lock(&C.lock);
	/* A key was revoked while we verified: the answer may be stale. */
	if (key_gen != C.key_gen)
		goto done;
	for (i = 0; i < CACHE_WAYS; i++) {
		struct key_entry *e = &set[i];
		if (!e->used || e->expires_ms <= now ||
		    orc_ct_equal(e->digest, in->digest, SHA256_DIGEST_LENGTH)) {
			victim = e;
			break;
		}
		if (e->expires_ms < victim->expires_ms)
			victim = e;
	}
	*victim = *in;
	victim->used = 1;
	victim->expires_ms = now + CACHE_TTL_MS;
	if (victim->valid)
		touch_locked(victim, now);
done:
	pthread_mutex_unlock(&C.lock);
}

void api_auth_notified(const char *key_id)
{
	int s, w;

	pthread_mutex_lock(&C.lock);
	C.key_gen++;
	if (!key_id)
		memset(C.sets, 0, sizeof(C.sets));   /* revocations may have been missed */
	for (s = 0; key_id && s < CACHE_SETS; s++)
		for (w = 0; w < CACHE_WAYS; w++)
			if (C.sets[s][w].used && !strcmp(C.sets[s][w].key_id, key_id))
				C.sets[s][w].used = 0;
	pthread_mutex_unlock(&C.lock);
}

static uint64_t key_gen(void)
{
	uint64_t g;

	pthread_mutex_lock(&C.lock);
	g = C.key_gen;
	pthread_mutex_unlock(&C.lock);
	return g;
}

/* Write the due last_used_at updates, if any (best effort). */
static void flush_touches(void)
{
	struct orc_buf ids = ORC_BUF_INIT;
	const char *params[1];
	PGconn *c = NULL;
	int i;

	pthread_mutex_lock(&C.lock);
	for (i = 0; i < C.ntouches; i++)
		orc_buf_addf(&ids, "%s%s", i ? "," : "{", C.touches[i]);
	C.ntouches = 0;
	pthread_mutex_unlock(&C.lock);
	if (!ids.len)
		goto done;
	orc_buf_adds(&ids, "}");
	params[0] = ids.ptr;
	if (orc_pg_pool_acquire(&api_server.db, &c) < 0)
		goto done;
	orc_pg_query(NULL, c, "UPDATE api_keys SET last_used_at = now() WHERE id = ANY($1::bigint[])",
		     1, params);
	orc_pg_pool_release(&api_server.db, c);
done:
	orc_buf_release(&ids);
}

/* Look the key up and verify its secret; fills *e (valid or a rejection). */
static int key_verify(struct key_entry *e, const char *key_id, const char *secret)
{
	const char *params[1] = { key_id };
	PGresult *res = NULL;
	PGconn *c = NULL;
	char *hash = NULL;
	int err, revoked;

	if ((err = orc_pg_pool_acquire(&api_server.db, &c)) < 0)
		return err;
	err = orc_pg_query(&res, c,
			   "SELECT k.id, k.tenant_id, k.role, k.secret_hash, k.revoked_at IS NOT NULL"
			   " FROM api_keys k JOIN tenants t ON t.id = k.tenant_id WHERE k.key_id = $1",
			   1, params);
	orc_pg_pool_release(&api_server.db, c); /* not held across argon2 */
	if (err < 0)
		goto done;
	e->valid = 0;
	if (PQntuples(res) != 1) {
		if (C.dummy_hash[0])
			secret_matches(C.dummy_hash, secret);
		goto done;
	}
	/* A revoked key is checked too: its answer takes as long. */
	revoked = !strcmp(PQgetvalue(res, 0, 4), "t");
	hash = PQgetvalue(res, 0, 3);
	if (!secret_matches(hash, secret) || revoked)
		goto done;
	e->valid = 1;
	snprintf(e->id, sizeof(e->id), "%s", PQgetvalue(res, 0, 0));
	snprintf(e->tenant, sizeof(e->tenant), "%s", PQgetvalue(res, 0, 1));
	snprintf(e->role, sizeof(e->role), "%s", PQgetvalue(res, 0, 2));
done:
	PQclear(res);
	return err;
}

/* The key from X-API-Key or Authorization: Bearer, or NULL. */
static const char *request_key(struct api_req *r)
{
	const char *v = api_req_param(r, "HTTP_X_API_KEY");

	if (v && *v)
		return v;
	v = api_req_param(r, "HTTP_AUTHORIZATION");
	if (v && !strncasecmp(v, "Bearer ", 7)) {
		v += 7;
		while (*v == ' ')
			v++;
		return *v ? v : NULL;
	}
	return NULL;
}

int api_auth_check(struct api_auth *out, struct api_req *r)
{
	return api_auth_check_key(out, r, request_key(r));
}

int api_auth_check_key(struct api_auth *out, struct api_req *r, const char *key)
{
	struct key_entry e;
	const char *secret, *addr;
	char key_id[ORC_KEY_ID_LEN + 1];
	unsigned char digest[SHA256_DIGEST_LENGTH];
	uint64_t gen;
	int err;

	if (!key)
		return api_reply_error(r, ORC_EUNAUTH,
				       "missing API key; send X-API-Key or Authorization: Bearer");
	if (orc_key_parse(key_id, &secret, key) < 0)
		return api_reply_error(r, ORC_EFORBIDDEN, "invalid API key");
	SHA256((const unsigned char *)key, ORC_KEY_LEN, digest);
	if (!cache_get(&e, digest)) {
		addr = api_req_param(r, "REMOTE_ADDR");
		if (!api_auth_limit_allows(key_id, addr))
			return api_reply_error(r, ORC_EFORBIDDEN, "too many failed key checks; "
					       "try again in a minute");
		gen = key_gen();
		sem_wait(&C.verify_slots);
		/* Someone may have verified the same key while we queued. */
		if (cache_get(&e, digest)) {
			sem_post(&C.verify_slots);
		} else {
			memset(&e, 0, sizeof(e));
			memcpy(e.digest, digest, sizeof(digest));
			memcpy(e.key_id, key_id, sizeof(key_id));
			err = key_verify(&e, key_id, secret);
			sem_post(&C.verify_slots);
			if (err < 0)
				return api_reply_error(r, err, "cannot verify the API key now");
			if (!e.valid)
				api_auth_limit_failed(key_id, addr);
			cache_put(&e, gen);
		}
	}
	flush_touches();
	if (!e.valid)
		return api_reply_error(r, ORC_EFORBIDDEN, "invalid or revoked API key");
	memcpy(out->tenant, e.tenant, sizeof(out->tenant));
	memcpy(out->key, e.id, sizeof(out->key));
	memcpy(out->role, e.role, sizeof(out->role));
	return 0;
}

int api_auth_handle(struct api_req *r)
{
	struct api_auth a;
	char hdr[256];
	int err;

	if ((err = api_auth_check(&a, r)) < 0)
		return err;
	snprintf(hdr, sizeof(hdr), "X-Orchard-Tenant: %s\r\nX-Orchard-Key: %s\r\nX-Orchard-Role: %s\r\n",
		 a.tenant, a.key, a.role);
	api_req_write(r, 204, hdr, NULL, 0);
	return 0;
}
