#include "server.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "err.h"
#include "log.h"
#include "xalloc.h"

#define LISTEN_BACKLOG 128

/* Remove a stale socket left by an earlier run, but never a file that is
 * something else. */
static int remove_stale_socket(const char *path)
{
	struct stat st;

	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			orc_logf(ORC_LOG_ERROR, "\"%s\" exists and is not a socket", path);
			return ORC_EINVALID;
		}
		unlink(path);
	}
	return 0;
}

/*
 * The socket appears under its name only once it listens: bound as
 * "<path>.new" and renamed. Whoever watches for the name (the local
 * driver, with inotify) can connect at once instead of being refused
 * between bind and listen. A path too long for the suffix is bound as is.
 */
static int listen_unix(int *fd_out, char **path_out, const char *path)
{
	struct sockaddr_un sa;
	char tmp[sizeof(sa.sun_path)];
	int fd, err, staged;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if (!*path || strlen(path) >= sizeof(sa.sun_path)) {
		orc_logf(ORC_LOG_ERROR, "unix socket path \"%s\" is empty or too long", path);
		return ORC_EINVALID;
	}
	staged = (size_t)snprintf(tmp, sizeof(tmp), "%s.new", path) < sizeof(tmp);
	if (!staged)
		memcpy(tmp, path, strlen(path) + 1);
	memcpy(sa.sun_path, tmp, strlen(tmp) + 1);
	if ((err = remove_stale_socket(path)) < 0 || (staged && (err = remove_stale_socket(tmp)) < 0))
		return err;
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		goto fail;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    chmod(tmp, 0666) < 0 || listen(fd, LISTEN_BACKLOG) < 0 ||
	    (staged && rename(tmp, path) < 0)) {
		int e = errno;
		close(fd);
		if (staged)
			unlink(tmp);
		errno = e;
		goto fail;
	}
	*fd_out = fd;
	*path_out = xstrdup(path);
	return 0;
fail:
	orc_logf(ORC_LOG_ERROR, "listen on unix socket \"%s\" failed: %s", path, strerror(errno));
	return ORC_ERROR;
}

static int listen_tcp(int *fd_out, const char *hostport)
{
	struct addrinfo hints, *res = NULL, *ai;
	const char *colon = strrchr(hostport, ':');
	char *host = NULL;
	int fd = -1, one = 1, gai, err = ORC_ERROR;

	if (!colon || colon == hostport || !colon[1]) {
		orc_logf(ORC_LOG_ERROR, "listen address \"tcp:%s\" needs HOST:PORT", hostport);
		return ORC_EINVALID;
	}
	host = xstrndup(hostport, (size_t)(colon - hostport));
	if (host[0] == '[' && host[strlen(host) - 1] == ']') { /* [::1]:7070 */
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = '\0';
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	if ((gai = getaddrinfo(host, colon + 1, &hints, &res)) != 0) {
		orc_logf(ORC_LOG_ERROR, "listen address \"%s\": %s", hostport, gai_strerror(gai));
		err = ORC_EINVALID;
		goto done;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, LISTEN_BACKLOG) == 0)
			break;
		close(fd);
		fd = -1;
	}
	if (fd < 0) {
		orc_logf(ORC_LOG_ERROR, "listen on \"%s\" failed: %s", hostport, strerror(errno));
		goto done;
	}
	*fd_out = fd;
	err = 0;
done:
	if (res)
		freeaddrinfo(res);
	free(host);
	return err;
}

int agent_listen_open(int *fd_out, char **unix_path_out, const char *spec)
{
	*unix_path_out = NULL;
	if (!strncmp(spec, "unix:", 5))
		return listen_unix(fd_out, unix_path_out, spec + 5);
	if (!strncmp(spec, "tcp:", 4))
		return listen_tcp(fd_out, spec + 4);
	orc_logf(ORC_LOG_ERROR, "listen address \"%s\" must be unix:PATH or tcp:HOST:PORT", spec);
	return ORC_EINVALID;
}
