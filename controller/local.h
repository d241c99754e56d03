#ifndef CTL_LOCAL_H
#define CTL_LOCAL_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/un.h>

#include "buf.h"
#include "driver.h"
/*
 * Internals of the local driver (driver_local.c holds its operations
 * table and start-up): launching and destroying a sandbox, reading its
 * host state back, the bubblewrap command line, launching a process that
 * outlives the controller, /proc lookups, readiness hints and the agent's
 * socket. The driver's own state is in local_driver.h.
 */

/* A NULL-terminated, heap-allocated string vector. */
struct ctl_strv {
	char **v;
	size_t n, alloc;
};
#define CTL_STRV_INIT { NULL, 0, 0 }
void ctl_strv_push(struct ctl_strv *s, const char *str);
void ctl_strv_pushf(struct ctl_strv *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ctl_strv_release(struct ctl_strv *s);

/* ---- bwrap.c ---------------------------------------------------------- */

/* How the host's system directories appear inside a `host` sandbox:
 * read-only binds for real directories, the same symlinks for symlinks
 * (merged /usr), nothing for what does not exist. Computed once. */
void ctl_bwrap_host_layout(struct ctl_strv *out);

/* For login shells, whose /etc/profile resets PATH: the host's
 * /etc/profile.d as it is, plus the bundle's script, on a tmpfs made
 * read-only again. Empty when the host has no /etc/profile.d. */
void ctl_bwrap_tools_profile(struct ctl_strv *out, const char *tools);

struct ctl_bwrap_spec {
	const char *bwrap;          /* absolute path of bwrap */
	const struct ctl_strv *layout;  /* from ctl_bwrap_host_layout() */
	const char *id;             /* sandbox id (hostname) */
	const char *dir;            /* $STATE/<id> */
	const char *agent_bin;      /* host path of orchard-agent */
	int block_network;
	int seccomp_fd;             /* fd number of the BPF filter in the child, or -1 */
	/* An imported image (image.h): root is bound as "/" (writable: the
	 * sandbox's private layer) instead of the host layout, and the agent
	 * is agent_cmd from the bundle dir agent_bundle. NULL for `host`. */
	const char *root;
	const char *agent_bundle;
	const struct ctl_strv *agent_cmd;
	/* The sandbox-tools bundle (docs/sandbox-tools.md), or NULL: bound
	 * read-only at tools_mount, its bin/ last on PATH; tools_profile is
	 * ctl_bwrap_tools_profile()'s for the host layout. */
	const char *tools;
	const char *tools_mount;
	const struct ctl_strv *tools_profile;
	/* The sandbox's cgroup dirs, or NULL: bound read-only at
	 * /run/orchard/cgroup/<n> for the agent's failure counters
	 * (agent/cglimits.c). */
	const struct ctl_strv *cgroups;
};

/*
 * bubblewrap's whole command line for one sandbox, agent included:
 * `bwrap --die-with-parent ...`. Its parent is the sandbox's watchdog
 * (spawn.c); bwrap dies with it and takes the namespace's init, hence
 * the whole sandbox, along.
 */
void ctl_bwrap_argv(struct ctl_strv *out, const struct ctl_bwrap_spec *spec);

/* ---- spawn.c ---------------------------------------------------------- */

struct ctl_spawn {
	const char *watchdog;       /* orchard-watchdog (absolute) */
	int64_t ttl_s;              /* the watchdog kills the sandbox after this (> 0) */
	char *const *argv;          /* what it starts: bwrap ...; argv[0] absolute */
	char *const *envp;
	int log_fd;                 /* becomes stdout and stderr */
	int drop_privileges;        /* the watchdog setuids to uid/gid */
	uid_t uid;
	gid_t gid;
	char *const *cgroup_procs;  /* NULL-terminated: cgroup.procs files the watchdog
				     * joins (while still privileged); or NULL */
	int seccomp_fd;             /* becomes CTL_SPAWN_SECCOMP_FD in the child; -1: none */
	const char *slirp4netns;    /* or NULL: the watchdog gives the sandbox a network
				     * namespace with egress through it (watchdog/netns.c) */
};

/* The fd number the launched process finds the seccomp filter on. */
#define CTL_SPAWN_SECCOMP_FD 3

/*
 * Start a sandbox: orchard-watchdog (controller/watchdog/main.c) in its
 * own session, which joins the cgroups, drops privileges and starts argv.
 * posix_spawn does not copy our address space, and we do not wait for the
 * cgroup joins. The watchdog is our child until we die (then init's): call
 * ctl_spawn_reap() now and then. Returns its pid in *out; a failure after
 * exec goes to log_fd and the watchdog exits. ORC_ERROR (logged) when
 * nothing could be started.
 */
int ctl_spawn_sandbox(pid_t *out, const struct ctl_spawn *sp);

/* Collect the exit status of every watchdog that has ended, so that none
 * stays a zombie (a zombie counts as dead: procfs.c). */
void ctl_spawn_reap(void);

/* ---- procfs.c --------------------------------------------------------- */

/* A process identity that survives pid reuse: pid plus its start time
 * (field 22 of /proc/<pid>/stat, clock ticks since boot). Text form
 * "<pid>:<starttime>" is what goes in sandboxes.driver_handle. */
struct ctl_proc_id {
	pid_t pid;
	uint64_t starttime;
};

int ctl_proc_id_of(struct ctl_proc_id *out, pid_t pid);
int ctl_proc_id_parse(struct ctl_proc_id *out, const char *s);
/* Writes "<pid>:<starttime>" into buf (at least 48 bytes). */
void ctl_proc_id_format(char *buf, size_t len, const struct ctl_proc_id *p);
/* 1 when that exact process exists and is not a zombie, else 0. */
int ctl_proc_id_alive(const struct ctl_proc_id *p);
/* SIGKILL it (if it is still that process) and wait up to timeout_ms for
 * it to be gone. 0 when gone, ORC_ETIMEOUT otherwise. */
int ctl_proc_id_kill(const struct ctl_proc_id *p, int64_t timeout_ms);

/*
 * Every bubblewrap process whose command line binds a directory of
 * state_dir: calls fn(id, pid, arg) with the sandbox id taken from the
 * path. This finds sandboxes whose host directory or handle was lost.
 */
typedef void (*ctl_proc_scan_fn)(const char *id, pid_t pid, void *arg);
void ctl_proc_scan_bwrap(const char *state_dir, ctl_proc_scan_fn fn, void *arg);

/* ---- seccomp.c -------------------------------------------------------- */

/* Compile the sandbox filter to BPF in a memfd (CLOEXEC); *out is its fd. */
int ctl_seccomp_build(int *out);
/* A new read-only fd for that filter with its own file offset (for one
 * launch: bwrap reads it to the end), or -1. */
int ctl_seccomp_open(int filter_fd);

/* How long a SIGKILLed sandbox may take to be gone. */
#define LOCAL_KILL_TIMEOUT_MS 2000

struct local;

/* ---- local_create.c, local_destroy.c ---------------------------------- */

/* The driver's create and destroy operations (driver.h). */
int local_create(struct ctl_driver *d, struct ctl_sandbox *sb);
int local_destroy(struct ctl_driver *d, const char *id, const char *handle);

/* ---- local_state.c ---------------------------------------------------- */

/* The driver's alive, list_owned and diagnose operations (driver.h). */
int local_alive(struct ctl_driver *d, const char *id, const char *handle);
int local_list_owned(struct ctl_driver *d, char ***out, size_t *nout);
char *local_diagnose(struct ctl_driver *d, const char *id);
/* The handle recorded in <id>/handle; ORC_ENOTFOUND when there is none. */
int local_handle_read(struct ctl_proc_id *out, struct local *l, const char *id);
/* Write data to name in dfd (created with mode, truncated, never through
 * a symlink), owned by uid:gid when chown_it. ORC_ERROR on failure. */
int local_write_file_at(int dfd, const char *name, const char *data, mode_t mode,
			uid_t uid, gid_t gid, int chown_it);

/* ---- local_ready.c ---------------------------------------------------- */

/* Watch <state_dir>/<id>/run for the agent's socket (no-op without inotify). */
void local_watch_run_dir(struct local *l, const char *state_dir, const char *id);
/* The driver's events_fd, drain and unwatch operations (driver.h). */
int local_events_fd(struct ctl_driver *d);
void local_drain(struct ctl_driver *d, ctl_ready_fn fn, void *arg);
void local_unwatch(struct ctl_driver *d, const char *id);

/* ---- checkpoint_local.c ----------------------------------------------- */

/* The driver's checkpoint, checkpoint_remove, checkpoint_list and pause
 * operations (driver.h). */
int local_checkpoint(struct ctl_driver *d, int64_t *bytes_out, char **why, const char *id,
		     const char *ckpt);
int local_checkpoint_remove(struct ctl_driver *d, const char *ckpt);
int local_checkpoint_list(struct ctl_driver *d, char ***out, size_t *nout);
/* The driver's checkpoint_bytes operation (driver.h): the count runs in a
 * helper (local_job.c). */
int local_checkpoint_bytes(struct ctl_driver *d, int64_t *bytes_out, const char *ckpt);
int local_pause(struct ctl_driver *d, const char *id, int paused);
/* create() of a fork: copy checkpoint sb->restore into the new sandbox's
 * directories (before it starts); sb->error on failure. Nothing to do when
 * local_sandbox_dir_make() restored it as a snapshot. in_helper: in a
 * launch helper (local_job.c), whose copies die with it. */
int local_checkpoint_restore(struct ctl_driver *d, struct ctl_sandbox *sb, int in_helper);
/* Pick the checkpoint backend from cfg->checkpoint_backend (l->btrfs);
 * ORC_EINVALID (logged) for btrfs on a state dir that is not on btrfs. */
struct ctl_config;
int local_checkpoint_backend(struct local *l, const struct ctl_config *cfg);
/* Create $STATE/<sb->id>: a plain directory (copy backend), a subvolume
 * (btrfs), or for a fork of a snapshot checkpoint a writable snapshot of
 * it holding only its writable state (*restored set). errno on failure. */
int local_sandbox_dir_make(int *restored, struct ctl_driver *d, const struct ctl_sandbox *sb);

/* ---- local_disk.c ----------------------------------------------------- */

/* Turn on what enforces disk limits on the state dir (btrfs quotas) and
 * log whether they are enforced. Call after local_checkpoint_backend(). */
void local_disk_init(struct local *l);
/* Limit the new sandbox dir of sb to sb->disk_bytes (btrfs qgroup). 0 when
 * done or nothing enforces limits here; ORC_ERROR with sb->error when a
 * limit that should hold could not be set. */
int local_disk_limit(struct ctl_driver *d, struct ctl_sandbox *sb);

/* ---- local_job.c ----------------------------------------------------- */

/*
 * Work run off the reconcile loop in helper processes (forks of the
 * controller that die with it): a checkpoint's copy and its byte count,
 * keyed by the checkpoint, and a fork's launch, keyed by the sandbox. The helper runs
 * fn(wfd, arg), which writes its result to wfd; the loop reads it with
 * local_job_poll() once the wake pipe (ops->jobs_fd) says a helper ended.
 */
enum local_job_kind { LOCAL_JOB_COPY, LOCAL_JOB_LAUNCH, LOCAL_JOB_COUNT };
typedef void (*local_job_fn)(int wfd, void *arg);

/* The wake pipe (l->wake), at the driver's init. */
int local_job_wake_open(struct local *l);
/* The driver's jobs_fd and jobs_drain operations (driver.h). */
int local_jobs_fd(struct ctl_driver *d);
void local_jobs_drain(struct ctl_driver *d);
/* Start a job. froze: the sandbox was frozen for it (a copy: to thaw
 * when it ends). */
int local_job_start(struct local *l, char **why, enum local_job_kind kind, const char *key,
		    const char *sandbox, int froze, local_job_fn fn, void *arg);
/* 0: no job of kind for key nor for sandbox (NULL: not asked); 1: key's
 * job runs; 2: another job of kind for sandbox runs. */
int local_job_busy(struct local *l, enum local_job_kind kind, const char *key, const char *sandbox);
/* How many jobs of kind run. */
size_t local_job_count(struct local *l, enum local_job_kind kind);
/* key's job: 1 still running; 0 ended, and then the job is gone, *out
 * holds what its helper wrote (empty: it died before it answered) and
 * *froze_out says whether to thaw; ORC_ENOTFOUND: no such job. */
int local_job_poll(struct local *l, struct orc_buf *out, int *froze_out, enum local_job_kind kind,
		   const char *key);
/* Stop key's job (SIGKILL, waited for); its sandbox id (to thaw when
 * *froze_out), or NULL when there was none. */
char *local_job_cancel(struct local *l, int *froze_out, enum local_job_kind kind, const char *key);
/* Forget every job and close the wake pipe (the driver's release); the
 * helpers end with us. */
void local_job_release(struct local *l);
/* In a helper: run /bin/cp with each NULL-terminated argv of argvs in
 * order, each dying with the helper; 0, or the failing one's index + 1. */
int local_job_run_cps(char ***argvs, size_t n);
/* In a helper: write all of data to fd. */
void local_job_write(int fd, const char *data, size_t len);

/* ---- local_uid.c ----------------------------------------------------- */

/* 1 when a sandbox of image runs as a host uid of its own: the controller
 * runs as root, ORCHARD_SANDBOX_UID_COUNT > 0 and the image is `host`
 * (imported images' trees belong to ORCHARD_SANDBOX_UID: docs/images.md). */
int local_uid_own(const struct ctl_driver *d, const char *image);
/* Make the claims dir (cfg->uid_dir) and drop stale claims, at the
 * driver's init. ORC_ERROR (logged) when it is unusable. */
int local_uid_init(struct ctl_driver *d);
/* id's uid: the one it already claimed, else the lowest free one of the
 * range, claimed host-wide. ORC_ERROR (logged) when none is free. */
int local_uid_claim(uid_t *out, struct ctl_driver *d, const char *id);
/* The uid id claimed; ORC_ENOTFOUND when it has none. */
int local_uid_find(uid_t *out, struct ctl_driver *d, const char *id);
/* Drop id's claims (none is fine). ORC_ERROR when one could not go. */
int local_uid_release(struct ctl_driver *d, const char *id);
/* fn(id, arg) for every claim of our state dir (list_owned). */
typedef void (*local_uid_list_fn)(const char *id, void *arg);
void local_uid_list(struct ctl_driver *d, local_uid_list_fn fn, void *arg);
/* A fork's restored workspace/ and tmp/ become uid:gid's (the
 * checkpoint's files belong to the uid of the sandbox it was taken of).
 * ORC_ERROR with *why on failure. */
int local_uid_chown_parts(char **why, struct ctl_driver *d, const char *id, uid_t uid, gid_t gid);

/* ---- local_socket.c --------------------------------------------------- */

/* Short names for agent sockets whose real path is too long for a unix
 * socket address: <state>/.s/<16 hex> -> ../<id>/run/agent.sock. Not a
 * DNS label, so never taken for a sandbox. */
#define LINK_DIR ".s"
#define LINK_KEY_LEN 16
#define SUN_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)

/* 1 when <state>/<id>/run/agent.sock fits in sun_path. */
int local_direct_fits(const struct ctl_driver *d, const char *id);
/* The driver's agent_address operation (driver.h). */
char *local_agent_address(struct ctl_driver *d, const char *id);
/* Create (or find in place) <state>/.s/<key> -> ../<id>/run/agent.sock. */
int local_make_link(struct local *l, const char *id);
/* Remove id's short link, if it is id's. */
void local_remove_link(struct local *l, const char *id);
/* The driver's seal operation (driver.h): make <id>/run root's. */
void local_seal(struct ctl_driver *d, const char *id);
#endif
