#include "command.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xalloc.h"

extern char **environ;

/* Reads the script from fd 3 into a variable and evals it, so that it runs
 * in the shell started by `bash -c` itself. `read -d ''` on a file is a
 * buffered read in bash 5, and the variable is gone before the script runs. */
static const char script_from_fd3[] =
	"IFS= read -r -d '' __orchard_script <&3; exec 3<&-; "
	"eval \"unset __orchard_script;$__orchard_script\"";

/* Prefix for login shells: ~/.bashrc when no login file will source it. */
static const char bashrc_fallback[] =
	"if [ ! -e ~/.bash_profile ] && [ ! -e ~/.bash_login ] && [ ! -e ~/.profile ]"
	" && [ -r ~/.bashrc ]; then . ~/.bashrc; fi; ";

static const char *const job_control_warnings[] = {
	"bash: cannot set terminal process group (",
	"bash: no job control in this shell\n",
};

static const char *find_bash(void)
{
	static const char *const candidates[] = { "/bin/bash", "/usr/bin/bash" };
	size_t i;

	for (i = 0; i < sizeof(candidates) / sizeof(*candidates); i++)
		if (access(candidates[i], X_OK) == 0)
			return candidates[i];
	return NULL;
}

static char **strv_new(size_t n)
{
	return xcalloc(orc_add_size(n, 1), sizeof(char *));
}

void agent_command_shell(struct agent_command *c, const char *cmd, size_t len, int login_shell)
{
	const char *bash = find_bash();
	const char *body = cmd;
	char *text;
	size_t i = 0;

	c->argv = strv_new(5);
	if (len > AGENT_SCRIPT_INLINE_MAX) {
		c->script = cmd;
		c->script_len = len;
		body = bash ? script_from_fd3 : NULL;
	}
	if (bash) {
		c->path = xstrdup(bash);
		c->argv[i++] = xstrdup("bash");
		if (login_shell) {
			c->argv[i++] = xstrdup("--login");
			c->argv[i++] = xstrdup("-i");
			c->login_shell = 1;
		}
		c->argv[i++] = xstrdup("-c");
		text = login_shell ? xasprintf("%s%s", bashrc_fallback, body) : xstrdup(body);
		c->argv[i++] = text;
		return;
	}
	/* No bash: POSIX sh. A long script is run as a script file on fd 3
	 * (needs /dev/fd; sh has no buffered `read -d`). */
	c->path = xstrdup("/bin/sh");
	c->argv[i++] = xstrdup("sh");
	if (login_shell)
		c->argv[i++] = xstrdup("-l");
	if (body) {
		c->argv[i++] = xstrdup("-c");
		c->argv[i++] = xstrdup(body);
	} else {
		c->argv[i++] = xstrdup("/dev/fd/3");
	}
}

void agent_command_pty(struct agent_command *c, const char *const *args, size_t n, int login_shell)
{
	const char *bash = find_bash();
	const char *shell = bash ? bash : "/bin/sh";
	const char *name = bash ? "bash" : "sh";
	size_t i = 0, k;

	if (n && login_shell <= 0) {
		agent_command_argv(c, args, n);
		return;
	}
	c->path = xstrdup(shell);
	c->argv = strv_new(orc_add_size(n, 5));
	c->argv[i++] = xstrdup(name);
	if (login_shell != 0)
		c->argv[i++] = xstrdup("-l");
	if (n) {
		c->argv[i++] = xstrdup("-c");
		c->argv[i++] = xstrdup("exec \"$@\"");
		c->argv[i++] = xstrdup(name);
		for (k = 0; k < n; k++)
			c->argv[i++] = xstrdup(args[k]);
	}
}

void agent_command_argv(struct agent_command *c, const char *const *args, size_t n)
{
	size_t i;

	c->argv = strv_new(n);
	for (i = 0; i < n; i++)
		c->argv[i] = xstrdup(args[i]);
}

static int overridden(const char *entry, const char *const *keys, size_t n)
{
	size_t i, klen;

	for (i = 0; i < n; i++) {
		klen = strlen(keys[i]);
		if (!strncmp(entry, keys[i], klen) && entry[klen] == '=')
			return 1;
	}
	return 0;
}

void agent_command_env(struct agent_command *c, const char *const *keys,
		       const char *const *vals, size_t n)
{
	size_t count = 0, i, j = 0;
	const char *shell;
	char **e;

	for (e = environ; e && *e; e++)
		count++;
	c->envp = strv_new(orc_add_size(orc_add_size(count, n), 1));
	for (e = environ; e && *e; e++) {
		if (!strncmp(*e, "ORCHARD_", 8) || !strchr(*e, '=') || overridden(*e, keys, n))
			continue;
		c->envp[j++] = xstrdup(*e);
	}
	for (i = 0; i < n; i++)
		c->envp[j++] = xasprintf("%s=%s", keys[i], vals[i]);
	/* SHELL, as a login session sets it, unless the sandbox or the job
	 * does: the shell commands run in. Without it bash looks the user's
	 * shell up in the password database (NSS: nsswitch.conf, /etc/passwd)
	 * at every start, about 5 % of a `bash -c true` (bench/README.md).
	 * A shell command's path is that shell already. */
	if (!getenv("SHELL") && !overridden("SHELL=", keys, n)) {
		shell = c->path ? c->path : find_bash();
		c->envp[j++] = xasprintf("SHELL=%s", shell ? shell : "/bin/sh");
	}
}

void agent_command_spec(struct agent_exec_spec *spec, const struct agent_command *c)
{
	spec->path = c->path;
	spec->argv = c->argv;
	spec->envp = c->envp;
	spec->fd3_data = c->script;
	spec->fd3_len = c->script_len;
}

/* Drop `prefix...\n` from the start of b; returns the bytes removed. */
static size_t strip_line(struct orc_buf *b, const char *prefix)
{
	size_t plen = strlen(prefix);
	const char *nl;
	size_t n;

	if (b->len < plen || memcmp(b->ptr, prefix, plen))
		return 0;
	nl = memchr(b->ptr, '\n', b->len);
	if (!nl)
		return 0;
	n = (size_t)(nl - b->ptr) + 1;
	memmove(b->ptr, b->ptr + n, b->len - n + 1);
	b->len -= n;
	return n;
}

void agent_command_fixup_result(const struct agent_command *c, struct agent_exec_result *r)
{
	size_t i, n;

	if (!c->login_shell)
		return;
	for (i = 0; i < sizeof(job_control_warnings) / sizeof(*job_control_warnings); i++) {
		n = strip_line(&r->err, job_control_warnings[i]);
		r->err_bytes -= n < r->err_bytes ? n : r->err_bytes;
	}
}

int agent_command_match_warning(const char *data, size_t n, size_t *line_len)
{
	const char *nl;
	size_t i, plen;
	int maybe = 0;

	for (i = 0; i < sizeof(job_control_warnings) / sizeof(*job_control_warnings); i++) {
		plen = strlen(job_control_warnings[i]);
		if (memcmp(data, job_control_warnings[i], n < plen ? n : plen))
			continue;
		if (n < plen) {
			maybe = 1;
			continue;
		}
		if (!(nl = memchr(data, '\n', n))) {
			maybe = 1;
			continue;
		}
		*line_len = (size_t)(nl - data) + 1;
		return 1;
	}
	return maybe ? -1 : 0;
}

static void strv_free(char **v)
{
	char **p;

	for (p = v; p && *p; p++)
		free(*p);
	free(v);
}

void agent_command_release(struct agent_command *c)
{
	free(c->path);
	strv_free(c->argv);
	strv_free(c->envp);
	c->path = NULL;
	c->argv = NULL;
	c->envp = NULL;
	c->script = NULL;
}
