/*
 * lib/imgref.c: image references on create, normalised as Docker does,
 * and the reason a bad one is refused.
 */
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "imgref.h"
#include "unit.h"

#define HEX64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static void check_norm(const char *in, const char *want)
{
	struct orc_imgref r = ORC_IMGREF_INIT;
	char *why = NULL, *s;

	if (orc_imgref_parse(&r, &why, in) < 0) {
		fprintf(stderr, "    \"%s\" refused: %s\n", in, why);
		unit_failures++;
		free(why);
		return;
	}
	s = orc_imgref_string(&r);
	CHECK_STR(s, want);
	free(s);
	orc_imgref_release(&r);
	orc_imgref_release(&r);
}

static void check_bad(const char *in, const char *reason_part)
{
	struct orc_imgref r = ORC_IMGREF_INIT;
	char *why = NULL;

	CHECK(orc_imgref_parse(&r, &why, in) == ORC_EINVALID);
	CHECK(r.domain == NULL && r.path == NULL);
	if (!why || !strstr(why, reason_part)) {
		fprintf(stderr, "    \"%s\": reason \"%s\" lacks \"%s\"\n", in, why ? why : "(null)",
			reason_part);
		unit_failures++;
	}
	free(why);
}

static void imgref_normalises_like_docker(void)
{
	check_norm("python", "docker.io/library/python:latest");
	check_norm("python:3.11-slim", "docker.io/library/python:3.11-slim");
	check_norm("docker.io/library/python:3.11-slim", "docker.io/library/python:3.11-slim");
	check_norm("docker.io/python", "docker.io/library/python:latest");
	check_norm("index.docker.io/python:3", "docker.io/library/python:3");
	check_norm("swebench/sweb.eval.x86_64.django__django-11099:latest",
		   "docker.io/swebench/sweb.eval.x86_64.django__django-11099:latest");
	check_norm("127.0.0.1:5000/team/img:tag", "127.0.0.1:5000/team/img:tag");
	check_norm("localhost/img", "localhost/img:latest");
	check_norm("localhost:5000/img", "localhost:5000/img:latest");
	check_norm("ghcr.io/a/b/c:v1.2_3", "ghcr.io/a/b/c:v1.2_3");
	check_norm("busybox@sha256:" HEX64, "docker.io/library/busybox@sha256:" HEX64);
	check_norm("busybox:1@sha256:" HEX64, "docker.io/library/busybox:1@sha256:" HEX64);
	check_norm("127.0.0.1:5000/x@sha256:" HEX64, "127.0.0.1:5000/x@sha256:" HEX64);
	/* today's local names are references too */
	check_norm("bb-1.0_x", "docker.io/library/bb-1.0_x:latest");
}

static void imgref_parts(void)
{
	struct orc_imgref r = ORC_IMGREF_INIT;
	char *why = NULL, *repo;

	CHECK(orc_imgref_parse(&r, &why, "127.0.0.1:5000/team/img@sha256:" HEX64) == 0);
	CHECK_STR(r.domain, "127.0.0.1:5000");
	CHECK_STR(r.path, "team/img");
	CHECK(r.tag == NULL);
	CHECK_STR(r.digest, "sha256:" HEX64);
	repo = orc_imgref_repo(&r);
	CHECK_STR(repo, "127.0.0.1:5000/team/img");
	free(repo);
	orc_imgref_release(&r);
}

static void imgref_refuses_with_a_reason(void)
{
	check_bad("", "empty");
	check_bad("Python", "lowercase");
	check_bad("docker.io/Library/python", "lowercase");
	check_bad("py thon", "printable ASCII");
	check_bad("python:", "tag");
	check_bad("python:-x", "tag");
	check_bad("python:a/b", "HOST[:PORT]");
	check_bad("python@sha256:abc", "digest");
	check_bad("python@md5:" HEX64, "digest");
	check_bad("python@sha256:" HEX64 "0", "digest");
	check_bad("python@sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
		  "digest");
	check_bad(HEX64, "image id");
	check_bad("a..b", "[a-z0-9] words");
	check_bad("a___b", "[a-z0-9] words");
	check_bad("-a", "[a-z0-9] words");
	check_bad("a/", "[a-z0-9] words");
	check_bad("/a", "[a-z0-9] words");
	check_bad("a//b", "[a-z0-9] words");
	check_bad("example.com/", "[a-z0-9] words");
	check_bad("host:0/a", "port");
	check_bad("host:65536/a", "port");
	check_bad("-host.com/a", "HOST[:PORT]");
	check_bad("[::1]:5000/a", "HOST[:PORT]");
	check_bad(":tag", "missing");
	check_bad("@sha256:" HEX64, "missing");
}

static void imgref_bounds(void)
{
	char name[300], tag[200];

	/* 255 with docker.io/library/ (18 characters) */
	memset(name, 'a', 238);
	name[238] = '\0';
	check_bad(name, "255");
	name[237] = '\0';
	{
		char want[340];
		snprintf(want, sizeof(want), "docker.io/library/%s:latest", name);
		check_norm(name, want);
	}
	memset(tag, 'x', 129);
	tag[129] = '\0';
	{
		char in[400];
		snprintf(in, sizeof(in), "a:%s", tag);
		check_bad(in, "tag");
	}
}

const struct unit_test imgref_tests[] = {
	{ "imgref_normalises_like_docker", imgref_normalises_like_docker },
	{ "imgref_parts", imgref_parts },
	{ "imgref_refuses_with_a_reason", imgref_refuses_with_a_reason },
	{ "imgref_bounds", imgref_bounds },
	{ NULL, NULL },
};
