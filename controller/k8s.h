#ifndef CTL_K8S_H
#define CTL_K8S_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <json-c/json.h>

#include "buf.h"
#include "driver.h"
/*
 * The kubernetes driver (DESIGN.md §3, docs/kubernetes.md): one pod per
 * sandbox, its agent token in a Secret, an egress NetworkPolicy for
 * block_network=false sandboxes, and a watch of our pods that maps pod
 * state to sandbox state.
 *
 *   k8s_config.c   ORCHARD_K8S_* settings
 *   k8s_kubeconfig.c KUBECONFIG: server and credentials of the current context
 *   k8s_client.c   HTTP to the API server: auth, retries, concurrency bound
 *   k8s_pod.c      the Pod, Secret and NetworkPolicy bodies
 *   k8s_podstate.c a pod object -> pending / ready / failed (+ message)
 *   k8s_watch.c    LIST + WATCH thread keeping a table of our pods
 *   k8s_driver.c   the ctl_driver_ops table
 *   k8s_checkpoint.c checkpoints: agent tar streams in the checkpoint store
 *   k8s_nodes.c    capacity: a thread listing the nodes sandboxes may use
 *   k8s_thread.c   the start, loop and stop of those two threads
 *
 * Threads: the controller's loop calls the driver ops; one watch thread of
 * the driver's own keeps the pod table (mutex + condition variable) and
 * wakes the loop through a pipe (ops->events_fd / drain).
 */

extern const struct ctl_driver_ops ctl_driver_k8s;

/* ---- checkpoints (k8s_checkpoint.c; docs/checkpoints.md) ------------------ */

struct k8s_store;
/* ORCHARD_K8S_CHECKPOINT_*; creates the store directory. Fatal on failure
 * (*out is set either way: k8s_store_free it). */
int k8s_store_open(struct k8s_store **out, const char *state_dir);
void k8s_store_free(struct k8s_store *s);
struct k8s_store *k8s_driver_store(struct ctl_driver *d);   /* k8s_driver.c */
/* The driver ops checkpoint_agent, restore_agent, checkpoint_remove and
 * checkpoint_list (driver.h). */
int k8s_checkpoint_take(struct ctl_driver *d, int64_t *bytes_out, char sha256_out[65], char **why,
			const struct ctl_agent_ref *agent, const char *ckpt);
int k8s_checkpoint_restore(struct ctl_driver *d, char **why, const struct ctl_agent_ref *agent,
			   const char *ckpt, const char *sha256);
int k8s_checkpoint_remove(struct ctl_driver *d, const char *ckpt);
int k8s_checkpoint_list(struct ctl_driver *d, char ***out, size_t *nout);

#define K8S_LABEL_MANAGED "app.kubernetes.io/managed-by"
#define K8S_MANAGER       "orchard-controller"
#define K8S_LABEL_SANDBOX "orchard.dev/sandbox"
/* labelSelector=app.kubernetes.io/managed-by=orchard-controller, URL-encoded */
#define K8S_SELECTOR      "labelSelector=app.kubernetes.io%2Fmanaged-by%3Dorchard-controller"

/* ---- configuration (k8s_config.c) ---------------------------------------- */

struct k8s_config {
	char *api_url;           /* without a trailing slash */
	char *token_file;        /* NULL: no Authorization header */
	char *ca_file;           /* NULL: the system's CAs (unless ca_pem) */
	char *token;             /* KUBECONFIG's inline token (token_file NULL) */
	char *ca_pem;            /* KUBECONFIG's *-data, PEM text; else the files: */
	char *cert_pem, *key_pem;
	char *cert_file, *key_file;  /* client certificate and key, or NULL */
	char *ns;                /* sandbox namespace */
	char *agent_image;
	char *tools_image;       /* ORCHARD_K8S_TOOLS_IMAGE: the sandbox-tools bundle at
				  * /opt/sandbox-tools in it; NULL: no tools */
	int tools_image_volume;  /* ORCHARD_K8S_TOOLS_MODE=image: an image volume
				  * (Kubernetes >= 1.33), else (init) copied by an init
				  * container into an emptyDir */
	char *service_account;   /* NULL: the namespace's default */
	char *runtime_class;     /* NULL: none */
	json_object *node_selector;   /* object or NULL */
	json_object *tolerations;     /* array or NULL */
	char **pull_secrets;
	size_t npull_secrets;
	char **egress_except;    /* CIDRs, validated */
	size_t negress_except;
	char *ephemeral_request; /* quantities, e.g. "1Gi" / "10Gi" */
	char *ephemeral_limit;
	int agent_port;
	int run_as_non_root;
	int64_t run_as_user;     /* with run_as_non_root: runAsUser, runAsGroup and
				  * fsGroup (the token Secret is then 0440, group
				  * fsGroup: the agent can read it) */
	int max_inflight;
	int64_t grace_s;              /* terminationGracePeriodSeconds */
	int64_t pending_timeout_s;    /* an unschedulable pod fails after this */
	int64_t request_timeout_ms;   /* one API request */
	int64_t retry_budget_ms;      /* all attempts of one API call */
	int64_t watch_timeout_s;      /* a watch's timeoutSeconds */
	int64_t nodes_refresh_s;      /* list the nodes (capacity) this often */
};

/* Fill cfg from the environment. ORC_EINVALID (logged) on a bad value. */
int k8s_config_load(struct k8s_config *cfg);
/* The server and credentials of KUBECONFIG's current context
 * (k8s_kubeconfig.c); paths is the colon-separated list. */
int k8s_kubeconfig_load(struct k8s_config *cfg, const char *paths);
void k8s_config_release(struct k8s_config *cfg);

/* ---- API server client (k8s_client.c) ------------------------------------- */

struct k8s_client;

struct k8s_response {
	long status;             /* HTTP status of the final answer */
	struct orc_buf body;
};

#define K8S_RESPONSE_INIT { 0, ORC_BUF_INIT }
void k8s_response_release(struct k8s_response *r);

int k8s_client_new(struct k8s_client **out, const struct k8s_config *cfg);
/* Make every transfer in progress (any thread) stop and calls give up. */
void k8s_client_stop(struct k8s_client *c);
/* Also frees the calling thread's handle (call it from the main thread). */
void k8s_client_free(struct k8s_client *c);
/* Free the calling thread's easy handle (before a thread that made calls
 * exits). */
void k8s_client_thread_done(void);

/*
 * One API call: method on path (with query), body JSON or NULL. 429, 5xx
 * and connection errors are retried with exponential backoff, honouring
 * Retry-After, for budget_ms (0: cfg->retry_budget_ms); TLS verification
 * errors are not; a 401 re-reads the token file once. Returns 0 when a
 * final answer arrived (any other status; out->status and out->body set),
 * ORC_EUNAVAIL when the retries ran out or the server cannot be trusted
 * (the last problem is logged), ORC_ETOOBIG for an answer over 64 MiB.
 */
int k8s_call(struct k8s_client *c, struct k8s_response *out, const char *method,
	     const char *path, const char *body, int64_t budget_ms);

/* The message of a Status body ("HTTP <code>" without one), at most 400
 * characters; fresh string. */
char *k8s_status_message(const struct k8s_response *r);

/*
 * A streaming GET (a watch): fn is called with every complete line of a
 * 200 answer (lines at most 16 MiB) and may return nonzero to stop. The
 * transfer also stops at k8s_client_stop() (within about a second).
 * On return *status_out is the HTTP status (0 when none arrived) and, for
 * a non-200 answer, err_body holds its body. Returns 0 when the stream
 * ended cleanly, ORC_EUNAVAIL when it broke.
 */
typedef int (*k8s_line_fn)(void *arg, const char *line, size_t len);
int k8s_stream(struct k8s_client *c, long *status_out, struct orc_buf *err_body,
	       const char *path, k8s_line_fn fn, void *arg, int64_t timeout_ms);

/* ---- objects (k8s_pod.c) --------------------------------------------------- */

/* sb-<id>, sb-<id>-token, sb-<id>-egress; fresh strings. */
char *k8s_pod_name(const char *id);
char *k8s_secret_name(const char *id);
char *k8s_policy_name(const char *id);

json_object *k8s_pod_new(const struct k8s_config *cfg, const struct ctl_sandbox *sb);
json_object *k8s_secret_new(const struct k8s_config *cfg, const struct ctl_sandbox *sb);
json_object *k8s_egress_policy_new(const struct k8s_config *cfg, const struct ctl_sandbox *sb);

/* 1 when obj carries our managed-by label and orchard.dev/sandbox=id. */
int k8s_object_is_ours(json_object *obj, const char *id);
/* The orchard.dev/sandbox label of an object of ours (a DNS label), or
 * NULL; points into obj. */
const char *k8s_object_sandbox(json_object *obj);
/* metadata.<key> as a string, or NULL; points into obj. */
const char *k8s_meta_str(json_object *obj, const char *key);

/* ---- pod state (k8s_podstate.c) --------------------------------------------- */

enum k8s_pod_phase {
	K8S_POD_PENDING,         /* not ready yet (may have an IP, may be unschedulable) */
	K8S_POD_READY,           /* Running and Ready=True */
	K8S_POD_FAILED,          /* will never become ready; message says why */
};

struct k8s_pod_state {
	enum k8s_pod_phase phase;
	int unschedulable;       /* PodScheduled=False, reason Unschedulable */
	int image_error;         /* failed because of the image (retry is pointless) */
	int deleting;            /* metadata.deletionTimestamp set */
	char uid[64];
	char ip[64];             /* status.podIP, "" when none */
	char message[512];       /* failure or pending reason, "" when none */
};

/* Read the parts of a pod object that matter (never fails: unknown or
 * missing fields read as pending). */
void k8s_pod_state_read(struct k8s_pod_state *out, json_object *pod);

/* ---- a background thread (k8s_thread.c) ------------------------------------- */

/*
 * A thread that calls step(arg) until stopped and then naps for the
 * milliseconds step answered (0: call again at once). A zeroed struct is
 * valid; stopping one never started is harmless.
 */
struct k8s_thread {
	pthread_t thread;
	int started;
	volatile int stop;            /* step and its callees check it */
	struct k8s_client *client;
	int64_t (*step)(void *arg);
	void *arg;
};
/* Start t; what names it in the log when that fails (ORC_ERROR). */
int k8s_thread_start(struct k8s_thread *t, struct k8s_client *c, const char *what,
		     int64_t (*step)(void *arg), void *arg);
/* Ask t to stop, make c's calls in flight give up, and join it. */
void k8s_thread_stop(struct k8s_thread *t);
/* Sleep ms, or less when t is being stopped. */
void k8s_thread_nap(struct k8s_thread *t, int64_t ms);

/* ---- the watch and the pod table (k8s_watch.c) ------------------------------ */

struct k8s_watch;

int k8s_watch_start(struct k8s_watch **out, struct k8s_client *c, const struct k8s_config *cfg);
void k8s_watch_stop(struct k8s_watch *w);

/*
 * The pod of sandbox id as last seen: 0 and *out, ORC_ENOTFOUND when
 * there is none, ORC_EUNAVAIL when there is none and no LIST has
 * succeeded yet (so nobody can tell). When
 * unsched_ms is not NULL it gets how long the pod has been seen
 * unschedulable (0 when it is not).
 */
int k8s_watch_get(struct k8s_watch *w, struct k8s_pod_state *out, int64_t *unsched_ms,
		  const char *id);
/* Put a pod object create() just got from the API server into the table
 * (pinned to its uid until the watch reports it; see k8s_watch.c). */
void k8s_watch_put(struct k8s_watch *w, json_object *pod);
/* A counter bumped by every table change. */
uint64_t k8s_watch_generation(struct k8s_watch *w);
/* Wait until the generation differs from seen or until_ms (monotonic)
 * passes. */
void k8s_watch_wait(struct k8s_watch *w, uint64_t seen, int64_t until_ms);
/* A pipe that becomes readable when a sandbox's pod changed state, IP or
 * message, or vanished; drain() calls fn with each such id. */
int k8s_watch_fd(struct k8s_watch *w);
void k8s_watch_drain(struct k8s_watch *w, ctl_ready_fn fn, void *arg);

/* ---- capacity (k8s_nodes.c) -------------------------------------------------- */

struct k8s_nodes;

/* Start the thread that lists the nodes every cfg->nodes_refresh_s. */
int k8s_nodes_start(struct k8s_nodes **out, struct k8s_client *c, const struct k8s_config *cfg);
void k8s_nodes_stop(struct k8s_nodes *n);
/* ops->capacity: the last listing, scaled (ctl_capacity_scale); never
 * waits. ORC_EUNAVAIL while no listing has found a usable node yet. */
int k8s_nodes_capacity(struct k8s_nodes *n, struct ctl_capacity *out);
#endif
