#include "revoke.h"

#include <pthread.h>
#include <string.h>
#include <microhttpd.h>

#include "json.h"
#include "pty.h"
#include "server.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char revoked[AGENT_REVOKED_MAX][AGENT_KEY_MAX + 1];
static unsigned nrevoked;          /* ever added; the ring holds the last MAX */

int agent_key_valid(const char *key)
{
	size_t n;

	for (n = 0; key[n]; n++)
		if (n >= AGENT_KEY_MAX || key[n] < '0' || key[n] > '9')
			return 0;
	return n > 0;
}

static int revoked_locked(const char *key)
{
	unsigned i, n = nrevoked < AGENT_REVOKED_MAX ? nrevoked : AGENT_REVOKED_MAX;

	for (i = 0; i < n; i++)
		if (!strcmp(revoked[i], key))
			return 1;
	return 0;
}

int agent_key_revoked(const char *key)
{
	int r;

	if (!key || !*key)
		return 0;
	pthread_mutex_lock(&lock);
	r = revoked_locked(key);
	pthread_mutex_unlock(&lock);
	return r;
}

static void revoked_add(const char *key)
{
	pthread_mutex_lock(&lock);
	if (!revoked_locked(key)) {
		memcpy(revoked[nrevoked % AGENT_REVOKED_MAX], key, strlen(key) + 1);
		nrevoked++;
	}
	pthread_mutex_unlock(&lock);
}

void agent_handle_keys_revoke(struct agent_reply *reply, const struct agent_request *req)
{
	const char *key = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, "key");
	json_object *o;

	if (!key || !agent_key_valid(key)) {
		agent_reply_error(reply, 400, "query 'key' must be a key id (1 to 23 digits)");
		return;
	}
	/* First the set, then the sessions: a session that attaches in
	 * between is refused by the set. */
	revoked_add(key);
	o = json_object_new_object();
	json_object_object_add(o, "key", json_object_new_string(key));
	json_object_object_add(o, "pty_sessions_ended", json_object_new_int(agent_pty_end_key(key)));
	agent_reply_json(reply, 200, o);
	json_object_put(o);
}
