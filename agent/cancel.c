#include "cancel.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>

#include "err.h"
#include "json.h"
#include "server.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct agent_job *head, *tail;   /* every queued or running job */

int agent_job_id_valid(const char *id)
{
	size_t n;

	for (n = 0; id[n]; n++) {
		char c = id[n];
		if (n >= AGENT_JOB_ID_MAX ||
		    !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-'))
			return 0;
	}
	return n > 0;
}

static struct agent_job *find_locked(const char *id)
{
	struct agent_job *j;

	for (j = head; j; j = j->next)
		if (j->id[0] && !strcmp(j->id, id))
			return j;
	return NULL;
}

static void unlink_locked(struct agent_job *j)
{
	struct agent_job **pp, *prev = NULL;

	for (pp = &head; *pp; prev = *pp, pp = &(*pp)->next) {
		if (*pp == j) {
			*pp = j->next;
			if (tail == j)
				tail = prev;
			break;
		}
	}
	j->next = NULL;
	j->state = AGENT_JOB_DONE;
}

int agent_job_enqueue(struct agent_job *j, const char *id)
{
	int err = 0;

	pthread_mutex_lock(&lock);
	if (id && find_locked(id)) {
		err = ORC_ECONFLICT;
		goto done;
	}
	if (id) {
		size_t n = strnlen(id, AGENT_JOB_ID_MAX);
		memcpy(j->id, id, n);
		j->id[n] = '\0';
	}
	j->state = AGENT_JOB_QUEUED;
	j->next = NULL;
	if (tail)
		tail->next = j;
	else
		head = j;
	tail = j;
done:
	pthread_mutex_unlock(&lock);
	return err;
}

int agent_job_wait_turn(struct agent_job *j)
{
	int rc = 0;

	pthread_mutex_lock(&lock);
	if (j->cancelled) {
		unlink_locked(j);
		rc = AGENT_JOB_CANCELLED;
	} else {
		j->state = AGENT_JOB_RUNNING;
	}
	pthread_mutex_unlock(&lock);
	return rc;
}

void agent_job_attach_child(struct agent_job *j, struct agent_child *c)
{
	if (!j)
		return;
	pthread_mutex_lock(&lock);
	j->child = c;
	if (j->cancelled)
		agent_child_kill_group(c, SIGKILL);
	pthread_mutex_unlock(&lock);
}

int agent_job_detach_child(struct agent_job *j)
{
	int cancelled;

	if (!j)
		return 0;
	pthread_mutex_lock(&lock);
	j->child = NULL;
	j->finishing = 1;
	cancelled = j->cancelled;
	pthread_mutex_unlock(&lock);
	return cancelled;
}

void agent_job_finish(struct agent_job *j)
{
	pthread_mutex_lock(&lock);
	if (j->state == AGENT_JOB_QUEUED || j->state == AGENT_JOB_RUNNING)
		unlink_locked(j);
	pthread_mutex_unlock(&lock);
}

int agent_job_cancel(int *was_running_out, const char *id)
{
	struct agent_job *j;
	int err = ORC_ENOTFOUND, running;

	pthread_mutex_lock(&lock);
	j = find_locked(id);
	if (!j || j->finishing)
		goto done;
	running = j->state == AGENT_JOB_RUNNING;
	if (j->cancelled) { /* again: the same answer */
		*was_running_out = running;
		err = 0;
		goto done;
	}
	/* A child that has already been reaped has finished: nothing to kill. */
	if (running && j->child && !agent_child_kill_group(j->child, SIGKILL))
		goto done;
	j->cancelled = 1;
	*was_running_out = running;
	err = 0;
done:
	pthread_mutex_unlock(&lock);
	return err;
}

/* POST /exec/cancel {"job_id": "..."} */
void agent_handle_exec_cancel(struct agent_reply *reply, const struct agent_request *req)
{
	json_object *root = NULL, *o;
	const char *id = NULL;
	char msg[256] = "";
	int running = 0;

	if (orc_json_parse_object(&root, req->body, req->body_len, msg, sizeof(msg)) < 0 ||
	    orc_json_get_str(root, "job_id", &id, msg, sizeof(msg)) < 0) {
		agent_reply_error(reply, 400, msg);
		goto done;
	}
	if (!id || !agent_job_id_valid(id)) {
		agent_reply_error(reply, 400, "field 'job_id' must be 1 to 64 characters of [A-Za-z0-9-]");
		goto done;
	}
	if (agent_job_cancel(&running, id) < 0) {
		agent_reply_error(reply, 404, "no such job");
		goto done;
	}
	o = json_object_new_object();
	json_object_object_add(o, "cancelled", json_object_new_boolean(1));
	json_object_object_add(o, "state", json_object_new_string(running ? "running" : "queued"));
	agent_reply_json(reply, 200, o);
	json_object_put(o);
done:
	json_object_put(root);
}
