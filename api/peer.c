/*
 * Who may speak FastCGI to the api.
 *
 * nginx sends trusted parameters (ORCHARD_TENANT, ORCHARD_ROLE, the agent
 * address of /_auth_agent) over the api's unix sockets: whoever can connect
 * to them is as good as an admin. Two fences, both configured by the
 * environment (docs/architecture.md, "nginx ↔ orchard-api"):
 *
 *   ORCHARD_API_SOCKET_GROUP  the sockets' group (a name or a gid); with it
 *                             the sockets are 0660, without it 0600
 *   ORCHARD_API_SOCKET_MODE   an octal mode instead (k8s and compose share
 *                             the socket through a volume private to the
 *                             pod, where uids, not groups, tell apart)
 *   ORCHARD_API_PEER_UIDS     users (names or uids, comma-separated) whose
 *                             connections are served, besides root and the
 *                             api's own user (SO_PEERCRED); unset: any
 *                             process that can open the socket
 */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api.h"
#include "err.h"
#include "log.h"
#include "strutil.h"

#define MAX_PEERS 16

static uid_t peers[MAX_PEERS];
static int npeers = -1;        /* -1: no check */
static gid_t sock_gid = (gid_t)-1;
static mode_t sock_mode = 0600;

static int parse_uid(uid_t *out, const char *name)
{
	struct passwd *pw;
	int64_t n;

	if (orc_parse_i64(&n, name, 0, (int64_t)UINT32_MAX - 1) == 0) {
		*out = (uid_t)n;
		return 0;
	}
	if (!(pw = getpwnam(name)))
		return ORC_EINVALID;
	*out = pw->pw_uid;
	return 0;
}

static int parse_peers(const char *v)
{
	char item[64];
	const char *p = v, *end;
	size_t n;

	npeers = 0;
	while (*p) {
		end = strchr(p, ',');
		n = end ? (size_t)(end - p) : strlen(p);
		if (n == 0 || n >= sizeof(item) || npeers == MAX_PEERS) {
			orc_logf(ORC_LOG_ERROR, "ORCHARD_API_PEER_UIDS=\"%s\": at most %d "
				 "comma-separated users", v, MAX_PEERS);
			return ORC_EINVALID;
		}
		memcpy(item, p, n);
		item[n] = '\0';
		if (parse_uid(&peers[npeers], item) < 0) {
			orc_logf(ORC_LOG_ERROR, "ORCHARD_API_PEER_UIDS: no user \"%s\"", item);
			return ORC_EINVALID;
		}
		npeers++;
		p += n + (end ? 1 : 0);
	}
	return 0;
}

static int parse_group(const char *v)
{
	struct group *gr;
	int64_t n;

	if (orc_parse_i64(&n, v, 0, (int64_t)UINT32_MAX - 1) == 0) {
		sock_gid = (gid_t)n;
	} else if ((gr = getgrnam(v))) {
		sock_gid = gr->gr_gid;
	} else {
		orc_logf(ORC_LOG_ERROR, "ORCHARD_API_SOCKET_GROUP: no group \"%s\"", v);
		return ORC_EINVALID;
	}
	sock_mode = 0660;
	return 0;
}

static int parse_mode(const char *v)
{
	char *end;
	long m;

	errno = 0;
	m = strtol(v, &end, 8);
	if (errno || end == v || *end || m < 0 || m > 0777) {
		orc_logf(ORC_LOG_ERROR, "ORCHARD_API_SOCKET_MODE=\"%s\" is not an octal mode", v);
		return ORC_EINVALID;
	}
	sock_mode = (mode_t)m;
	return 0;
}

int api_peer_init(void)
{
	const char *v;
	int err;

	if ((v = getenv("ORCHARD_API_SOCKET_GROUP")) && *v && (err = parse_group(v)) < 0)
		return err;
	if ((v = getenv("ORCHARD_API_SOCKET_MODE")) && *v && (err = parse_mode(v)) < 0)
		return err;
	if ((v = getenv("ORCHARD_API_PEER_UIDS")) && *v && (err = parse_peers(v)) < 0)
		return err;
	if (npeers < 0)
		orc_log(ORC_LOG_WARN, "ORCHARD_API_PEER_UIDS is not set: every process that can "
			"open the api's sockets is trusted", NULL);
	return 0;
}

int api_peer_secure_socket(const char *path)
{
	if (sock_gid != (gid_t)-1 && chown(path, (uid_t)-1, sock_gid) < 0) {
		orc_logf(ORC_LOG_ERROR, "chown() \"%s\" failed: %s", path, strerror(errno));
		return ORC_ERROR;
	}
	if (chmod(path, sock_mode) < 0) {
		orc_logf(ORC_LOG_ERROR, "chmod() \"%s\" failed: %s", path, strerror(errno));
		return ORC_ERROR;
	}
	return 0;
}

int api_peer_allowed(int fd)
{
	struct sockaddr_storage sa;
	struct ucred cred;
	socklen_t len = sizeof(sa);
	int i;

	if (npeers < 0)
		return 1;
	/* A TCP listener (host:port) has no peer credentials. */
	if (getsockname(fd, (struct sockaddr *)&sa, &len) == 0 && sa.ss_family != AF_UNIX)
		return 1;
	len = sizeof(cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
		orc_logf(ORC_LOG_WARN, "getsockopt(SO_PEERCRED) failed: %s", strerror(errno));
		return 0;
	}
	if (cred.uid == 0 || cred.uid == geteuid())
		return 1;
	for (i = 0; i < npeers; i++)
		if (cred.uid == peers[i])
			return 1;
	orc_log(ORC_LOG_WARN, "refused a FastCGI connection: not nginx's user (ORCHARD_API_PEER_UIDS)",
		ORC_LOG_INT("uid", cred.uid), ORC_LOG_INT("pid", cred.pid), NULL);
	return 0;
}
