/*
 * Image references (imgref.h): the grammar of Docker's
 * distribution/reference package, by hand, with the reason for a refusal.
 *
 *   reference  := name [ ":" tag ] [ "@" digest ]
 *   name       := [ domain "/" ] component ( "/" component )*
 *   domain     := host [ ":" port ]      host: DNS-ish labels joined by "."
 *   component  := [a-z0-9]+ ( ( "." | "_" | "__" | "-"+ ) [a-z0-9]+ )*
 *   tag        := [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
 *   digest     := "sha256:" [a-f0-9]{64}   (the only algorithm we take)
 *
 * The first component is a domain when it holds a "." or ":", is
 * "localhost", or has an uppercase letter (Docker's rule).
 */
#include "imgref.h"

#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "strutil.h"
#include "xalloc.h"

#define NAME_MAX_LEN 255
#define TAG_MAX_LEN 128
#define DIGEST_HEX 64
#define DEFAULT_DOMAIN "docker.io"
#define LEGACY_DOMAIN "index.docker.io"
#define OFFICIAL_PREFIX "library/"
#define DEFAULT_TAG "latest"

static int is_lower_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static int is_alnum(char c)
{
	return is_lower_alnum(c) || (c >= 'A' && c <= 'Z');
}

/* One path component, s[0..n). */
static int component_valid(const char *s, size_t n)
{
	size_t i = 0, sep;

	if (!n || !is_lower_alnum(s[0]) || !is_lower_alnum(s[n - 1]))
		return 0;
	while (i < n) {
		if (is_lower_alnum(s[i])) {
			i++;
			continue;
		}
		/* a separator run: ".", "_", "__" or "-"+ */
		sep = i;
		if (s[i] == '-') {
			while (i < n && s[i] == '-')
				i++;
		} else if (s[i] == '.') {
			i++;
		} else if (s[i] == '_') {
			i++;
			if (i < n && s[i] == '_')
				i++;
		} else {
			return 0;
		}
		if (i == sep || i >= n || !is_lower_alnum(s[i]))
			return 0;
	}
	return 1;
}

/* host[:port], s[0..n). */
static int domain_valid(const char *s, size_t n)
{
	const char *colon = memchr(s, ':', n);
	size_t host = colon ? (size_t)(colon - s) : n, i, label = 0;

	if (!host)
		return 0;
	for (i = 0; i < host; i++) {
		if (s[i] == '.') {
			if (!label || s[i - 1] == '-')
				return 0;
			label = 0;
		} else if (is_alnum(s[i]) || (s[i] == '-' && label)) {
			label++;
		} else {
			return 0;
		}
	}
	if (!label || s[host - 1] == '-')
		return 0;
	if (colon) {
		size_t plen = n - host - 1;
		unsigned long port = 0;

		if (!plen || plen > 5)
			return 0;
		for (i = host + 1; i < n; i++) {
			if (s[i] < '0' || s[i] > '9')
				return 0;
			port = port * 10 + (unsigned long)(s[i] - '0');
		}
		if (port < 1 || port > 65535)
			return 0;
	}
	return 1;
}

static int tag_valid(const char *s)
{
	size_t i, n = strlen(s);

	if (!n || n > TAG_MAX_LEN || s[0] == '.' || s[0] == '-')
		return 0;
	for (i = 0; i < n; i++)
		if (!is_alnum(s[i]) && s[i] != '_' && s[i] != '.' && s[i] != '-')
			return 0;
	return 1;
}

static int fail(char **why, const char *s, const char *reason)
{
	*why = xasprintf("image \"%.100s\" is not a valid image reference: %s", s, reason);
	return ORC_EINVALID;
}

/* Split name (no tag, no digest) into domain and path, normalised. */
static int split_name(struct orc_imgref *r, char **why, const char *s, const char *name)
{
	const char *slash = strchr(name, '/'), *p, *c;
	int has_domain = 0;

	if (slash) {
		size_t n = (size_t)(slash - name);
		has_domain = memchr(name, '.', n) || memchr(name, ':', n) ||
			     (n == 9 && !memcmp(name, "localhost", 9));
		for (p = name; p < slash && !has_domain; p++)
			has_domain = *p >= 'A' && *p <= 'Z';
		if (has_domain && !domain_valid(name, n))
			return fail(why, s, "the registry must be HOST[:PORT] with a port of 1 to 65535");
	}
	p = has_domain ? slash + 1 : name;
	for (c = p; *c; c++)
		if (*c >= 'A' && *c <= 'Z')
			return fail(why, s, "the repository name must be lowercase");
	for (c = p;; c = slash + 1) {
		slash = strchr(c, '/');
		if (!component_valid(c, slash ? (size_t)(slash - c) : strlen(c)))
			return fail(why, s, "each part of the repository name must be [a-z0-9] words "
				    "joined by '.', '_', '__' or '-'");
		if (!slash)
			break;
	}
	if (!has_domain || ((size_t)(p - 1 - name) == strlen(LEGACY_DOMAIN) &&
			    !memcmp(name, LEGACY_DOMAIN, strlen(LEGACY_DOMAIN))))
		r->domain = xstrdup(DEFAULT_DOMAIN);
	else
		r->domain = xstrndup(name, (size_t)(p - 1 - name));
	if (!strcmp(r->domain, DEFAULT_DOMAIN) && !strchr(p, '/'))
		r->path = xasprintf(OFFICIAL_PREFIX "%s", p);
	else
		r->path = xstrdup(p);
	return 0;
}

int orc_imgref_parse(struct orc_imgref *out, char **why, const char *s)
{
	struct orc_imgref r = ORC_IMGREF_INIT;
	char *name = NULL, *at, *colon, *slash;
	size_t n = strlen(s), i;
	int err = ORC_EINVALID;

	if (!n)
		return fail(why, s, "it is empty");
	if (n > ORC_IMGREF_MAX)
		return fail(why, s, "it is longer than 512 characters");
	for (i = 0; i < n; i++)
		if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] >= 0x7f)
			return fail(why, s, "it may hold only printable ASCII without spaces");
	if (n == DIGEST_HEX && orc_is_lower_hex(s, n))
		return fail(why, s, "a bare 64-hex-digit name is an image id, not a reference");
	name = xstrdup(s);
	if ((at = strchr(name, '@')) != NULL) {
		*at++ = '\0';
		if (strncmp(at, "sha256:", 7) || strlen(at + 7) != DIGEST_HEX ||
		    !orc_is_lower_hex(at + 7, DIGEST_HEX)) {
			err = fail(why, s, "the digest must be sha256: and 64 lowercase hex digits");
			goto done;
		}
		r.digest = xstrdup(at);
	}
	colon = strrchr(name, ':');
	slash = strrchr(name, '/');
	if (colon && (!slash || colon > slash)) {
		*colon++ = '\0';
		if (!tag_valid(colon)) {
			err = fail(why, s, "the tag must be [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}");
			goto done;
		}
		r.tag = xstrdup(colon);
	}
	if (!*name) {
		err = fail(why, s, "the repository name is missing");
		goto done;
	}
	if ((err = split_name(&r, why, s, name)) < 0)
		goto done;
	/* Docker bounds the normalised name, registry and library/ included */
	if (strlen(r.domain) + 1 + strlen(r.path) > NAME_MAX_LEN) {
		err = fail(why, s, "the name with its registry is longer than 255 characters");
		goto done;
	}
	if (!r.tag && !r.digest)
		r.tag = xstrdup(DEFAULT_TAG);
	*out = r;
	memset(&r, 0, sizeof(r));
	err = 0;
done:
	orc_imgref_release(&r);
	free(name);
	return err;
}

char *orc_imgref_repo(const struct orc_imgref *r)
{
	return xasprintf("%s/%s", r->domain, r->path);
}

char *orc_imgref_string(const struct orc_imgref *r)
{
	return xasprintf("%s/%s%s%s%s%s", r->domain, r->path, r->tag ? ":" : "", r->tag ? r->tag : "",
			 r->digest ? "@" : "", r->digest ? r->digest : "");
}

void orc_imgref_release(struct orc_imgref *r)
{
	free(r->domain);
	free(r->path);
	free(r->tag);
	free(r->digest);
	memset(r, 0, sizeof(*r));
}
