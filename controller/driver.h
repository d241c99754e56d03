#ifndef CTL_DRIVER_H
#define CTL_DRIVER_H
#include <stddef.h>
#include <stdint.h>

#include "ctl.h"
/*
 * A driver turns a sandbox row into something running and back
 * (DESIGN.md §3). The reconcile loop talks to it only through this table
 * of function pointers (redis's ConnectionType), so the local and
 * kubernetes drivers are interchangeable.
 *
 * Every operation is synchronous and short; none of them touches the
 * database. The controller is single-threaded, so drivers need no locks.
 */

/* One sandbox row as the driver sees it. The reconcile loop fills the
 * request fields; create() fills handle and address. */
struct ctl_sandbox {
	char *id;
	char *image;
	char *token;
	int block_network;
	int tools;           /* 0: no sandbox-tools bundle (create's "tools": false) */
	int64_t cpu_millis;
	int64_t memory_bytes;
	int64_t ttl_left_s;  /* the sandbox must be gone this many seconds from now,
			      * even if no controller is running (hard deadline) */
	char *handle;    /* sandboxes.driver_handle (may be NULL) */
	char *address;   /* sandboxes.agent_address */
	char *error;     /* why create() failed: becomes state_message */
	char *restore;   /* a checkpoint id: start from its state (a fork), or NULL */
	int64_t disk_bytes;  /* limit of its writable state; 0: none */
};

#define CTL_SANDBOX_INIT { NULL, NULL, NULL, 0, 1, 0, 0, 0, NULL, NULL, NULL, NULL, 0 }
void ctl_sandbox_release(struct ctl_sandbox *sb);

/* The agent of a running sandbox, for drivers whose checkpoints go
 * through it (kubernetes). */
struct ctl_agent_ref {
	const char *id;
	const char *address;     /* sandboxes.agent_address */
	const char *token;
};

/* checkpoint(): still copying; ask again later. */
#define CTL_CHECKPOINT_RUNNING 1
/* checkpoint()'s *bytes_out: not counted yet (ops->checkpoint_bytes). */
#define CTL_BYTES_UNCOUNTED (-1)
/* checkpoint(): the state is captured (an atomic snapshot, durable), the
 * sandbox may change from now on; ask again at once to finish it. */
#define CTL_CHECKPOINT_TAKEN 2
/* create(): launching off the loop (or queued for it); ask again later
 * with the same sb, after jobs_fd() became readable. */
#define CTL_CREATE_RUNNING 1

struct ctl_driver;
typedef void (*ctl_ready_fn)(const char *id, void *arg);

/* What a driver knows about a launched sandbox right now (ops->status). */
enum ctl_sb_state {
	CTL_SB_PENDING,          /* not up yet, or the driver cannot tell yet */
	CTL_SB_READY,            /* the runtime says it is up: check its agent */
	CTL_SB_FAILED,           /* will never come up (again); message says why */
};

struct ctl_sb_status {
	enum ctl_sb_state state;
	char *address;   /* the agent's address once known, else NULL */
	char *message;   /* failure reason, or a pending note for the user
			  * (e.g. why it is not scheduled), else NULL */
};

#define CTL_SB_STATUS_INIT { CTL_SB_PENDING, NULL, NULL }

/*
 * What a driver can hold (ops->capacity), already scaled by the configured
 * reserve and overcommit: the admission step (rec_admit.c) admits a queued
 * sandbox only while the admitted ones fit in cpu_millis and memory_bytes,
 * and fails one that is larger than node_* (the largest node).
 */
struct ctl_capacity {
	int nodes;
	int64_t cpu_millis, memory_bytes;
	int64_t node_cpu_millis, node_memory_bytes;
};
void ctl_sb_status_release(struct ctl_sb_status *st);

struct ctl_driver_ops {
	const char *name;
	/* Prepare (check the state dir, probe the host). Fatal on failure. */
	int (*init)(struct ctl_driver *d);
	void (*release)(struct ctl_driver *d);
	/*
	 * Launch sb and return at once: the sandbox sets itself up in the
	 * background and is ready when its agent answers /health (the
	 * caller finds out). On success sets sb->handle and sb->address
	 * (address may stay NULL when the driver has a status op and learns
	 * it only later, e.g. a pod's IP). When a live
	 * sandbox of that id already exists (a controller died between
	 * launching it and recording it), adopt it rather than start a second
	 * one. On failure sets sb->error to a message meant for the user;
	 * ORC_EINVALID means retrying is pointless (e.g. unknown image).
	 * It may instead answer CTL_CREATE_RUNNING (the local driver, for a
	 * fork: its restore and launch run in a helper process): call again
	 * with the same sb for the result.
	 */
	int (*create)(struct ctl_driver *d, struct ctl_sandbox *sb);
	/* Stop the sandbox and remove everything it left on the host. handle
	 * may be NULL or stale. Idempotent: 0 when nothing is left. */
	int (*destroy)(struct ctl_driver *d, const char *id, const char *handle);
	/* 1 when the sandbox named by handle is running, 0 when not. */
	int (*alive)(struct ctl_driver *d, const char *id, const char *handle);
	/* Ids of every sandbox the driver has anything for (running or left
	 * over). *out is an array of n strings; free with ctl_ids_free(). */
	int (*list_owned)(struct ctl_driver *d, char ***out, size_t *nout);
	/* Where the agent of sandbox id listens ("unix:/..."); fresh string. */
	char *(*agent_address)(struct ctl_driver *d, const char *id);
	/* A short hint on why sandbox id stopped (e.g. its log's last line),
	 * or NULL; fresh string. */
	char *(*diagnose)(struct ctl_driver *d, const char *id);

	/*
	 * Optional readiness hints, so that launched sandboxes need not be
	 * polled: events_fd() is an fd (or -1) that becomes readable when an
	 * agent of a sandbox launched by create() may have come up; drain()
	 * reads it and calls fn with each such id; unwatch() stops watching
	 * an id (destroy does too).
	 */
	int (*events_fd)(struct ctl_driver *d);
	void (*drain)(struct ctl_driver *d, ctl_ready_fn fn, void *arg);
	void (*unwatch)(struct ctl_driver *d, const char *id);
	/*
	 * Optional, non-blocking: the state of a sandbox launched by create()
	 * (or adopted from handle) as the driver last saw it; never waits for
	 * the runtime. With it, the loop fails pending sandboxes with the
	 * driver's message, takes the agent's address from it and checks the
	 * agent only once the state is CTL_SB_READY; without it, the loop
	 * polls the agent from create()'s address and asks alive(). Returns 0
	 * and fills *out (fresh strings).
	 */
	int (*status)(struct ctl_driver *d, struct ctl_sb_status *out, const char *id,
		      const char *handle);
	/* Optional: the agent answered; lock down what the sandbox no longer
	 * needs to change (local: its run/ dir, so agent.sock stays ours). */
	void (*seal)(struct ctl_driver *d, const char *id);

	/*
	 * Optional: checkpoints and pause (docs/checkpoints.md); NULL when
	 * the driver has none. checkpoint() copies the writable state of
	 * running sandbox id into checkpoint ckpt, consistently (its
	 * processes frozen for the copy), and sets *bytes_out; on failure
	 * nothing of ckpt is left and *why says why. It may instead answer
	 * CTL_CHECKPOINT_RUNNING: the copy goes on off the loop, call again
	 * (same arguments) for the result; or CTL_CHECKPOINT_TAKEN: the
	 * state is captured for good, call again to finish. *bytes_out may
	 * be CTL_BYTES_UNCOUNTED: the checkpoint is complete, its size is
	 * asked of checkpoint_bytes(). create() starts from a checkpoint
	 * when sb->restore names one.
	 */
	int (*checkpoint)(struct ctl_driver *d, int64_t *bytes_out, char **why, const char *id,
			  const char *ckpt);
	/* Optional: the apparent size of complete checkpoint ckpt, counted
	 * off the loop: CTL_CHECKPOINT_RUNNING until it is known (call
	 * again), then 0 and *bytes_out. */
	int (*checkpoint_bytes)(struct ctl_driver *d, int64_t *bytes_out, const char *ckpt);
	/* Remove checkpoint ckpt; 0 when nothing is left (idempotent). */
	int (*checkpoint_remove)(struct ctl_driver *d, const char *ckpt);
	/* Ids of every checkpoint the driver holds (ctl_ids_free()). */
	int (*checkpoint_list)(struct ctl_driver *d, char ***out, size_t *nout);
	/* Freeze (paused 1) or thaw (0) sandbox id's processes. */
	int (*pause)(struct ctl_driver *d, const char *id, int paused);
	/*
	 * Optional, used instead of checkpoint() by drivers that copy through
	 * the sandbox's agent (kubernetes: tar streams into the controller's
	 * checkpoint store, not frozen). Sets *bytes_out and sha256_out (64
	 * hex digits, recorded on the row); on failure nothing of ckpt is left
	 * and *why says why.
	 */
	int (*checkpoint_agent)(struct ctl_driver *d, int64_t *bytes_out, char sha256_out[65],
				char **why, const struct ctl_agent_ref *agent, const char *ckpt);
	/*
	 * Optional: fill a fork's files from checkpoint ckpt through its agent,
	 * once the agent answers /health and before the sandbox is ready. The
	 * copy must have the recorded sha256 (NULL: refused). On failure *why
	 * says why and the sandbox fails.
	 */
	int (*restore_agent)(struct ctl_driver *d, char **why, const struct ctl_agent_ref *agent,
			     const char *ckpt, const char *sha256);
	/*
	 * Optional: work off the loop (create() or checkpoint() answered
	 * RUNNING). jobs_fd() is an fd (or -1) that becomes readable when
	 * some of it may have ended; jobs_drain() empties it, before the
	 * caller asks again.
	 */
	int (*jobs_fd)(struct ctl_driver *d);
	void (*jobs_drain)(struct ctl_driver *d);
	/* Optional: fill *out (may ask the runtime; called once per sweep).
	 * NULL: unlimited, every sandbox is admitted at once. */
	int (*capacity)(struct ctl_driver *d, struct ctl_capacity *out);
};

struct ctl_driver {
	const struct ctl_driver_ops *ops;
	const struct ctl_config *cfg;
	void *priv;
};

extern const struct ctl_driver_ops ctl_driver_local;

/* Look the driver up by name and init it. */
int ctl_driver_open(struct ctl_driver *d, const struct ctl_config *cfg);
void ctl_driver_close(struct ctl_driver *d);
/* Destroy every sandbox list_owned names (orchard-controller reap); 0, or
 * ORC_ERROR when any destroy failed (each logged). */
int ctl_driver_reap(struct ctl_driver *d);
void ctl_ids_free(char **ids, size_t n);

/* capacity.c: the configured reserve and overcommit applied to raw node
 * sizes (ORCHARD_CAPACITY_*, docs/configuration.md); ORC_EINVALID after
 * logging what is wrong. */
int ctl_capacity_scale(struct ctl_capacity *out, int nodes, int64_t cpu_millis,
		       int64_t memory_bytes, int64_t node_cpu_millis, int64_t node_memory_bytes);
/* ORCHARD_CPU_OVERCOMMIT and ORCHARD_MEMORY_OVERCOMMIT (kubernetes: a
 * pod requests its size divided by them, so the scheduler packs as
 * admission does). */
int ctl_capacity_overcommit(double *cpu_ratio, double *mem_ratio);
/* The local driver's: this host's online cpus and physical memory. */
int ctl_capacity_host(struct ctl_driver *d, struct ctl_capacity *out);
#endif
