/*
 * Configuration: the environment first (docs/architecture.md), then flags,
 * which win. Everything is checked here so the rest of the controller can
 * trust struct ctl_config.
 */
#include "ctl.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "imgstore.h"
#include "strutil.h"
#include "xalloc.h"

static const char usage[] =
	"usage: orchard-controller [options]\n"
	"\n"
	"Turns sandbox rows in PostgreSQL into running sandboxes (local driver:\n"
	"bubblewrap). Exactly one controller acts at a time; others wait as standbys.\n"
	"\n"
	"  --database-url URL      libpq conninfo            (ORCHARD_DATABASE_URL)\n"
	"  --state-dir DIR         per-sandbox host dirs     (ORCHARD_STATE_DIR, required)\n"
	"  --agent-bin PATH        orchard-agent binary      (ORCHARD_AGENT_BIN,\n"
	"                          default: orchard-agent beside this program)\n"
	"  --image-dir DIR         imported images           (ORCHARD_IMAGE_DIR, default:\n"
	"                          \"images\" beside the state dir)\n"
	"  --agent-bundle DIR      agent for imported images (ORCHARD_AGENT_BUNDLE, default:\n"
	"                          <agent-bin>.bundle; make it with scripts/agent-bundle.sh)\n"
	"  --sandbox-tools DIR|off the sandbox-tools bundle, read-only in every sandbox\n"
	"                          (ORCHARD_SANDBOX_TOOLS, default: sandbox-tools beside this\n"
	"                          program when built; make tools); mounted at\n"
	"                          ORCHARD_SANDBOX_TOOLS_PATH (default /opt/sandbox-tools)\n"
	"  --driver NAME           local or kubernetes       (ORCHARD_DRIVER, default local)\n"
	"  --bwrap PATH            bubblewrap binary         (ORCHARD_BWRAP, default: bwrap in PATH)\n"
	"                          every sandbox starts under orchard-watchdog (ORCHARD_WATCHDOG_BIN,\n"
	"                          default: beside this program)\n"
	"  --sandbox-uid UID       host uid of sandboxes     (ORCHARD_SANDBOX_UID, default 65534;\n"
	"  --sandbox-gid GID       host gid of sandboxes     (ORCHARD_SANDBOX_GID)  root only)\n"
	"                          for imported images; as root a `host` sandbox gets a host uid\n"
	"                          and gid of its own from ORCHARD_SANDBOX_UID_BASE (default\n"
	"                          2000000000) and ORCHARD_SANDBOX_UID_COUNT (default 65536;\n"
	"                          0: off), claimed host-wide in ORCHARD_SANDBOX_UID_DIR\n"
	"                          (default /run/orchard-sandbox-uids)\n"
	"  --sweep-interval-ms MS  full reconcile period     (ORCHARD_SWEEP_INTERVAL_MS, default 2000)\n"
	"  --pids-max N            tasks per sandbox         (ORCHARD_SANDBOX_PIDS_MAX, default 1024)\n"
	"  checkpoints: ORCHARD_CHECKPOINT_BACKEND=copy|btrfs|auto (default auto: btrfs snapshots\n"
	"                          when the state dir is on btrfs; docs/checkpoints.md)\n"
	"  forks: ORCHARD_FORK_PARALLEL=N sandboxes of a fork launched at once in helper\n"
	"                          processes (default 8; 0: one by one in the loop)\n"
	"  --help                  show this and exit\n"
	"\n"
	"orchard-controller reap [options]: stop and remove every sandbox of the state dir\n"
	"through the driver (list_owned, destroy), then exit; for a stopped controller\n"
	"(scripts/stack.sh down). The database is not needed.\n"
	"\n"
	"Logs are JSON lines on stderr (ORCHARD_LOG_LEVEL=debug|info|warn|error).\n"
	"Prometheus metrics: ORCHARD_CONTROLLER_METRICS=127.0.0.1:PORT (loopback only).\n"
	"Exit status: 0 after SIGTERM/SIGINT, 1 on a fatal error or when the\n"
	"leader lock is lost (a supervisor is expected to restart it).\n";

enum {
	OPT_DB = 1, OPT_STATE, OPT_AGENT, OPT_BWRAP, OPT_UID, OPT_GID, OPT_SWEEP, OPT_PIDS, OPT_HELP,
	OPT_IMAGES, OPT_BUNDLE, OPT_TOOLS, OPT_DRIVER,
};

static const struct option options[] = {
	{ "database-url", required_argument, NULL, OPT_DB },
	{ "state-dir", required_argument, NULL, OPT_STATE },
	{ "agent-bin", required_argument, NULL, OPT_AGENT },
	{ "bwrap", required_argument, NULL, OPT_BWRAP },
	{ "sandbox-uid", required_argument, NULL, OPT_UID },
	{ "sandbox-gid", required_argument, NULL, OPT_GID },
	{ "sweep-interval-ms", required_argument, NULL, OPT_SWEEP },
	{ "pids-max", required_argument, NULL, OPT_PIDS },
	{ "image-dir", required_argument, NULL, OPT_IMAGES },
	{ "agent-bundle", required_argument, NULL, OPT_BUNDLE },
	{ "sandbox-tools", required_argument, NULL, OPT_TOOLS },
	{ "driver", required_argument, NULL, OPT_DRIVER },
	{ "help", no_argument, NULL, OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

static void set_str(char **dst, const char *v)
{
	free(*dst);
	*dst = v ? xstrdup(v) : NULL;
}

static int parse_id(int64_t *out, const char *what, const char *v)
{
	if (orc_parse_i64(out, v, 0, 2147483646) < 0) {
		fprintf(stderr, "orchard-controller: %s \"%s\" is not a valid id\n", what, v);
		return ORC_EINVALID;
	}
	return 0;
}

/* name in the directory of /proc/self/exe (orchard-agent, orchard-watchdog). */
static char *beside_self(const char *name)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	char *slash;

	if (n <= 0)
		return xstrdup(name);
	self[n] = '\0';
	slash = strrchr(self, '/');
	if (slash)
		*slash = '\0';
	return xasprintf("%s/%s", self, name);
}

/* execve() does not search PATH, so find bwrap and slirp4netns once here. */
static char *find_in_path(const char *name)
{
	const char *path = getenv("PATH");
	const char *p, *end;
	char *cand;

	if (strchr(name, '/'))
		return xstrdup(name);
	if (!path || !*path)
		path = "/usr/local/bin:/usr/bin:/bin";
	for (p = path; *p; p = *end ? end + 1 : end) {
		end = strchrnul(p, ':');
		if (end == p)
			continue;
		cand = xasprintf("%.*s/%s", (int)(end - p), p, name);
		if (!access(cand, X_OK))
			return cand;
		free(cand);
	}
	return xstrdup(name);
}

static int make_absolute(char **path)
{
	char cwd[PATH_MAX];
	char *abs;

	if ((*path)[0] == '/')
		return 0;
	if (!getcwd(cwd, sizeof(cwd))) {
		fprintf(stderr, "orchard-controller: getcwd() failed: %s\n", strerror(errno));
		return ORC_ERROR;
	}
	abs = xasprintf("%s/%s", cwd, *path);
	free(*path);
	*path = abs;
	return 0;
}

static int check(struct ctl_config *cfg)
{
	int err;

	if (!cfg->reap && (!cfg->database_url || !*cfg->database_url)) {
		fprintf(stderr, "orchard-controller: ORCHARD_DATABASE_URL (or --database-url) is required\n");
		return ORC_EINVALID;
	}
	if (!cfg->state_dir || !*cfg->state_dir) {
		fprintf(stderr, "orchard-controller: ORCHARD_STATE_DIR (or --state-dir) is required\n");
		return ORC_EINVALID;
	}
	if ((err = make_absolute(&cfg->state_dir)) < 0 ||
	    (err = make_absolute(&cfg->agent_bin)) < 0)
		return err;
	/* Bind-mount sources and host dir names: keep them simple. */
	if (strlen(cfg->state_dir) > 512 || strchr(cfg->state_dir, '\n')) {
		fprintf(stderr, "orchard-controller: state dir \"%s\" is too long or has a newline\n",
			cfg->state_dir);
		return ORC_EINVALID;
	}
	if ((err = make_absolute(&cfg->agent_bundle)) < 0 ||
	    (err = make_absolute(&cfg->watchdog_bin)) < 0)
		return err;
	if (!cfg->image_dir || !*cfg->image_dir) {
		/* "images" beside the state dir: the rule orchard-admin follows. */
		free(cfg->image_dir);
		cfg->image_dir = orc_img_dir_default(cfg->state_dir);
	}
	if ((err = make_absolute(&cfg->image_dir)) < 0)
		return err;
	if (!orc_img_dir_valid(cfg->image_dir)) {
		fprintf(stderr, "orchard-controller: image dir \"%s\" must be an absolute path of at most "
			"%d bytes without ',' or ':' (it goes into overlayfs options)\n",
			cfg->image_dir, ORC_IMG_DIR_MAX);
		return ORC_EINVALID;
	}
	if (!cfg->checkpoint_backend || !*cfg->checkpoint_backend)
		set_str(&cfg->checkpoint_backend, "auto");
	if (strcmp(cfg->checkpoint_backend, "auto") && strcmp(cfg->checkpoint_backend, "copy") &&
	    strcmp(cfg->checkpoint_backend, "btrfs")) {
		fprintf(stderr, "orchard-controller: ORCHARD_CHECKPOINT_BACKEND \"%s\" must be copy, "
			"btrfs or auto\n", cfg->checkpoint_backend);
		return ORC_EINVALID;
	}
	/* The name is looked up in driver.c's drivers[] table, the one place
	 * that knows which drivers exist. */
	if (!cfg->driver || !*cfg->driver)
		set_str(&cfg->driver, "local");
	return 0;
}

/* The sandbox-tools bundle: "off", a directory, or by default the one
 * beside this program (make tools), which may not exist (then off). */
static int tools_config(struct ctl_config *cfg)
{
	const char *m;

	cfg->tools_explicit = cfg->tools_dir && *cfg->tools_dir;
	if (cfg->tools_explicit && !strcmp(cfg->tools_dir, "off")) {
		set_str(&cfg->tools_dir, NULL);
		cfg->tools_explicit = 0;
	} else if (!cfg->tools_explicit) {
		free(cfg->tools_dir);
		cfg->tools_dir = beside_self("sandbox-tools");
	}
	if (cfg->tools_dir && make_absolute(&cfg->tools_dir) < 0)
		return ORC_ERROR;
	if (!cfg->tools_mount || !*cfg->tools_mount)
		set_str(&cfg->tools_mount, "/opt/sandbox-tools");
	m = cfg->tools_mount;
	if (m[0] != '/' || !m[1] || strlen(m) > 256 || strchr(m, ':') || strstr(m, "/..") ||
	    strchr(m, '\n') || !strncmp(m, "/run/orchard", 12) || !strncmp(m, "/proc", 5) ||
	    !strncmp(m, "/dev", 4)) {
		fprintf(stderr, "orchard-controller: ORCHARD_SANDBOX_TOOLS_PATH \"%s\" must be an "
			"absolute path of at most 256 bytes without ':' or \"..\", outside /run/orchard, "
			"/proc and /dev\n", m);
		return ORC_EINVALID;
	}
	return 0;
}

int ctl_config_load(struct ctl_config *cfg, int argc, char **argv)
{
	int64_t uid = 65534, gid = 65534, sweep = 2000, pids = 1024;
	int64_t uid_base = 2000000000, uid_count = 65536;
	const char *v;
	char *bwrap = NULL;
	int c, err;

	set_str(&cfg->database_url, getenv("ORCHARD_DATABASE_URL"));
	set_str(&cfg->state_dir, getenv("ORCHARD_STATE_DIR"));
	set_str(&cfg->agent_bin, getenv("ORCHARD_AGENT_BIN"));
	set_str(&cfg->watchdog_bin, getenv("ORCHARD_WATCHDOG_BIN"));
	set_str(&bwrap, getenv("ORCHARD_BWRAP"));
	set_str(&cfg->image_dir, getenv("ORCHARD_IMAGE_DIR"));
	set_str(&cfg->agent_bundle, getenv("ORCHARD_AGENT_BUNDLE"));
	set_str(&cfg->tools_dir, getenv("ORCHARD_SANDBOX_TOOLS"));
	set_str(&cfg->tools_mount, getenv("ORCHARD_SANDBOX_TOOLS_PATH"));
	set_str(&cfg->driver, getenv("ORCHARD_DRIVER"));
	set_str(&cfg->checkpoint_backend, getenv("ORCHARD_CHECKPOINT_BACKEND"));
	if ((v = getenv("ORCHARD_SANDBOX_UID")) && *v && (err = parse_id(&uid, "ORCHARD_SANDBOX_UID", v)) < 0)
		goto done;
	if ((v = getenv("ORCHARD_SANDBOX_GID")) && *v && (err = parse_id(&gid, "ORCHARD_SANDBOX_GID", v)) < 0)
		goto done;
	if ((v = getenv("ORCHARD_SANDBOX_UID_BASE")) && *v &&
	    (err = parse_id(&uid_base, "ORCHARD_SANDBOX_UID_BASE", v)) < 0)
		goto done;
	if ((v = getenv("ORCHARD_SANDBOX_UID_COUNT")) && *v &&
	    orc_parse_i64(&uid_count, v, 0, 16777216) < 0) {
		fprintf(stderr, "orchard-controller: ORCHARD_SANDBOX_UID_COUNT \"%s\" must be 0..16777216\n", v);
		err = ORC_EINVALID;
		goto done;
	}
	set_str(&cfg->uid_dir, getenv("ORCHARD_SANDBOX_UID_DIR"));
	if ((v = getenv("ORCHARD_SWEEP_INTERVAL_MS")) && *v &&
	    orc_parse_i64(&sweep, v, 10, 3600000) < 0) {
		fprintf(stderr, "orchard-controller: ORCHARD_SWEEP_INTERVAL_MS \"%s\" must be 10..3600000\n", v);
		err = ORC_EINVALID;
		goto done;
	}
	if ((v = getenv("ORCHARD_TEST_CHECKPOINT_DELAY_MS")) && *v &&
	    orc_parse_i64(&cfg->test_checkpoint_delay_ms, v, 0, 600000) < 0) {
		fprintf(stderr, "orchard-controller: ORCHARD_TEST_CHECKPOINT_DELAY_MS \"%s\" must be "
			"0..600000\n", v);
		err = ORC_EINVALID;
		goto done;
	}
	cfg->fork_parallel = 8;
	if ((v = getenv("ORCHARD_FORK_PARALLEL")) && *v &&
	    orc_parse_i64(&cfg->fork_parallel, v, 0, 256) < 0) {
		fprintf(stderr, "orchard-controller: ORCHARD_FORK_PARALLEL \"%s\" must be 0..256\n", v);
		err = ORC_EINVALID;
		goto done;
	}
	if ((v = getenv("ORCHARD_SANDBOX_PIDS_MAX")) && *v &&
	    orc_parse_i64(&pids, v, 16, 4194304) < 0) {
		fprintf(stderr, "orchard-controller: ORCHARD_SANDBOX_PIDS_MAX \"%s\" must be 16..4194304\n", v);
		err = ORC_EINVALID;
		goto done;
	}

	optind = 1;
	while ((c = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (c) {
		case OPT_DB: set_str(&cfg->database_url, optarg); break;
		case OPT_STATE: set_str(&cfg->state_dir, optarg); break;
		case OPT_AGENT: set_str(&cfg->agent_bin, optarg); break;
		case OPT_BWRAP: set_str(&bwrap, optarg); break;
		case OPT_IMAGES: set_str(&cfg->image_dir, optarg); break;
		case OPT_BUNDLE: set_str(&cfg->agent_bundle, optarg); break;
		case OPT_TOOLS: set_str(&cfg->tools_dir, optarg); break;
		case OPT_DRIVER: set_str(&cfg->driver, optarg); break;
		case OPT_UID:
			if ((err = parse_id(&uid, "--sandbox-uid", optarg)) < 0)
				goto done;
			break;
		case OPT_GID:
			if ((err = parse_id(&gid, "--sandbox-gid", optarg)) < 0)
				goto done;
			break;
		case OPT_SWEEP:
			if (orc_parse_i64(&sweep, optarg, 10, 3600000) < 0) {
				fprintf(stderr, "orchard-controller: --sweep-interval-ms \"%s\" must be 10..3600000\n",
					optarg);
				err = ORC_EINVALID;
				goto done;
			}
			break;
		case OPT_PIDS:
			if (orc_parse_i64(&pids, optarg, 16, 4194304) < 0) {
				fprintf(stderr, "orchard-controller: --pids-max \"%s\" must be 16..4194304\n",
					optarg);
				err = ORC_EINVALID;
				goto done;
			}
			break;
		case OPT_HELP:
			fputs(usage, stdout);
			err = 1;
			goto done;
		default:
			fputs(usage, stderr);
			err = ORC_EINVALID;
			goto done;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "orchard-controller: unexpected argument \"%s\"\n", argv[optind]);
		err = ORC_EINVALID;
		goto done;
	}

	if (!cfg->agent_bin || !*cfg->agent_bin) {
		free(cfg->agent_bin);
		cfg->agent_bin = beside_self("orchard-agent");
	}
	if (!cfg->agent_bundle || !*cfg->agent_bundle) {
		free(cfg->agent_bundle);
		cfg->agent_bundle = xasprintf("%s.bundle", cfg->agent_bin);
	}
	if ((err = tools_config(cfg)) < 0)
		goto done;
	cfg->bwrap_bin = find_in_path(bwrap && *bwrap ? bwrap : "bwrap");
	{
		const char *slirp = getenv("ORCHARD_SLIRP4NETNS");
		cfg->slirp4netns = find_in_path(slirp && *slirp ? slirp : "slirp4netns");
	}
	if (!cfg->watchdog_bin || !*cfg->watchdog_bin) {
		free(cfg->watchdog_bin);
		cfg->watchdog_bin = beside_self("orchard-watchdog");
	}
	cfg->sweep_interval_ms = sweep;
	cfg->pids_max = pids;
	if (geteuid() == 0) {
		cfg->drop_privileges = 1;
		cfg->sandbox_uid = (uid_t)uid;
		cfg->sandbox_gid = (gid_t)gid;
		if (uid_count > 0 && uid_base + uid_count - 1 > 2147483646) {
			fprintf(stderr, "orchard-controller: ORCHARD_SANDBOX_UID_BASE + _COUNT goes past "
				"uid 2147483646\n");
			err = ORC_EINVALID;
			goto done;
		}
		if (uid_count > 0 && (int64_t)cfg->sandbox_uid >= uid_base &&
		    (int64_t)cfg->sandbox_uid < uid_base + uid_count) {
			fprintf(stderr, "orchard-controller: ORCHARD_SANDBOX_UID %u lies inside the "
				"per-sandbox range ORCHARD_SANDBOX_UID_BASE/_COUNT\n",
				(unsigned)cfg->sandbox_uid);
			err = ORC_EINVALID;
			goto done;
		}
		cfg->uid_base = (uid_t)uid_base;
		cfg->uid_count = uid_count;
		if (!cfg->uid_dir || !*cfg->uid_dir)
			set_str(&cfg->uid_dir, "/run/orchard-sandbox-uids");
		if (cfg->uid_dir[0] != '/' || strlen(cfg->uid_dir) > 256) {
			fprintf(stderr, "orchard-controller: ORCHARD_SANDBOX_UID_DIR \"%s\" must be an "
				"absolute path of at most 256 bytes\n", cfg->uid_dir);
			err = ORC_EINVALID;
			goto done;
		}
	} else {
		/* Unprivileged: sandboxes run as whoever runs the controller. */
		cfg->drop_privileges = 0;
		cfg->sandbox_uid = geteuid();
		cfg->sandbox_gid = getegid();
	}
	err = check(cfg);
done:
	free(bwrap);
	return err;
}

int ctl_config_load_reap(struct ctl_config *cfg, int argc, char **argv)
{
	cfg->reap = 1;
	return ctl_config_load(cfg, argc, argv);
}

void ctl_config_release(struct ctl_config *cfg)
{
	set_str(&cfg->database_url, NULL);
	set_str(&cfg->state_dir, NULL);
	set_str(&cfg->agent_bin, NULL);
	set_str(&cfg->bwrap_bin, NULL);
	set_str(&cfg->watchdog_bin, NULL);
	set_str(&cfg->slirp4netns, NULL);
	set_str(&cfg->driver, NULL);
	set_str(&cfg->image_dir, NULL);
	set_str(&cfg->agent_bundle, NULL);
	set_str(&cfg->tools_dir, NULL);
	set_str(&cfg->tools_mount, NULL);
	set_str(&cfg->checkpoint_backend, NULL);
	set_str(&cfg->uid_dir, NULL);
}
