#include "pty_session.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>
#include <microhttpd.h>

#include "err.h"
#include "log.h"
#include "strutil.h"
#include "xalloc.h"

/* The set of PTY sessions: a fixed table, one detached thread each. */

#define THREAD_STACK (256 * 1024)
#define STOP_WAIT_MS 2000

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pty_session *table[AGENT_PTY_MAX_SESSIONS];
static int stopping;

static void wake(struct pty_session *s)
{
	ssize_t w;

	do
		w = write(s->wake[1], "x", 1);
	while (w < 0 && errno == EINTR);
}

struct pty_pending *pty_table_take(struct pty_session *s, enum pty_stop *stop_out)
{
	struct pty_pending *p;

	pthread_mutex_lock(&table_lock);
	p = s->pending;
	s->pending = NULL;
	*stop_out = s->stop;
	pthread_mutex_unlock(&table_lock);
	return p;
}

static void *session_main(void *arg)
{
	struct pty_session *s = arg;
	size_t i;

	pty_session_run(s);
	pthread_mutex_lock(&table_lock);
	s->over = 1;
	for (i = 0; i < AGENT_PTY_MAX_SESSIONS; i++)
		if (table[i] == s)
			table[i] = NULL;
	pthread_mutex_unlock(&table_lock);
	/* Out of the table: nobody can add a pending client any more. */
	orc_log(ORC_LOG_INFO, "pty session ended", "session_id", s->id, NULL);
	pty_session_release(s);
	free(s);
	malloc_trim(0); /* the ring and socket buffers: back to the system */
	return NULL;
}

/* With the lock held: a free slot running s, or -1. */
static int start_locked(struct pty_session *s)
{
	pthread_attr_t attr;
	pthread_t t;
	size_t i;
	int rc;

	for (i = 0; i < AGENT_PTY_MAX_SESSIONS && !stopping; i++) {
		if (table[i])
			continue;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&attr, THREAD_STACK);
		table[i] = s;
		rc = pthread_create(&t, &attr, session_main, s);
		pthread_attr_destroy(&attr);
		if (rc == 0)
			return 0;
		table[i] = NULL;
		orc_log(ORC_LOG_ERROR, "starting a pty session thread failed", NULL);
		break;
	}
	return -1;
}

/* The client's key into s->key; -1 when it has been revoked. */
static int set_key_locked(struct pty_session *s, const struct agent_pty_conn *conn)
{
	s->key[0] = '\0';
	if (!conn->key)
		return 0;
	if (agent_key_revoked(conn->key))
		return -1;
	memcpy(s->key, conn->key, strlen(conn->key) + 1); /* agent_key_valid: it fits */
	return 0;
}

int agent_pty_session_new(const struct agent_pty_conn *conn)
{
	struct pty_session *s = xmalloc(sizeof(*s));
	int rc, revoked;

	if (pty_session_start(s, conn) < 0) {
		free(s);
		return ORC_ERROR;
	}
	pthread_mutex_lock(&table_lock);
	revoked = set_key_locked(s, conn) < 0;
	rc = revoked ? -1 : start_locked(s);
	pthread_mutex_unlock(&table_lock);
	if (rc < 0) {
		if (revoked)
			pty_session_refuse(s, 1008, "the API key was revoked");
		else
			pty_session_refuse(s, 1013, "too many sessions");
		pty_session_release(s);
		free(s);
		return ORC_EUNAVAIL;
	}
	return 0;
}

static struct pty_session *find_locked(const char *id)
{
	size_t i;

	for (i = 0; i < AGENT_PTY_MAX_SESSIONS; i++)
		if (table[i] && !table[i]->over && !strcmp(table[i]->id, id))
			return table[i];
	return NULL;
}

int agent_pty_session_attach(const char *id, uint64_t offset, const struct agent_pty_conn *conn)
{
	struct pty_pending *p, **pp;
	struct pty_session *s;
	int err = 0;

	pthread_mutex_lock(&table_lock);
	/* The session cannot end while the lock is held, so s stays valid. */
	s = find_locked(id);
	if (!s || s->stop) {
		MHD_upgrade_action(conn->urh, MHD_UPGRADE_ACTION_CLOSE);
		err = ORC_ENOTFOUND;
		goto done;
	}
	if (conn->key && agent_key_revoked(conn->key)) {
		MHD_upgrade_action(conn->urh, MHD_UPGRADE_ACTION_CLOSE);
		err = ORC_EFORBIDDEN;
		goto done;
	}
	p = xcalloc(1, sizeof(*p));
	if ((err = pty_session_ws(&p->ws, s, conn)) < 0) {
		free(p);
		goto done;
	}
	p->offset = offset;
	set_key_locked(s, conn);
	for (pp = &s->pending; *pp; pp = &(*pp)->next)
		;
	*pp = p;
	wake(s);
done:
	pthread_mutex_unlock(&table_lock);
	return err;
}

int agent_pty_session_exists(const char *id)
{
	int found;

	pthread_mutex_lock(&table_lock);
	found = find_locked(id) != NULL;
	pthread_mutex_unlock(&table_lock);
	return found;
}

int agent_pty_session_room(void)
{
	size_t i;
	int room = 0;

	pthread_mutex_lock(&table_lock);
	for (i = 0; i < AGENT_PTY_MAX_SESSIONS && !stopping; i++)
		room |= table[i] == NULL;
	pthread_mutex_unlock(&table_lock);
	return room;
}

void agent_pty_stop_all(void)
{
	int64_t end = orc_mono_ms() + STOP_WAIT_MS;
	size_t i;
	int left;

	pthread_mutex_lock(&table_lock);
	stopping = 1;
	for (i = 0; i < AGENT_PTY_MAX_SESSIONS; i++) {
		if (table[i]) {
			table[i]->stop = PTY_STOP_SHUTDOWN;
			wake(table[i]);
		}
	}
	pthread_mutex_unlock(&table_lock);
	do {
		pthread_mutex_lock(&table_lock);
		for (i = 0, left = 0; i < AGENT_PTY_MAX_SESSIONS; i++)
			left |= table[i] != NULL;
		pthread_mutex_unlock(&table_lock);
		if (left)
			usleep(10000);
	} while (left && orc_mono_ms() < end);
}

int agent_pty_end_key(const char *key)
{
	size_t i;
	int n = 0;

	pthread_mutex_lock(&table_lock);
	for (i = 0; i < AGENT_PTY_MAX_SESSIONS; i++) {
		if (table[i] && !table[i]->stop && !strcmp(table[i]->key, key)) {
			table[i]->stop = PTY_STOP_REVOKED;
			wake(table[i]);
			n++;
		}
	}
	pthread_mutex_unlock(&table_lock);
	return n;
}
