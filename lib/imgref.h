#ifndef ORC_IMGREF_H
#define ORC_IMGREF_H
/*
 * Image references as Docker and the OCI distribution spec write them.
 * The one parser for issue 27: the api's create validation, the local
 * driver's pull on first use and orchard-admin image pull are to share it
 * (not wired in yet; docs/images.md "Limits and gaps"):
 *
 *   [DOMAIN[:PORT]/]PATH[:TAG][@sha256:<64 hex>]
 *
 * normalised the way Docker does: no domain means docker.io (and
 * index.docker.io is docker.io), a one-component path on docker.io gets
 * library/, and neither tag nor digest means the tag latest. So
 * "python:3.11-slim" is docker.io/library/python:3.11-slim.
 */
#include <stddef.h>

/* The longest reference accepted at all (name 255, tag 128, digest 71). */
#define ORC_IMGREF_MAX 512

struct orc_imgref {
	char *domain;   /* "docker.io", "127.0.0.1:5000" */
	char *path;     /* "library/python", "team/img" */
	char *tag;      /* "3.11-slim"; "latest" when neither was given; NULL
			 * when only a digest was */
	char *digest;   /* "sha256:<64 lowercase hex>", or NULL */
};

#define ORC_IMGREF_INIT { NULL, NULL, NULL, NULL }

/*
 * Parse and normalise s. 0 and *out filled (fresh strings), or
 * ORC_EINVALID with *why a message naming what is wrong (fresh string)
 * and *out untouched.
 */
int orc_imgref_parse(struct orc_imgref *out, char **why, const char *s);

/* "DOMAIN/PATH" (what skopeo and the registry call the repository). */
char *orc_imgref_repo(const struct orc_imgref *r);
/* The normalised reference: DOMAIN/PATH[:TAG][@DIGEST]. Fresh string. */
char *orc_imgref_string(const struct orc_imgref *r);
/* Free the contents; the struct is zeroed, releasing twice is harmless. */
void orc_imgref_release(struct orc_imgref *r);
#endif
