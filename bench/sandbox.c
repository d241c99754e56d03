/* Sandboxes through the documented API, and an agent's address via psql. */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "json.h"
#include "strutil.h"
#include "xalloc.h"

int bench_valid_id(const char *id)
{
	return orc_is_dns_label(id);
}

static int json_str_eq(json_object *o, const char *key, const char *want)
{
	const char *v = NULL;

	return orc_json_get_str(o, key, &v, NULL, 0) == 0 && !strcmp(v, want);
}

int bench_sandbox_create_ready(char *out, size_t outlen, struct bench_http *c,
			       const char *image, long timeout_s)
{
	struct orc_buf body = ORC_BUF_INIT, path = ORC_BUF_INIT;
	json_object *o = NULL;
	const char *id = NULL;
	int err = -1;

	orc_buf_adds(&body, "{\"image\":");
	orc_json_quote(&body, image);
	orc_buf_adds(&body, "}");
	if (bench_http_do(c, "POST", "/v1/sandboxes", body.ptr, 30000) < 0)
		goto done;
	o = bench_http_json(c);
	if (c->status != 200 && c->status != 201) {
		snprintf(c->err, sizeof(c->err), "create: HTTP %ld", c->status);
		goto done;
	}
	if (!o || orc_json_get_str(o, "sandbox_id", &id, NULL, 0) || !bench_valid_id(id)) {
		snprintf(c->err, sizeof(c->err), "create: no sandbox_id in the answer");
		goto done;
	}
	snprintf(out, outlen, "%s", id);
	json_object_put(o);
	o = NULL;
	orc_buf_addf(&path, "/v1/sandboxes/%s/wait?timeout=%ld", out, timeout_s);
	if (bench_http_do(c, "GET", path.ptr, NULL, (timeout_s + 10) * 1000) < 0)
		goto done;
	o = bench_http_json(c);
	if (c->status != 200 || !o || !json_str_eq(o, "status", "ready")) {
		snprintf(c->err, sizeof(c->err), "wait %s: HTTP %ld %.100s", out, c->status,
			 orc_buf_cstr(&c->body));
		goto done;
	}
	err = 0;
done:
	json_object_put(o);
	orc_buf_release(&body);
	orc_buf_release(&path);
	return err;
}

int bench_sandbox_delete(struct bench_http *c, const char *id)
{
	char path[128];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	if (bench_http_do(c, "DELETE", path, NULL, 30000) < 0)
		return -1;
	if (c->status != 200) {
		snprintf(c->err, sizeof(c->err), "delete %s: HTTP %ld", id, c->status);
		return -1;
	}
	return 0;
}

/* Run argv, capture at most outlen-1 bytes of stdout; 0 when it exits 0. */
static int run_capture(char *out, size_t outlen, char *const argv[])
{
	int p[2], status, err = -1;
	size_t len = 0;
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid == 0) {
		dup2(p[1], 1);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	for (;;) {
		ssize_t r = read(p[0], out + len, outlen - 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		len += (size_t)r;
		if (len == outlen - 1)
			break;
	}
	out[len] = '\0';
	close(p[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		err = 0;
	return err;
}

int bench_sandbox_agent(char *addr, size_t addrlen, char *token, size_t toklen,
			const char *database_url, const char *id)
{
	char out[1024], *sep, *nl;
	char *sql, *db;
	int err = -1;

	if (!bench_valid_id(id) || !database_url)
		return -1;
	/* id is a DNS label: nothing in it can break out of the literal. */
	db = xstrdup(database_url);
	sql = xasprintf("SELECT agent_address || '|' || agent_token FROM sandboxes "
			"WHERE id = '%s' AND state = 'ready'", id);
	{
		static char a0[] = "psql", a1[] = "-XAtq", a2[] = "-d", a4[] = "-c";
		char *argv[] = { a0, a1, a2, db, a4, sql, NULL };
		if (run_capture(out, sizeof(out), argv) < 0)
			goto done;
	}
	nl = strchr(out, '\n');
	if (nl)
		*nl = '\0';
	sep = strchr(out, '|');
	if (!sep || strncmp(out, "unix:", 5))
		goto done;
	*sep = '\0';
	if (strlen(out) >= addrlen || strlen(sep + 1) >= toklen || !sep[1])
		goto done;
	snprintf(addr, addrlen, "%s", out);
	snprintf(token, toklen, "%s", sep + 1);
	err = 0;
done:
	free(sql);
	free(db);
	return err;
}
