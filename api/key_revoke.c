/*
 * A revoked key's open streams end (issue 19, item 10).
 *
 * nginx proxies the PTY WebSocket and raw downloads straight to a
 * sandbox's agent once /_auth_agent accepted the key, so revoking the key
 * in the database and in every replica's cache (auth.c) does not reach
 * what is already open. Here the orchard_key notification (a revocation
 * from DELETE /keys, orchard-admin or a tenant's deletion) queues the
 * key_id; one thread per api process looks up the key's tenant's ready
 * sandboxes and tells each agent POST /keys/revoke?key=ID. The agent ends
 * that key's PTY sessions and downloads and refuses the key from then on
 * (agent/revoke.h). Every replica hears the notification and does the
 * same: the agents' answer is idempotent, the cost is a few small calls
 * per sandbox per replica, and no single replica's death loses it.
 *
 * The streams the api itself holds (a streaming exec, GET /jobs/{id}/stream,
 * raw uploads and the raw downloads it proxies) ask api_key_revoked() as
 * they go, which the same thread answers from the ids it has looked up.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "agent_client.h"
#include "api.h"
#include "apikey.h"
#include "err.h"
#include "log.h"
#include "xalloc.h"

#define QUEUE_MAX 256
#define AGENT_TIMEOUT_MS 5000
#define REVOKED_MAX 1024     /* ids are never reused; the oldest go first */
#define KEY_NUM_MAX 24

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	char queue[QUEUE_MAX][ORC_KEY_ID_LEN + 1];
	unsigned head, len;
	char revoked[REVOKED_MAX][KEY_NUM_MAX];   /* api_keys.id of revoked keys */
	unsigned nrevoked;                        /* ever added */
	int recent;                               /* re-read the recent revocations */
} Q = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static int revoked_locked(const char *id)
{
	unsigned i, n = Q.nrevoked < REVOKED_MAX ? Q.nrevoked : REVOKED_MAX;

	for (i = 0; i < n; i++)
		if (!strcmp(Q.revoked[i], id))
			return 1;
	return 0;
}

int api_key_revoked(const char *id)
{
	int r;

	if (!id || !*id || !__atomic_load_n(&Q.nrevoked, __ATOMIC_RELAXED))
		return 0;
	pthread_mutex_lock(&Q.lock);
	r = revoked_locked(id);
	pthread_mutex_unlock(&Q.lock);
	return r;
}

static void revoked_add(const char *id)
{
	if (strlen(id) >= KEY_NUM_MAX)
		return;
	pthread_mutex_lock(&Q.lock);
	if (!revoked_locked(id)) {
		memcpy(Q.revoked[Q.nrevoked % REVOKED_MAX], id, strlen(id) + 1);
		__atomic_add_fetch(&Q.nrevoked, 1, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&Q.lock);
}

static void queue_key(const char *key_id)
{
	if (!orc_key_id_valid(key_id))
		return;
	pthread_mutex_lock(&Q.lock);
	if (Q.len < QUEUE_MAX) {
		memcpy(Q.queue[(Q.head + Q.len) % QUEUE_MAX], key_id, ORC_KEY_ID_LEN + 1);
		Q.len++;
		pthread_cond_signal(&Q.cond);
	} else {
		orc_log(ORC_LOG_ERROR, "revocation queue full: the key's open PTY sessions stay open",
			"key_id", key_id, NULL);
	}
	pthread_mutex_unlock(&Q.lock);
}

/* Tell one agent; 0 or the reason it failed, logged by the caller. */
static int tell_agent(const char *address, const char *token, const char *key)
{
	struct orc_buf out = ORC_BUF_INIT;
	struct orc_agent_req req;
	char path[64];
	long status = 0;
	int err;

	snprintf(path, sizeof(path), "/keys/revoke?key=%s", key);
	memset(&req, 0, sizeof(req));
	req.address = address;
	req.token = token;
	req.method = "POST";
	req.path = path;
	req.timeout_ms = AGENT_TIMEOUT_MS;
	out.max = 4096;
	err = orc_agent_call(&out, &status, &req);
	if (err == 0 && status != 200)
		err = ORC_ERROR;
	orc_buf_release(&out);
	return err;
}

static void revoke_on_agents(const char *key_id)
{
	const char *params[1] = { key_id };
	PGresult *res = NULL;
	PGconn *db = NULL;
	int i, err, failed = 0;

	if (orc_pg_pool_acquire(&api_server.db, &db) < 0)
		goto fail;
	err = orc_pg_query(&res, db,
		"SELECT k.id, s.id, s.agent_address, s.agent_token FROM api_keys k"
		" LEFT JOIN sandboxes s ON s.tenant_id = k.tenant_id AND s.state = 'ready'"
		" AND s.agent_address IS NOT NULL AND s.agent_token IS NOT NULL"
		" WHERE k.key_id = $1 AND k.revoked_at IS NOT NULL", 1, params);
	orc_pg_pool_release(&api_server.db, db);   /* not held across the agent calls */
	if (err < 0)
		goto fail;
	if (PQntuples(res) > 0)
		revoked_add(PQgetvalue(res, 0, 0));
	for (i = 0; i < PQntuples(res); i++) {
		if (PQgetisnull(res, i, 1))
			continue;   /* the tenant has no ready sandbox */
		if (tell_agent(PQgetvalue(res, i, 2), PQgetvalue(res, i, 3), PQgetvalue(res, i, 0)) < 0) {
			orc_log(ORC_LOG_WARN, "cannot tell an agent that a key was revoked", "key_id", key_id,
				"sandbox_id", PQgetvalue(res, i, 1), NULL);
			failed++;
		}
	}
	orc_logf(ORC_LOG_INFO, "key %s revoked on %d agents (%d unreachable)", key_id,
		 PQntuples(res) > 0 && !PQgetisnull(res, 0, 1) ? PQntuples(res) - failed : 0, failed);
	PQclear(res);
	return;
fail:
	orc_log(ORC_LOG_ERROR, "cannot read the sandboxes of a revoked key: its open PTY sessions stay "
		"open", "key_id", key_id, NULL);
}

/* Revocations while the listener was away sent their notification to
 * nobody: tell the agents again (they ignore a repeat). */
static void queue_recent(void)
{
	PGresult *res = NULL;
	PGconn *c = NULL;
	int i;

	if (orc_pg_pool_acquire(&api_server.db, &c) < 0 ||
	    orc_pg_query(&res, c, "SELECT key_id FROM api_keys WHERE revoked_at > now() - interval"
			 " '1 hour' ORDER BY revoked_at DESC LIMIT 64", 0, NULL) < 0) {
		orc_log(ORC_LOG_WARN, "cannot read the recently revoked keys", NULL);
		goto done;
	}
	for (i = 0; i < PQntuples(res); i++)
		queue_key(PQgetvalue(res, i, 0));
done:
	PQclear(res);
	if (c)
		orc_pg_pool_release(&api_server.db, c);
}

void api_key_revoke_notified(const char *key_id)
{
	if (key_id) {
		queue_key(key_id);
		return;
	}
	pthread_mutex_lock(&Q.lock);
	Q.recent = 1;
	pthread_cond_signal(&Q.cond);
	pthread_mutex_unlock(&Q.lock);
}

static void *revoke_main(void *arg)
{
	char key_id[ORC_KEY_ID_LEN + 1];

	(void)arg;
	for (;;) {
		pthread_mutex_lock(&Q.lock);
		while (!Q.len && !Q.recent)
			pthread_cond_wait(&Q.cond, &Q.lock);
		if (Q.recent) {
			Q.recent = 0;
			pthread_mutex_unlock(&Q.lock);
			queue_recent();
			continue;
		}
		memcpy(key_id, Q.queue[Q.head], sizeof(key_id));
		Q.head = (Q.head + 1) % QUEUE_MAX;
		Q.len--;
		pthread_mutex_unlock(&Q.lock);
		revoke_on_agents(key_id);
	}
	return NULL;
}

int api_key_revoke_start(void)
{
	pthread_t t;
	int rc;

	if ((rc = pthread_create(&t, NULL, revoke_main, NULL)) != 0) {
		orc_logf(ORC_LOG_ERROR, "pthread_create() for key revocations failed: %s", strerror(rc));
		return ORC_ERROR;
	}
	pthread_detach(t);
	return 0;
}
