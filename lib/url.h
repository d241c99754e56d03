#ifndef ORC_URL_H
#define ORC_URL_H
/*
 * Percent-encoding (RFC 3986) of a value for a URL: the unreserved
 * characters (A-Z a-z 0-9 - . _ ~) and those in keep stay, every other
 * byte becomes %XX. The api's agent calls keep "/" in the paths they put
 * in a query (api/files.c, api/git.c); the Kubernetes client keeps
 * nothing (controller/k8s_*.c). A fresh string (xalloc: never NULL).
 */
char *orc_url_escape(const char *s, const char *keep);
#endif
