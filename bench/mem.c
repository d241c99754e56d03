/*
 * Memory of a running stack, from /proc: the process trees of postgres,
 * orchard-api, orchard-controller and nginx (pid files in <var>/run), and of
 * every detached (parent pid 1) or bubblewrap process whose command line
 * names <var>/sandboxes/ (the sandboxes' launchers, hence the agents and
 * whatever runs in them). The watchdogs are the controller's children while
 * it runs, so a sandbox is found through its bwrap, or through a watchdog
 * left to init by a controller that died.
 *
 * RSS counts shared pages (libc, postgres's shared buffers) once per
 * process, so the RSS sum overstates; PSS splits shared pages between their
 * users and sums to the real footprint. RSS is cheap (statm) and sampled
 * often for the peak; PSS (smaps_rollup) is read at chosen moments.
 */
#include "bench.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <unistd.h>

#include "strutil.h"
#include "xalloc.h"

ssize_t bench_read_small(const char *path, char *buf, size_t len)
{
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	do
		n = read(fd, buf, len - 1);
	while (n < 0 && errno == EINTR);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	return n;
}

static long read_pidfile(const char *dir, const char *name)
{
	char path[PATH_MAX + 64], buf[64];
	int64_t v;

	snprintf(path, sizeof(path), "%s/run/%s.pid", dir, name);
	if (bench_read_small(path, buf, sizeof(buf)) < 0)
		return -1;
	buf[strcspn(buf, " \r\n")] = '\0';   /* "<pid> <starttime>" (scripts/stack.sh) */
	if (orc_parse_i64(&v, buf, 1, 1 << 30) < 0)
		return -1;
	return (long)v;
}

/* Does /proc/pid/cmdline contain needle (arguments joined by NULs)? */
static int cmdline_has(long pid, const char *needle)
{
	char path[64], buf[8192];
	ssize_t n, i;

	snprintf(path, sizeof(path), "/proc/%ld/cmdline", pid);
	n = bench_read_small(path, buf, sizeof(buf));
	if (n <= 0)
		return 0;
	for (i = 0; i < n; i++)
		if (!buf[i])
			buf[i] = ' ';
	return strstr(buf, needle) != NULL;
}

static size_t list_procs(struct bench_proc **out)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	struct bench_proc *v = NULL;
	size_t n = 0, alloc = 0;

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		char path[64], buf[512], *p;
		int64_t pid, ppid;
		int bw;

		if (orc_parse_i64(&pid, de->d_name, 1, 1 << 30) < 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
		if (bench_read_small(path, buf, sizeof(buf)) < 0)
			continue;
		/* "pid (comm) S ppid ...": comm may hold spaces and parens. */
		p = strrchr(buf, ')');
		bw = p && (size_t)(p - buf) > 6 && !strncmp(p - 6, "(bwrap", 6);
		if (!p || p[1] != ' ' || !p[2] || p[3] != ' ')
			continue;
		p += 4;
		p[strcspn(p, " ")] = '\0';
		if (orc_parse_i64(&ppid, p, 0, 1 << 30) < 0)
			continue;
		if (n == alloc) {
			alloc = alloc ? alloc * 2 : 1024;
			v = xrealloc(v, orc_mul_size(alloc, sizeof(*v)));
		}
		v[n].pid = (long)pid;
		v[n].ppid = (long)ppid;
		v[n].in = 0;
		v[n].cand = bw || ppid <= 1;
		n++;
	}
	closedir(d);
	*out = v;
	return n;
}

static double rss_mb(long pid)
{
	char path[64], buf[256];
	long long size, res;

	snprintf(path, sizeof(path), "/proc/%ld/statm", pid);
	if (bench_read_small(path, buf, sizeof(buf)) < 0 || sscanf(buf, "%lld %lld", &size, &res) != 2)
		return 0;
	return (double)res * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
}

static double pss_mb(long pid)
{
	char path[64], buf[4096], *p;
	long long kb;

	snprintf(path, sizeof(path), "/proc/%ld/smaps_rollup", pid);
	if (bench_read_small(path, buf, sizeof(buf)) < 0)
		return 0;
	p = strstr(buf, "\nPss:");
	if (!p || sscanf(p + 5, "%lld", &kb) != 1)
		return 0;
	return (double)kb / 1024.0;
}

static int cmp_pid(const void *a, const void *b)
{
	const struct bench_proc *x = a, *y = b;

	return (x->pid > y->pid) - (x->pid < y->pid);
}

size_t bench_stack_procs(struct bench_proc **out, const char *stack_dir)
{
	static const char *const names[] = { "postgres", "api", "controller", "nginx" };
	struct bench_proc *v = NULL;
	char real[PATH_MAX], needle[PATH_MAX + 16];
	long roots[4];
	size_t n, i, k, kept;
	int changed = 1;

	*out = NULL;
	if (!realpath(stack_dir, real))
		return 0;
	snprintf(needle, sizeof(needle), "%s/sandboxes/", real);
	for (k = 0; k < 4; k++)
		roots[k] = read_pidfile(real, names[k]);
	n = list_procs(&v);
	for (i = 0; i < n; i++) {
		for (k = 0; k < 4; k++)
			if (v[i].pid == roots[k])
				v[i].in = BENCH_PROC_POSTGRES + (int)k;
		/* Reading every command line would cost the machine more than
		 * the stack at a few thousand processes: only those of
		 * detached processes (the launchers' roots) and bubblewrap's. */
		if (!v[i].in && v[i].cand && cmdline_has(v[i].pid, needle))
			v[i].in = BENCH_PROC_SANDBOX;
	}
	/* Descendants inherit their parent's mark (a few passes: trees are shallow). */
	qsort(v, n, sizeof(*v), cmp_pid);
	while (changed) {
		changed = 0;
		for (i = 0; i < n; i++) {
			struct bench_proc key = { v[i].ppid, 0, 0, 0 }, *parent;

			if (v[i].in)
				continue;
			parent = bsearch(&key, v, n, sizeof(*v), cmp_pid);
			if (parent && parent->in) {
				v[i].in = parent->in;
				changed = 1;
			}
		}
	}
	for (i = kept = 0; i < n; i++)
		if (v[i].in)
			v[kept++] = v[i];
	*out = v;
	return kept;
}

int bench_mem_sample(struct bench_mem *out, const char *stack_dir, int want_pss)
{
	struct bench_mem m = { 0, 0, 0, 0 };
	struct bench_proc *v = NULL;
	size_t n, i;

	if (!(n = bench_stack_procs(&v, stack_dir)) && !v)
		return -1;
	for (i = 0; i < n; i++) {
		m.procs++;
		if (v[i].in == BENCH_PROC_SANDBOX)
			m.sandbox_procs++;
		m.rss_mb += rss_mb(v[i].pid);
		if (want_pss)
			m.pss_mb += pss_mb(v[i].pid);
	}
	free(v);
	*out = m;
	return 0;
}

/* ---- sampler thread ------------------------------------------------------ */

struct bench_mem_sampler {
	pthread_t tid;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int stop;
	char *dir;
	long interval_ms;
	struct bench_mem peak;
};

static void *sampler_main(void *arg)
{
	struct bench_mem_sampler *s = arg;

	pthread_mutex_lock(&s->lock);
	while (!s->stop) {
		struct bench_mem m;
		struct timespec ts;

		pthread_mutex_unlock(&s->lock);
		if (bench_mem_sample(&m, s->dir, 0) == 0) {
			pthread_mutex_lock(&s->lock);
			if (m.rss_mb > s->peak.rss_mb)
				s->peak.rss_mb = m.rss_mb;
			if (m.procs > s->peak.procs)
				s->peak.procs = m.procs;
			if (m.sandbox_procs > s->peak.sandbox_procs)
				s->peak.sandbox_procs = m.sandbox_procs;
			pthread_mutex_unlock(&s->lock);
		}
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += (s->interval_ms % 1000) * 1000000L;
		ts.tv_sec += s->interval_ms / 1000 + ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		pthread_mutex_lock(&s->lock);
		if (!s->stop)
			pthread_cond_timedwait(&s->cond, &s->lock, &ts);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

struct bench_mem_sampler *bench_mem_sampler_start(const char *stack_dir, long interval_ms)
{
	struct bench_mem_sampler *s = xcalloc(1, sizeof(*s));

	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	s->dir = xstrdup(stack_dir);
	s->interval_ms = interval_ms;
	if (pthread_create(&s->tid, NULL, sampler_main, s)) {
		free(s->dir);
		free(s);
		return NULL;
	}
	return s;
}

void bench_mem_sampler_stop(struct bench_mem_sampler *s, struct bench_mem *peak)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	s->stop = 1;
	pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->tid, NULL);
	*peak = s->peak;
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->cond);
	free(s->dir);
	free(s);
}
