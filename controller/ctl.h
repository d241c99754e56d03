#ifndef CTL_H
#define CTL_H
#include <signal.h>
#include <stdint.h>
#include <sys/types.h>
/*
 * orchard-controller: configuration and the few process-wide things every
 * part of the controller shares. See docs/controller.md.
 */

struct ctl_config {
	char *database_url;      /* ORCHARD_DATABASE_URL / --database-url */
	char *state_dir;         /* ORCHARD_STATE_DIR / --state-dir (absolute) */
	char *agent_bin;         /* ORCHARD_AGENT_BIN / --agent-bin (absolute) */
	char *bwrap_bin;         /* ORCHARD_BWRAP / --bwrap (default "bwrap" in PATH) */
	char *watchdog_bin;      /* ORCHARD_WATCHDOG_BIN: every sandbox's first process and
				  * TTL guard (default: orchard-watchdog beside the controller) */
	char *slirp4netns;       /* ORCHARD_SLIRP4NETNS: the egress of block_network:false
				  * sandboxes (default: slirp4netns in PATH; docs/controller.md) */
	char *driver;            /* ORCHARD_DRIVER / --driver (default "local"); driver.c's
				  * drivers[] table knows the names */
	uid_t sandbox_uid;       /* ORCHARD_SANDBOX_UID (root only; default 65534) */
	gid_t sandbox_gid;       /* ORCHARD_SANDBOX_GID (root only; default 65534) */
	int drop_privileges;     /* running as root: children setuid to sandbox_uid */
	uid_t uid_base;          /* ORCHARD_SANDBOX_UID_BASE: first host uid of the per-sandbox
				  * range (root only; default 2000000000; local_uid.c) */
	int64_t uid_count;       /* ORCHARD_SANDBOX_UID_COUNT: its size (default 65536; 0: every
				  * sandbox runs as sandbox_uid, as before) */
	char *uid_dir;           /* ORCHARD_SANDBOX_UID_DIR: the host-wide claims of that range
				  * (default /run/orchard-sandbox-uids) */
	int64_t sweep_interval_ms;   /* ORCHARD_SWEEP_INTERVAL_MS (default 2000) */
	int64_t health_interval_ms;  /* re-check cadence of pending sandboxes (20) */
	int64_t health_timeout_ms;   /* per /health call (200) */
	int64_t default_ttl_s;       /* TTL of rows whose ttl_seconds is NULL (7200) */
	int64_t heartbeat_timeout_s; /* Orchard's rule: after one heartbeat, at most this
				      * long without activity (180) */
	int64_t pids_max;            /* ORCHARD_SANDBOX_PIDS_MAX: tasks per sandbox (1024) */
	char *image_dir;         /* ORCHARD_IMAGE_DIR / --image-dir (default: "images"
				  * beside the state dir); docs/images.md */
	char *agent_bundle;      /* ORCHARD_AGENT_BUNDLE / --agent-bundle: the self-contained
				  * agent (scripts/agent-bundle.sh) for imported images
				  * (default: <agent-bin>.bundle) */
	char *tools_dir;         /* ORCHARD_SANDBOX_TOOLS / --sandbox-tools: the sandbox-tools
				  * bundle (docs/sandbox-tools.md), or NULL when off (default:
				  * sandbox-tools beside this program, when it exists) */
	char *tools_mount;       /* ORCHARD_SANDBOX_TOOLS_PATH: where sandboxes see it
				  * (default /opt/sandbox-tools) */
	int tools_explicit;      /* tools_dir was configured: missing is an error */
	char *checkpoint_backend;  /* ORCHARD_CHECKPOINT_BACKEND: "copy", "btrfs" or "auto"
				    * (default; btrfs when the state dir is on btrfs) */
	int64_t test_checkpoint_delay_ms;  /* ORCHARD_TEST_CHECKPOINT_DELAY_MS, tests only: a
					    * sleep inside each checkpoint and fork restore,
					    * so crash tests can kill the controller there */
	int64_t fork_parallel;   /* ORCHARD_FORK_PARALLEL: a fork's sandboxes launched at once
				  * in helper processes (default 8; 0: one by one in the loop) */
	int reap;                /* `orchard-controller reap`: no database needed */
};

#define CTL_CONFIG_INIT { .sweep_interval_ms = 2000, .health_interval_ms = 20, \
			  .health_timeout_ms = 200, .default_ttl_s = 7200, \
			  .heartbeat_timeout_s = 180, .pids_max = 1024 }

/*
 * Fill cfg from the environment, then from argv (flags win). Returns 0,
 * 1 when --help was printed (exit 0), or ORC_EINVALID after printing what
 * is wrong to stderr.
 */
int ctl_config_load(struct ctl_config *cfg, int argc, char **argv);
/* The configuration of `orchard-controller reap [options]` (cfg->reap:
 * the database is not needed); argv starts at "reap". */
int ctl_config_load_reap(struct ctl_config *cfg, int argc, char **argv);
void ctl_config_release(struct ctl_config *cfg);

/*
 * Set by SIGTERM/SIGINT. Those signals are blocked outside ctl_wait(), so
 * a stop request is seen either before the wait or wakes it (ppoll).
 */
extern volatile sig_atomic_t ctl_stopping;
void ctl_signals_init(void);

struct pollfd;
/* ppoll with the stop signals unblocked; returns poll's result (-1/EINTR on a
 * signal). timeout_ms < 0 waits forever. */
int ctl_wait(struct pollfd *fds, unsigned nfds, int64_t timeout_ms);
#endif
