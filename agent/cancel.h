#ifndef AGENT_CANCEL_H
#define AGENT_CANCEL_H
#include "reaper.h"
/*
 * The exec registry: commands run concurrently, each as soon as its
 * request arrived (the api orders serial jobs itself, api/job_run.c), and
 * any of them can be cancelled by the job id its request gave
 * (POST /exec/cancel). A job cancelled before it started never runs; a
 * running one has its whole process group killed with SIGKILL.
 *
 *   struct agent_job j = AGENT_JOB_INIT;
 *   if (agent_job_enqueue(&j, id) < 0) ...        // 409: id in use
 *   if (agent_job_wait_turn(&j) == AGENT_JOB_CANCELLED) ... // never ran
 *   ... agent_exec_run() with spec.job = &j:
 *         agent_job_attach_child(&j, &child) right after the fork,
 *         agent_job_detach_child(&j) once the child has been waited for;
 *   agent_job_finish(&j);                         // forgotten
 *
 * Jobs without an id are registered the same way but cannot be cancelled.
 */
#define AGENT_JOB_ID_MAX 64
#define AGENT_JOB_CANCELLED 1

enum agent_job_state { AGENT_JOB_NEW, AGENT_JOB_QUEUED, AGENT_JOB_RUNNING, AGENT_JOB_DONE };

struct agent_job {
	char id[AGENT_JOB_ID_MAX + 1];  /* "" when none was given */
	enum agent_job_state state;
	int cancelled;
	int finishing;                  /* the child has been waited for */
	struct agent_child *child;      /* while the command runs */
	struct agent_job *next;
};

#define AGENT_JOB_INIT { "", AGENT_JOB_NEW, 0, 0, NULL, NULL }

struct agent_reply;
struct agent_request;
/* POST /exec/cancel */
void agent_handle_exec_cancel(struct agent_reply *reply, const struct agent_request *req);

/* 1..64 characters of [A-Za-z0-9-]. */
int agent_job_id_valid(const char *id);
/* Append to the queue; id may be NULL. ORC_ECONFLICT when a queued or
 * running job has the same id. */
int agent_job_enqueue(struct agent_job *j, const char *id);
/* Block until j is first in the queue: 0, or AGENT_JOB_CANCELLED when it
 * was cancelled while waiting (it has then left the queue). */
int agent_job_wait_turn(struct agent_job *j);
/* The running job's command was forked: c is what cancel kills. When the
 * job was cancelled before this, the group is killed at once. */
void agent_job_attach_child(struct agent_job *j, struct agent_child *c);
/* The child has been waited for; returns whether the job was cancelled. */
int agent_job_detach_child(struct agent_job *j);
/* Leave the queue (harmless for a job that already left). */
void agent_job_finish(struct agent_job *j);
/* Cancel by id: 0 with *was_running_out set, or ORC_ENOTFOUND when no
 * queued or running job has that id (or its command already ended). */
int agent_job_cancel(int *was_running_out, const char *id);
#endif
