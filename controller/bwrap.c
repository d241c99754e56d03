/*
 * The bubblewrap command line of a local sandbox. Building it is pure
 * string work, done before fork() (STYLE.md, git's run-command).
 */
#include "local.h"

#include <dirent.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "xalloc.h"

void ctl_strv_push(struct ctl_strv *s, const char *str)
{
	if (s->n + 2 > s->alloc) {
		s->alloc = s->alloc ? orc_mul_size(s->alloc, 2) : 64;
		s->v = xrealloc(s->v, orc_mul_size(s->alloc, sizeof(*s->v)));
	}
	s->v[s->n++] = xstrdup(str);
	s->v[s->n] = NULL;
}

void ctl_strv_pushf(struct ctl_strv *s, const char *fmt, ...)
{
	va_list ap;
	char *str = NULL;

	va_start(ap, fmt);
	if (vasprintf(&str, fmt, ap) < 0)
		abort();
	va_end(ap);
	ctl_strv_push(s, str);
	free(str);
}

void ctl_strv_release(struct ctl_strv *s)
{
	size_t i;

	for (i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
	s->v = NULL;
	s->n = s->alloc = 0;
}

/* The image "host": these, read-only, as they exist on the host. */
static const char *const host_dirs[] = {
	"/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32",
};

void ctl_bwrap_host_layout(struct ctl_strv *out)
{
	char target[PATH_MAX];
	struct stat st;
	ssize_t n;
	size_t i;

	for (i = 0; i < sizeof(host_dirs) / sizeof(*host_dirs); i++) {
		if (lstat(host_dirs[i], &st) < 0)
			continue;
		if (S_ISLNK(st.st_mode)) {
			n = readlink(host_dirs[i], target, sizeof(target) - 1);
			if (n <= 0)
				continue;
			target[n] = '\0';
			ctl_strv_push(out, "--symlink");
			ctl_strv_push(out, target);
			ctl_strv_push(out, host_dirs[i]);
		} else if (S_ISDIR(st.st_mode)) {
			ctl_strv_push(out, "--ro-bind");
			ctl_strv_push(out, host_dirs[i]);
			ctl_strv_push(out, host_dirs[i]);
		}
	}
}

#define TOOLS_PROFILE "etc/profile.d/sandbox-tools.sh"
#define TOOLS_PROFILE_NAME "zz-orchard-sandbox-tools.sh"
#define TOOLS_PROFILE_DEST "/etc/profile.d/" TOOLS_PROFILE_NAME

void ctl_bwrap_tools_profile(struct ctl_strv *out, const char *tools)
{
	struct dirent *de;
	DIR *dir = opendir("/etc/profile.d");

	if (!dir)
		return;
	ctl_strv_push(out, "--tmpfs");
	ctl_strv_push(out, "/etc/profile.d");
	while ((de = readdir(dir))) {
		if (de->d_name[0] == '.' || !strcmp(de->d_name, TOOLS_PROFILE_NAME))
			continue;
		ctl_strv_push(out, "--ro-bind");
		ctl_strv_pushf(out, "/etc/profile.d/%s", de->d_name);
		ctl_strv_pushf(out, "/etc/profile.d/%s", de->d_name);
	}
	closedir(dir);
	ctl_strv_push(out, "--ro-bind");
	ctl_strv_pushf(out, "%s/" TOOLS_PROFILE, tools);
	ctl_strv_push(out, TOOLS_PROFILE_DEST);
	ctl_strv_push(out, "--remount-ro");
	ctl_strv_push(out, "/etc/profile.d");
}

/* The bundle and its login-shell hook; for an image, the hook only where
 * the image has /etc/profile.d (its /etc/profile sources it). */
static void push_tools(struct ctl_strv *a, const struct ctl_bwrap_spec *s)
{
	struct stat st;
	char *pd;
	size_t i;

	ctl_strv_push(a, "--ro-bind");
	ctl_strv_push(a, s->tools);
	ctl_strv_push(a, s->tools_mount);
	ctl_strv_push(a, "--setenv");
	ctl_strv_push(a, "SANDBOX_TOOLS");
	ctl_strv_push(a, s->tools_mount);
	if (!s->root) {
		for (i = 0; s->tools_profile && i < s->tools_profile->n; i++)
			ctl_strv_push(a, s->tools_profile->v[i]);
		return;
	}
	pd = xasprintf("%s/etc", s->root);
	if (!lstat(pd, &st) && S_ISDIR(st.st_mode)) {
		free(pd);
		pd = xasprintf("%s/etc/profile.d", s->root);
		if (!lstat(pd, &st) && S_ISDIR(st.st_mode)) {
			ctl_strv_push(a, "--ro-bind");
			ctl_strv_pushf(a, "%s/" TOOLS_PROFILE, s->tools);
			ctl_strv_push(a, TOOLS_PROFILE_DEST);
		}
	}
	free(pd);
}

static void push3(struct ctl_strv *a, const char *x, const char *y, const char *z)
{
	ctl_strv_push(a, x);
	ctl_strv_push(a, y);
	if (z)
		ctl_strv_push(a, z);
}

void ctl_bwrap_argv(struct ctl_strv *a, const struct ctl_bwrap_spec *s)
{
	size_t i;

	ctl_strv_push(a, s->bwrap);
	/* The sandbox dies with bwrap, and bwrap with its parent (the
	 * watchdog, spawn.c). */
	ctl_strv_push(a, "--die-with-parent");
	/* The agent is the pid namespace's init (it reaps orphans and
	 * handles its signals itself: agent/main.c): no bwrap init between,
	 * one process less per sandbox. */
	ctl_strv_push(a, "--as-pid-1");
	/* Namespaces: root inside is the unprivileged sandbox uid outside. */
	ctl_strv_push(a, "--unshare-user");
	ctl_strv_push(a, "--disable-userns");
	push3(a, "--uid", "0", NULL);
	push3(a, "--gid", "0", NULL);
	ctl_strv_push(a, "--unshare-pid");
	ctl_strv_push(a, "--unshare-ipc");
	ctl_strv_push(a, "--unshare-uts");
	ctl_strv_push(a, "--unshare-cgroup-try");
	if (s->block_network)
		ctl_strv_push(a, "--unshare-net");
	push3(a, "--hostname", s->id, NULL);
	ctl_strv_push(a, "--new-session");
	ctl_strv_push(a, "--cap-drop");
	ctl_strv_push(a, "ALL");

	/* Filesystem: the host's system dirs read-only, or an image's root
	 * under the sandbox's private layer; then the private rw dirs. */
	if (s->root) {
		push3(a, "--bind", s->root, "/");
	} else {
		for (i = 0; i < s->layout->n; i++)
			ctl_strv_push(a, s->layout->v[i]);
	}
	push3(a, "--proc", "/proc", NULL);
	push3(a, "--dev", "/dev", NULL);
	ctl_strv_push(a, "--bind");
	ctl_strv_pushf(a, "%s/workspace", s->dir);
	ctl_strv_push(a, "/workspace");
	ctl_strv_push(a, "--bind");
	ctl_strv_pushf(a, "%s/tmp", s->dir);
	ctl_strv_push(a, "/tmp");
	ctl_strv_push(a, "--bind");
	ctl_strv_pushf(a, "%s/run", s->dir);
	ctl_strv_push(a, "/run/orchard");
	/* Its own cgroups, read-only: the agent tells an OOM kill or a
	 * refused fork from their counters (agent/cglimits.c). */
	for (i = 0; s->cgroups && i < s->cgroups->n; i++) {
		ctl_strv_push(a, "--ro-bind");
		ctl_strv_push(a, s->cgroups->v[i]);
		ctl_strv_pushf(a, "/run/orchard/cgroup/%zu", i);
	}
	/* The image may have no libc: its agent is the self-contained bundle. */
	push3(a, "--ro-bind", s->root ? s->agent_bundle : s->agent_bin, "/run/orchard-agent");
	push3(a, "--dir", "/root", NULL);
	if (s->tools)
		push_tools(a, s);
	/* Host layout: nothing else is writable, no unaccounted tmpfs writes.
	 * An image's root is its private layer, writable on purpose. */
	if (!s->root)
		push3(a, "--remount-ro", "/", NULL);

	push3(a, "--setenv", "HOME", "/root");
	ctl_strv_push(a, "--setenv");
	ctl_strv_push(a, "PATH");
	ctl_strv_pushf(a, "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin%s%s%s",
		       s->tools ? ":" : "", s->tools ? s->tools_mount : "", s->tools ? "/bin" : "");
	push3(a, "--chdir", "/workspace", NULL);
	if (s->seccomp_fd >= 0) {
		ctl_strv_push(a, "--seccomp");
		ctl_strv_pushf(a, "%d", s->seccomp_fd);
	}
	ctl_strv_push(a, "--");
	if (s->root) {
		for (i = 0; i < s->agent_cmd->n; i++)
			ctl_strv_push(a, s->agent_cmd->v[i]);
	} else {
		ctl_strv_push(a, "/run/orchard-agent");
	}
	push3(a, "--listen", "unix:/run/orchard/agent.sock", NULL);
	push3(a, "--token-file", "/run/orchard/token", NULL);
}
