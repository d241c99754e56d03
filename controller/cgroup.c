/*
 * cgroups for the local driver (cgroup.h): find where cpu, memory and pids
 * are mounted (v1 hierarchies or the v2 unified one), make a base under
 * the controller's own cgroup in each, and per sandbox create a child,
 * write its limits, and later empty and remove it.
 */
#include "cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "err.h"
#include "log.h"
#include "procstat.h"
#include "strutil.h"
#include "xalloc.h"

#ifndef CGROUP_SUPER_MAGIC
#define CGROUP_SUPER_MAGIC 0x27e0eb
#endif
#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

#define CPU_PERIOD_US 100000
#define CPU_MIN_QUOTA_US 1000
#define BASE_PREFIX "orchard-"

static const char *const ctrl_names[CTL_CG_NCTRL] = { "cpu", "memory", "pids", "freezer" };
/* A file that exists in a cgroup dir when the controller is active there. */
static const char *const probe_v1[CTL_CG_NCTRL] = {
	"cpu.cfs_quota_us", "memory.limit_in_bytes", "pids.max", "freezer.state",
};
static const char *const probe_v2[CTL_CG_NCTRL] = { "cpu.max", "memory.max", "pids.max", "cgroup.freeze" };

/* Where a hierarchy is mounted and which of its paths the mount shows. */
struct mnt {
	char *point;
	char *root;
};

static void mnt_release(struct mnt *m)
{
	free(m->point);
	free(m->root);
	m->point = m->root = NULL;
}

static int read_text(char *buf, size_t len, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t total = 0;
	ssize_t r;

	if (fd < 0)
		return -errno;
	while (total < len - 1) {
		r = read(fd, buf + total, len - 1 - total);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		total += (size_t)r;
	}
	close(fd);
	buf[total] = '\0';
	return (int)total;
}

/* Write s to path; -errno on failure. */
static int write_text(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC), err = 0;
	size_t len = strlen(s);
	ssize_t w;

	if (fd < 0)
		return -errno;
	do
		w = write(fd, s, len);
	while (w < 0 && errno == EINTR);
	if (w < 0)
		err = -errno;
	else if ((size_t)w != len)
		err = -EIO;
	close(fd);
	return err;
}

static int has_word(const char *list, const char *word, char sep)
{
	size_t n = strlen(word);
	const char *p = list;

	while (p && *p) {
		if (!strncmp(p, word, n) && (p[n] == sep || p[n] == '\0' || p[n] == '\n'))
			return 1;
		p = strchr(p, sep);
		if (p)
			p++;
	}
	return 0;
}

/*
 * /proc/self/mountinfo: "id parent maj:min root point opts [tags] - fstype src superopts".
 * v1 hierarchies name their controllers in superopts ("rw,cpu,cpuacct").
 */
static void find_mounts(struct mnt v1[CTL_CG_NCTRL], struct mnt *v2)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096], *field[12], *dash, *save, *p;
	int n, i;

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		if (!(dash = strstr(line, " - ")))
			continue;
		*dash = '\0';
		n = 0;
		for (p = strtok_r(line, " ", &save); p && n < 5; p = strtok_r(NULL, " ", &save))
			field[n++] = p;
		for (p = strtok_r(dash + 3, " ", &save); p && n < 8; p = strtok_r(NULL, " ", &save))
			field[n++] = p;
		if (n < 8 || strchr(field[4], '\\'))
			continue;
		if (!strcmp(field[5], "cgroup2")) {
			if (!v2->point) {
				v2->point = xstrdup(field[4]);
				v2->root = xstrdup(field[3]);
			}
			continue;
		}
		if (strcmp(field[5], "cgroup"))
			continue;
		for (i = 0; i < CTL_CG_NCTRL; i++) {
			if (!v1[i].point && has_word(field[7], ctrl_names[i], ',')) {
				v1[i].point = xstrdup(field[4]);
				v1[i].root = xstrdup(field[3]);
			}
		}
	}
	fclose(f);
}

/* Our own cgroup path per v1 controller and on v2 ("0::/path"). */
static void find_own(char *own_v1[CTL_CG_NCTRL], char **own_v2)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	char line[4096], *c1, *c2;
	int i;

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		if (!(c1 = strchr(line, ':')) || !(c2 = strchr(c1 + 1, ':')))
			continue;
		*c2 = '\0';
		if (c2[1] != '/')
			continue;
		if (!strcmp(line, "0") && c1[1] == '\0') {
			free(*own_v2);
			*own_v2 = xstrdup(c2 + 1);
			continue;
		}
		for (i = 0; i < CTL_CG_NCTRL; i++)
			if (!own_v1[i] && has_word(c1 + 1, ctrl_names[i], ','))
				own_v1[i] = xstrdup(c2 + 1);
	}
	fclose(f);
}

/* Host path of hierarchy path `own` seen through mount m, or NULL. */
static char *host_path(const struct mnt *m, const char *own)
{
	size_t rl = strlen(m->root);

	if (!strcmp(m->root, "/"))
		return xasprintf("%s%s", m->point, strcmp(own, "/") ? own : "");
	if (strncmp(own, m->root, rl) || (own[rl] != '/' && own[rl] != '\0'))
		return NULL;   /* our cgroup is not visible in this mount */
	return xasprintf("%s%s", m->point, own + rl);
}

static int probe_file(const char *dir, const char *file)
{
	char *p = xasprintf("%s/%s", dir, file);
	int ok = access(p, F_OK) == 0;

	free(p);
	return ok;
}

static void set_why(struct ctl_cgroups *cg, int i, char *why)
{
	free(cg->c[i].why);
	cg->c[i].why = why;
}

/* Make controller i's base <dir>/orchard-<tag> and check that probe is in
 * it (the controller is active there); the why is set on failure. */
static int base_probe(struct ctl_cgroups *cg, int i, const char *dir, const char *tag,
		      const char *probe)
{
	cg->c[i].base = xasprintf("%s/" BASE_PREFIX "%s", dir, tag);
	if (mkdir(cg->c[i].base, 0755) < 0 && errno != EEXIST) {
		set_why(cg, i, xasprintf("mkdir \"%s\" failed: %s", cg->c[i].base, strerror(errno)));
		return ORC_ERROR;
	}
	if (!probe_file(cg->c[i].base, probe)) {
		set_why(cg, i, xasprintf("no %s in \"%s\"", probe, cg->c[i].base));
		return ORC_ERROR;
	}
	return 0;
}

static int setup_v1(struct ctl_cgroups *cg, int i, const struct mnt *m, const char *own, const char *tag)
{
	char *dir = host_path(m, own);
	int err;

	if (!dir) {
		set_why(cg, i, xstrdup("our v1 cgroup is outside the mounted part of the hierarchy"));
		return ORC_ERROR;
	}
	if ((err = base_probe(cg, i, dir, tag, probe_v1[i])) == 0)
		cg->c[i].version = 1;
	rmdir(cg->c[i].base);   /* made again by the first sandbox (base_make) */
	free(dir);
	return err;
}

/* Enable v2 controller i in dir's cgroup.subtree_control; with
 * must_offer, first check that dir's cgroup.controllers offers it. */
static int enable_v2(struct ctl_cgroups *cg, int i, const char *dir, int must_offer)
{
	char *p = xasprintf("%s/cgroup.controllers", dir), *en = xasprintf("+%s", ctrl_names[i]);
	char buf[512];
	int err = ORC_ERROR, e;

	if (must_offer && (read_text(buf, sizeof(buf), p) < 0 || !has_word(buf, ctrl_names[i], ' '))) {
		set_why(cg, i, xasprintf("not bound to a v1 hierarchy and not delegated on v2 (%s)", dir));
		goto done;
	}
	free(p);
	p = xasprintf("%s/cgroup.subtree_control", dir);
	if ((e = write_text(p, en)) < 0) {
		set_why(cg, i, xasprintf("enabling it in \"%s\" failed: %s", p, strerror(-e)));
		goto done;
	}
	err = 0;
done:
	free(p);
	free(en);
	return err;
}

/*
 * v2: the controller must be enabled in our cgroup's subtree_control (the
 * kernel refuses while our cgroup itself holds processes and is not the
 * root: "no internal processes"; a delegated service cgroup such as
 * systemd's Delegate=yes with the controller in a leaf works) and then in
 * the base's. The freezer is not a controller on v2: every cgroup has
 * cgroup.freeze, so it needs no enabling.
 */
static int setup_v2(struct ctl_cgroups *cg, int i, const struct mnt *m, const char *own, const char *tag)
{
	char *dir = host_path(m, own);
	int ctrl = i != CTL_CG_FREEZER, err;

	if (!dir) {
		set_why(cg, i, xstrdup("our v2 cgroup is outside the mounted hierarchy"));
		return ORC_ERROR;
	}
	if ((!ctrl || (err = enable_v2(cg, i, dir, 1)) == 0) &&
	    (err = base_probe(cg, i, dir, tag, probe_v2[i])) == 0 &&
	    (!ctrl || (err = enable_v2(cg, i, cg->c[i].base, 0)) == 0))
		cg->c[i].version = 2;
	if (cg->c[i].base)
		rmdir(cg->c[i].base);   /* made again by the first sandbox (base_make) */
	free(dir);
	return err;
}

void ctl_cgroups_probe(struct ctl_cgroups *cg, const char *tag)
{
	struct mnt v1[CTL_CG_NCTRL], v2 = { NULL, NULL };
	char *own_v1[CTL_CG_NCTRL] = { NULL, NULL, NULL, NULL }, *own_v2 = NULL;
	struct orc_buf msg = ORC_BUF_INIT;
	int i;

	memset(v1, 0, sizeof(v1));
	find_mounts(v1, &v2);
	find_own(own_v1, &own_v2);
	for (i = 0; i < CTL_CG_NCTRL; i++) {
		if (v1[i].point && own_v1[i])
			setup_v1(cg, i, &v1[i], own_v1[i], tag);
		else if (v2.point && own_v2)
			setup_v2(cg, i, &v2, own_v2, tag);
		else
			set_why(cg, i, xstrdup("no cgroup hierarchy has this controller"));
		if (!cg->c[i].version) {
			free(cg->c[i].base);
			cg->c[i].base = NULL;
		}
		orc_buf_addf(&msg, "%s%s=%s", i ? " " : "", ctrl_names[i],
			     cg->c[i].version == 2 ? "v2" : cg->c[i].version == 1 ? "v1" : "off");
	}
	orc_log(ctl_cgroups_any(cg) ? ORC_LOG_INFO : ORC_LOG_WARN, "sandbox limits",
		"enforced", orc_buf_cstr(&msg),
		"cpu", cg->c[CTL_CG_CPU].version ? cg->c[CTL_CG_CPU].base : cg->c[CTL_CG_CPU].why,
		"memory", cg->c[CTL_CG_MEMORY].version ? cg->c[CTL_CG_MEMORY].base : cg->c[CTL_CG_MEMORY].why,
		"pids", cg->c[CTL_CG_PIDS].version ? cg->c[CTL_CG_PIDS].base : cg->c[CTL_CG_PIDS].why,
		"freezer", cg->c[CTL_CG_FREEZER].version ? cg->c[CTL_CG_FREEZER].base :
			   cg->c[CTL_CG_FREEZER].why, NULL);
	orc_buf_release(&msg);
	for (i = 0; i < CTL_CG_NCTRL; i++) {
		mnt_release(&v1[i]);
		free(own_v1[i]);
	}
	mnt_release(&v2);
	free(own_v2);
}

/*
 * The bases exist only while they hold sandboxes: our parent cgroup (on
 * this machine a cgroup of whoever started us) cannot be removed while a
 * child is left, even an empty one, and a SIGKILLed controller cleans up
 * nothing.
 */
static int base_make(const struct ctl_cgroups *cg, int i)
{
	char *p;
	int j, e;

	if (mkdir(cg->c[i].base, 0755) == 0) {
		if (cg->c[i].version != 2)
			return 0;
		/* A new v2 base: hand its children every v2 controller. */
		p = xasprintf("%s/cgroup.subtree_control", cg->c[i].base);
		for (j = 0; j < CTL_CG_NCTRL; j++) {
			char en[16];
			if (cg->c[j].version != 2 || j == CTL_CG_FREEZER)
				continue;
			snprintf(en, sizeof(en), "+%s", ctrl_names[j]);
			if ((e = write_text(p, en)) < 0)
				orc_log(ORC_LOG_ERROR, "enabling a cgroup controller failed", "path", p,
					"controller", ctrl_names[j], "error", strerror(-e), NULL);
		}
		free(p);
		return 0;
	}
	if (errno == EEXIST)
		return 0;
	orc_log(ORC_LOG_ERROR, "creating the sandbox cgroups' parent failed", "path", cg->c[i].base,
		"error", strerror(errno), NULL);
	return ORC_ERROR;
}

void ctl_cgroups_tidy(const struct ctl_cgroups *cg)
{
	int i;

	for (i = 0; i < CTL_CG_NCTRL; i++)
		if (cg->c[i].version)
			rmdir(cg->c[i].base);   /* EBUSY while sandboxes are left */
}

void ctl_cgroups_release(struct ctl_cgroups *cg)
{
	int i;

	ctl_cgroups_tidy(cg);
	for (i = 0; i < CTL_CG_NCTRL; i++) {
		free(cg->c[i].base);
		free(cg->c[i].why);
		cg->c[i].base = cg->c[i].why = NULL;
		cg->c[i].version = 0;
	}
}

int ctl_cgroups_any(const struct ctl_cgroups *cg)
{
	int i;

	for (i = 0; i < CTL_CG_NCTRL; i++)
		if (cg->c[i].version)
			return 1;
	return 0;
}

static int strv_has(const struct ctl_strv *s, const char *str)
{
	size_t i;

	for (i = 0; i < s->n; i++)
		if (!strcmp(s->v[i], str))
			return 1;
	return 0;
}

void ctl_cgroup_dirs(struct ctl_strv *dirs, const struct ctl_cgroups *cg, const char *name)
{
	char *d;
	int i;

	for (i = 0; i < CTL_CG_NCTRL; i++) {
		if (!cg->c[i].version)
			continue;
		d = xasprintf("%s/%s", cg->c[i].base, name);
		if (!strv_has(dirs, d))
			ctl_strv_push(dirs, d);
		free(d);
	}
}

/* Write one limit file of dir; optional files may be missing. */
static int set_limit(const char *dir, const char *file, const char *value, int optional)
{
	char *p = xasprintf("%s/%s", dir, file);
	int e = write_text(p, value);

	if (e < 0 && !(optional && (e == -ENOENT || e == -EACCES || e == -EINVAL)))
		orc_log(ORC_LOG_ERROR, "writing a cgroup limit failed", "path", p, "value", value,
			"error", strerror(-e), NULL);
	free(p);
	return e < 0 && !optional ? ORC_ERROR : 0;
}

/* Does dir's cpu.cfs_period_us already read `period`? */
static int period_is(const char *dir, int period)
{
	char path[PATH_MAX], buf[32];
	int64_t v;

	if (snprintf(path, sizeof(path), "%s/cpu.cfs_period_us", dir) >= (int)sizeof(path) ||
	    read_text(buf, sizeof(buf), path) < 0)
		return 0;
	buf[strcspn(buf, "\n")] = '\0';
	return orc_parse_i64(&v, buf, 0, INT64_MAX) == 0 && v == period;
}

static int write_limits(const char *dir, int ctrl, int version, const struct ctl_cg_limits *lim)
{
	char v[64];
	int64_t quota;

	switch (ctrl) {
	case CTL_CG_CPU:
		if (lim->cpu_millis <= 0)
			return 0;
		quota = lim->cpu_millis * (CPU_PERIOD_US / 1000);
		if (quota < CPU_MIN_QUOTA_US)
			quota = CPU_MIN_QUOTA_US;
		if (version == 2) {
			snprintf(v, sizeof(v), "%lld %d", (long long)quota, CPU_PERIOD_US);
			return set_limit(dir, "cpu.max", v, 0);
		}
		/* Each write of a v1 CFS setting walks every task group on the
		 * host (__cfs_schedulable): with a thousand sandboxes that is
		 * worth skipping when a new cgroup already has our period. */
		snprintf(v, sizeof(v), "%d", CPU_PERIOD_US);
		if (!period_is(dir, CPU_PERIOD_US) && set_limit(dir, "cpu.cfs_period_us", v, 0) < 0)
			return ORC_ERROR;
		snprintf(v, sizeof(v), "%lld", (long long)quota);
		return set_limit(dir, "cpu.cfs_quota_us", v, 0);
	case CTL_CG_MEMORY:
		if (lim->memory_bytes <= 0)
			return 0;
		snprintf(v, sizeof(v), "%lld", (long long)lim->memory_bytes);
		if (version == 2)
			return set_limit(dir, "memory.max", v, 0) < 0 ? ORC_ERROR :
				set_limit(dir, "memory.swap.max", "0", 1);
		if (set_limit(dir, "memory.limit_in_bytes", v, 0) < 0)
			return ORC_ERROR;
		/* Memory plus swap at the same value: no swapping past the limit. */
		set_limit(dir, "memory.memsw.limit_in_bytes", v, 1);
		return set_limit(dir, "memory.swappiness", "0", 1);
	case CTL_CG_PIDS:
		if (lim->pids_max <= 0)
			return 0;
		snprintf(v, sizeof(v), "%lld", (long long)lim->pids_max);
		return set_limit(dir, "pids.max", v, 0);
	}
	return 0;
}

int ctl_cgroup_create(struct ctl_strv *dirs, const struct ctl_cgroups *cg, const char *name,
		      const struct ctl_cg_limits *lim)
{
	struct ctl_strv made = CTL_STRV_INIT;
	char *d = NULL;
	int i, err = 0;
	size_t k;

	for (i = 0; i < CTL_CG_NCTRL; i++) {
		if (!cg->c[i].version)
			continue;
		free(d);
		d = xasprintf("%s/%s", cg->c[i].base, name);
		if (!strv_has(&made, d)) {
			if ((err = base_make(cg, i)) < 0)
				goto done;
			if (mkdir(d, 0755) < 0 && errno != EEXIST) {
				orc_log(ORC_LOG_ERROR, "creating a sandbox cgroup failed", "path", d,
					"error", strerror(errno), NULL);
				err = ORC_ERROR;
				goto done;
			}
			ctl_strv_push(&made, d);
		}
		if ((err = write_limits(d, i, cg->c[i].version, lim)) < 0)
			goto done;
	}
	for (k = 0; k < made.n; k++)
		ctl_strv_push(dirs, made.v[k]);
done:
	if (err < 0)
		for (k = 0; k < made.n; k++)
			rmdir(made.v[k]);
	free(d);
	ctl_strv_release(&made);
	return err;
}

/* A sandbox cgroup: ".../orchard-<tag>/<name>" on a cgroup filesystem. */
static int is_sandbox_cgroup(const char *dir, const char *name)
{
	const char *last = strrchr(dir, '/'), *prev;
	struct statfs sf;

	if (dir[0] != '/' || !last || strcmp(last + 1, name) || !orc_is_dns_label(name) ||
	    strstr(dir, "/../") || strstr(dir, "/./") || strstr(dir, "//"))
		return 0;
	for (prev = last - 1; prev > dir && *prev != '/'; prev--)
		;
	if (strncmp(prev, "/" BASE_PREFIX, strlen(BASE_PREFIX) + 1))
		return 0;
	if (statfs(dir, &sf) < 0)
		return errno == ENOENT ? -1 : 0;
	return sf.f_type == CGROUP_SUPER_MAGIC || sf.f_type == CGROUP2_SUPER_MAGIC;
}

/* SIGKILL everything listed in dir/cgroup.procs; the number signalled. */
static int kill_procs(const char *dir)
{
	char *p = xasprintf("%s/cgroup.procs", dir);
	char buf[16384], *s, *end;
	long pid;
	int n = 0;

	if (read_text(buf, sizeof(buf), p) > 0) {
		for (s = buf; *s; s = end) {
			errno = 0;
			pid = strtol(s, &end, 10);
			if (end == s)
				break;
			/* A pid read here belongs to the sandbox; it could only be
			 * reused in the microseconds until kill(), after it died. */
			if (!errno && pid > 1) {
				kill((pid_t)pid, SIGKILL);
				n++;
			}
		}
	}
	free(p);
	return n;
}

static void thaw_dir(const char *dir)
{
	char *p = xasprintf("%s/freezer.state", dir);

	write_text(p, "THAWED");
	free(p);
	p = xasprintf("%s/cgroup.freeze", dir);
	write_text(p, "0");
	free(p);
}

/* 1 when the freezer file of dir says it is frozen, 0 not yet, < 0 error. */
static int freezer_settled(const char *dir, int version, int frozen)
{
	char *p = xasprintf(version == 2 ? "%s/cgroup.events" : "%s/freezer.state", dir);
	char buf[256];
	int n = read_text(buf, sizeof(buf), p), is_frozen;

	free(p);
	if (n < 0)
		return n;
	if (version == 2)
		is_frozen = strstr(buf, "frozen 1") != NULL;
	else
		is_frozen = !strncmp(buf, "FROZEN", 6);
	if (frozen)
		return is_frozen;
	return version == 2 ? !is_frozen : !strncmp(buf, "THAWED", 6);
}

int ctl_cgroup_freeze(const struct ctl_cgroups *cg, const char *name, int frozen, int64_t timeout_ms)
{
	int64_t deadline = orc_mono_ms() + timeout_ms;
	struct timespec ts = { 0, 1000 * 1000 };
	int version = cg->c[CTL_CG_FREEZER].version, e;
	char *dir, *p;

	if (!version)
		return ORC_EUNAVAIL;
	dir = xasprintf("%s/%s", cg->c[CTL_CG_FREEZER].base, name);
	p = xasprintf(version == 2 ? "%s/cgroup.freeze" : "%s/freezer.state", dir);
	e = write_text(p, version == 2 ? (frozen ? "1" : "0") : (frozen ? "FROZEN" : "THAWED"));
	free(p);
	if (e < 0) {
		orc_log(ORC_LOG_WARN, "writing the freezer state failed", "path", dir,
			"error", strerror(-e), NULL);
		free(dir);
		return e == -ENOENT ? ORC_EUNAVAIL : ORC_ERROR;
	}
	for (;;) {
		if ((e = freezer_settled(dir, version, frozen)) != 0)
			break;
		if (orc_mono_ms() >= deadline) {
			orc_log(ORC_LOG_WARN, "the freezer did not settle; thawing", "path", dir, NULL);
			thaw_dir(dir);
			e = ORC_ETIMEOUT;
			break;
		}
		nanosleep(&ts, NULL);
		/* v1 FREEZING may stall on a task in an uninterruptible
		 * sleep; writing FROZEN again retries it. */
		if (frozen && version == 1) {
			p = xasprintf("%s/freezer.state", dir);
			write_text(p, "FROZEN");
			free(p);
		}
	}
	free(dir);
	return e < 0 ? (e == ORC_ETIMEOUT ? e : ORC_ERROR) : 0;
}

int ctl_cgroup_frozen(const struct ctl_cgroups *cg, const char *name)
{
	int version = cg->c[CTL_CG_FREEZER].version, r;
	char *dir;

	if (!version)
		return 0;
	dir = xasprintf("%s/%s", cg->c[CTL_CG_FREEZER].base, name);
	r = freezer_settled(dir, version, 1);
	free(dir);
	return r > 0;
}

int ctl_cgroup_nsessions(const struct ctl_cgroups *cg, const char *name, int limit)
{
	char *p, *end, buf[4096];
	pid_t seen[8];
	int n, count = 0, i;
	struct orc_proc_stat st;
	long pid;

	if (!cg->c[CTL_CG_FREEZER].version)
		return ORC_EUNAVAIL;
	if (limit < 0 || limit >= (int)(sizeof(seen) / sizeof(*seen)))
		return ORC_EINVALID;
	p = xasprintf("%s/%s/cgroup.procs", cg->c[CTL_CG_FREEZER].base, name);
	n = read_text(buf, sizeof(buf), p);
	free(p);
	if (n < 0)
		return ORC_EUNAVAIL;
	/* A full buffer holds more processes than any limit we ask about. */
	if ((size_t)n >= sizeof(buf) - 1)
		return limit + 1;
	for (p = buf; *p && count <= limit; p = end) {
		errno = 0;
		pid = strtol(p, &end, 10);
		if (end == p)
			break;
		if (errno || pid <= 0 || orc_proc_stat(&st, (pid_t)pid) < 0)
			continue;   /* gone since */
		for (i = 0; i < count && seen[i] != st.session; i++)
			;
		if (i == count)
			seen[count++] = st.session;
	}
	return count;
}

int ctl_cgroup_remove(const char *dir, const char *name, int64_t timeout_ms)
{
	int64_t deadline = orc_mono_ms() + timeout_ms;
	struct timespec ts = { 0, 2 * 1000 * 1000 };
	char *kill_file;
	int ok;

	if ((ok = is_sandbox_cgroup(dir, name)) < 0)
		return 0;   /* gone already */
	if (!ok) {
		orc_log(ORC_LOG_ERROR, "refusing to remove a path that is not a sandbox cgroup",
			"path", dir, NULL);
		return ORC_EINVALID;
	}
	/* Frozen processes do not die of SIGKILL until thawed. */
	thaw_dir(dir);
	kill_file = xasprintf("%s/cgroup.kill", dir);   /* v2, Linux 5.14+ */
	write_text(kill_file, "1");
	free(kill_file);
	for (;;) {
		kill_procs(dir);
		if (rmdir(dir) == 0 || errno == ENOENT)
			return 0;
		if (errno != EBUSY || orc_mono_ms() >= deadline) {
			orc_log(ORC_LOG_ERROR, "removing a sandbox cgroup failed", "path", dir,
				"error", strerror(errno), NULL);
			return ORC_ERROR;
		}
		nanosleep(&ts, NULL);
	}
}

void ctl_cgroups_list(const struct ctl_cgroups *cg, ctl_cgroup_list_fn fn, void *arg)
{
	struct ctl_strv seen = CTL_STRV_INIT;
	struct dirent *de;
	DIR *d;
	int i;

	for (i = 0; i < CTL_CG_NCTRL; i++) {
		if (!cg->c[i].version || strv_has(&seen, cg->c[i].base))
			continue;
		ctl_strv_push(&seen, cg->c[i].base);
		if (!(d = opendir(cg->c[i].base)))
			continue;
		while ((de = readdir(d)) != NULL)
			if (de->d_type == DT_DIR && orc_is_dns_label(de->d_name))
				fn(de->d_name, arg);
		closedir(d);
	}
	ctl_strv_release(&seen);
}
