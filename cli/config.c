/*
 * The config file: named contexts (server URL, API key, CA file) like a
 * kubeconfig, in JSON:
 *
 *   {
 *     "current-context": "dev",
 *     "contexts": {
 *       "dev": { "url": "https://127.0.0.1:8443", "api-key": "orch_...",
 *                "cacert": "/home/me/orchard/var/tls/ca.crt" }
 *     }
 *   }
 *
 * It holds API keys, so (like ssh) a file that others could read is refused,
 * and it is only ever written 0600 through a temporary file and a rename.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "err.h"
#include "io.h"
#include "json.h"
#include "xalloc.h"

#define CONFIG_MAX ((size_t)256 << 10)
#define CONTEXT_NAME_MAX 64

int cli_config_path(char **out)
{
	const char *p = getenv("ORCHARD_CONFIG"), *home;
	struct passwd *pw;

	if (p && *p) {
		*out = xstrdup(p);
		return 0;
	}
	if ((p = getenv("XDG_CONFIG_HOME")) && *p == '/') {
		*out = xasprintf("%s/orchard/config", p);
		return 0;
	}
	home = getenv("HOME");
	if ((!home || !*home) && (pw = getpwuid(getuid())) != NULL)
		home = pw->pw_dir;
	if (!home || !*home) {
		cli_error("cannot find the config file: HOME is not set (set ORCHARD_CONFIG)");
		return ORC_ERROR;
	}
	*out = xasprintf("%s/.config/orchard/config", home);
	return 0;
}

int cli_context_name_ok(const char *name)
{
	size_t n = strlen(name), i;

	if (n == 0 || n > CONTEXT_NAME_MAX)
		return 0;
	for (i = 0; i < n; i++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", name[i]))
			return 0;
	return 1;
}

int cli_api_key_ok(const char *key)
{
	size_t n = strlen(key), i;

	if (n == 0 || n > 1024)
		return 0;
	for (i = 0; i < n; i++)
		if ((unsigned char)key[i] <= 0x20 || (unsigned char)key[i] >= 0x7f)
			return 0;
	return 1;
}

/* Every context is an object of string fields; current-context a string. */
static int config_validate(json_object *file, char *msg, size_t msglen)
{
	json_object *v;

	if (!json_object_is_type(file, json_type_object)) {
		snprintf(msg, msglen, "not a JSON object");
		return ORC_EINVALID;
	}
	if (json_object_object_get_ex(file, "current-context", &v) && v &&
	    !json_object_is_type(v, json_type_string)) {
		snprintf(msg, msglen, "\"current-context\" is not a string");
		return ORC_EINVALID;
	}
	if (!json_object_object_get_ex(file, "contexts", &v) || !v)
		return 0;
	if (!json_object_is_type(v, json_type_object)) {
		snprintf(msg, msglen, "\"contexts\" is not an object");
		return ORC_EINVALID;
	}
	json_object_object_foreach(v, name, ctx) {
		if (!cli_context_name_ok(name) || !ctx || !json_object_is_type(ctx, json_type_object)) {
			snprintf(msg, msglen, "context \"%.64s\" is not a valid name with an object", name);
			return ORC_EINVALID;
		}
		json_object_object_foreach(ctx, key, val) {
			if (val && !json_object_is_type(val, json_type_string)) {
				snprintf(msg, msglen, "context \"%s\": \"%.64s\" is not a string", name, key);
				return ORC_EINVALID;
			}
		}
	}
	return 0;
}

static int read_all(struct orc_buf *b, int fd, const char *path)
{
	char chunk[8192];
	ssize_t n;

	for (;;) {
		n = read(fd, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			cli_error("read() \"%s\" failed: %s", path, strerror(errno));
			return ORC_ERROR;
		}
		if (n == 0)
			return 0;
		if (orc_buf_add(b, chunk, (size_t)n) < 0) {
			cli_error("config file \"%s\" is larger than %zu bytes", path, CONFIG_MAX);
			return ORC_ETOOBIG;
		}
	}
}

int cli_config_load(json_object **out, const char *path)
{
	struct orc_buf b = ORC_BUF_INIT;
	json_object *file = NULL;
	char msg[256];
	struct stat st;
	int fd, err;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY)) < 0) {
		if (errno == ENOENT || errno == ENOTDIR) {
			*out = json_object_new_object();
			return 0;
		}
		cli_error("open() \"%s\" failed: %s", path, strerror(errno));
		return ORC_ERROR;
	}
	err = ORC_EFORBIDDEN;
	if (fstat(fd, &st) < 0) {
		cli_error("fstat() \"%s\" failed: %s", path, strerror(errno));
		err = ORC_ERROR;
		goto done;
	}
	if (!S_ISREG(st.st_mode)) {
		cli_error("config file \"%s\" is not a regular file", path);
		goto done;
	}
	if (st.st_mode & 077) {
		cli_error("config file \"%s\" is accessible by others (mode %04o) and holds API keys; "
			  "refusing to use it. Run: chmod 600 '%s'", path, (unsigned)(st.st_mode & 07777), path);
		goto done;
	}
	if (st.st_uid != getuid() && st.st_uid != 0) {
		cli_error("config file \"%s\" belongs to uid %u, not to you (uid %u); refusing to use it",
			  path, (unsigned)st.st_uid, (unsigned)getuid());
		goto done;
	}
	orc_buf_init(&b, CONFIG_MAX);
	if ((err = read_all(&b, fd, path)) < 0)
		goto done;
	if (b.len == 0) {
		file = json_object_new_object();
	} else if ((err = orc_json_parse(&file, b.ptr, b.len, msg, sizeof(msg))) < 0 ||
		   (err = config_validate(file, msg, sizeof(msg))) < 0) {
		cli_error("config file \"%s\" is not valid: %s (fix it, or move it away and use "
			  "`orchardctl config set-context`)", path, msg);
		goto done;
	}
	*out = file;
	file = NULL;
	err = 0;
done:
	if (file)
		json_object_put(file);
	orc_buf_release(&b);
	close(fd);
	return err;
}

/* mkdir -p the directories above path; the ones created are 0700. */
static int make_parents(const char *path)
{
	char *dir = xstrdup(path), *p;
	int err = 0;

	for (p = dir + 1; (p = strchr(p, '/')) != NULL; p++) {
		*p = '\0';
		if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
			cli_error("mkdir() \"%s\" failed: %s", dir, strerror(errno));
			err = ORC_ERROR;
			break;
		}
		*p = '/';
	}
	free(dir);
	return err;
}

int cli_config_save(const char *path, json_object *file)
{
	char real[PATH_MAX], *tmp = NULL, *dir = NULL, *slash;
	const char *target = path, *text;
	struct stat st;
	int fd = -1, dfd, err = ORC_ERROR;

	/* A symlinked config (a dotfiles repository) is updated where it points. */
	if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode) && realpath(path, real))
		target = real;
	if ((err = make_parents(target)) < 0)
		return err;
	err = ORC_ERROR;
	tmp = xasprintf("%s.tmp.%ld", target, (long)getpid());
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600)) < 0) {
		cli_error("open() \"%s\" failed: %s", tmp, strerror(errno));
		goto done;
	}
	text = json_object_to_json_string_ext(file, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
					      JSON_C_TO_STRING_NOSLASHESCAPE);
	if (fchmod(fd, 0600) < 0 || orc_write_all(fd, text, strlen(text)) < 0 || orc_write_all(fd, "\n", 1) < 0 ||
	    fsync(fd) < 0) {
		cli_error("writing \"%s\" failed: %s", tmp, strerror(errno));
		goto done;
	}
	if (close(fd) < 0) {
		fd = -1;
		cli_error("close() \"%s\" failed: %s", tmp, strerror(errno));
		goto done;
	}
	fd = -1;
	if (rename(tmp, target) < 0) {
		cli_error("rename() \"%s\" to \"%s\" failed: %s", tmp, target, strerror(errno));
		goto done;
	}
	free(tmp);
	tmp = NULL;
	dir = xstrdup(target);
	slash = strrchr(dir, '/');
	if (slash)
		*(slash == dir ? slash + 1 : slash) = '\0';
	if ((dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
		(void)fsync(dfd);
		close(dfd);
	}
	err = 0;
done:
	if (fd >= 0)
		close(fd);
	if (tmp) {
		unlink(tmp);
		free(tmp);
	}
	free(dir);
	return err;
}

json_object *cli_config_context(json_object *file, const char *name)
{
	json_object *contexts, *ctx;

	if (!file || !name || !json_object_object_get_ex(file, "contexts", &contexts) || !contexts ||
	    !json_object_object_get_ex(contexts, name, &ctx) || !json_object_is_type(ctx, json_type_object))
		return NULL;
	return ctx;
}

const char *cli_config_current(json_object *file)
{
	json_object *v;

	if (!file || !json_object_object_get_ex(file, "current-context", &v) ||
	    !json_object_is_type(v, json_type_string) || !*json_object_get_string(v))
		return NULL;
	return json_object_get_string(v);
}

void cli_mask_key(char *out, size_t outlen, const char *key)
{
	const char *a = strchr(key, '_'), *b = a ? strchr(a + 1, '_') : NULL;

	if (!*key)
		snprintf(out, outlen, "%s", "");
	else if (a && b && b - a - 1 == 12 && a - key <= 16 && b[1])
		snprintf(out, outlen, "%.*s****", (int)(b - key + 1), key);
	else
		snprintf(out, outlen, "****");
}
