/*
 * The agent's parsers of outside input: request paths (fsutil.c), modes,
 * tar entry names (lib/tar_name.c), base64 (stream_b64.c) and the PTY frames
 * (pty_proto.c), from the agent's archive (libagent.a, the Makefile). The fuzz
 * targets (tests/fuzz) check that nothing crashes; these check the answers.
 */
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "../../agent/fsutil.h"
#include "../../agent/pty_proto.h"
#include "base64.h"
#include "err.h"
#include "tar_name.h"
#include "unit.h"

/* ---- paths --------------------------------------------------------------- */

static void check_path(const char *in, const char *want)
{
	char *out = NULL, msg[128];

	CHECK(agent_path_resolve(&out, in, strlen(in), msg, sizeof(msg)) == 0);
	CHECK_STR(out, want);
	free(out);
}

static void paths_are_made_absolute_and_normal(void)
{
	check_path("a.txt", "/workspace/a.txt");
	check_path(".", "/workspace");
	check_path("a/./b//c/", "/workspace/a/b/c");
	check_path("../etc/passwd", "/etc/passwd");    /* by name: the sandbox is the boundary */
	check_path("/", "/");
	check_path("//x//y/", "/x/y");
	check_path("/a/../b", "/b");
	check_path("/../../..", "/");
	check_path("/a/b/../../..", "/");
	check_path("/...", "/...");
	check_path("/a/..b/.c", "/a/..b/.c");
}

static void bad_paths_are_refused(void)
{
	char *out = NULL, msg[128], *longp;

	CHECK(agent_path_resolve(&out, "", 0, msg, sizeof(msg)) == ORC_EINVALID);
	CHECK(agent_path_resolve(&out, "a\0b", 3, msg, sizeof(msg)) == ORC_EINVALID);
	CHECK(strstr(msg, "NUL") != NULL);
	longp = malloc(PATH_MAX + 1);
	memset(longp, 'x', PATH_MAX);
	longp[0] = '/';
	longp[PATH_MAX] = '\0';
	CHECK(agent_path_resolve(&out, longp, PATH_MAX, msg, sizeof(msg)) == ORC_EINVALID);
	/* short enough as given, too long once /workspace/ is in front */
	CHECK(agent_path_resolve(&out, longp + 1, PATH_MAX - 2, msg, sizeof(msg)) == ORC_EINVALID);
	CHECK(out == NULL);
	free(longp);
}

static void modes_are_octal_up_to_07777(void)
{
	static const char *const bad[] = { "", "8", "0649", "10000", "077777", "-1", "0x1ff", " 644",
					   "644 " };
	mode_t m = 0;
	size_t i;

	CHECK(agent_parse_mode(&m, "0644") == 0 && m == 0644);
	CHECK(agent_parse_mode(&m, "7777") == 0 && m == 07777);
	CHECK(agent_parse_mode(&m, "0") == 0 && m == 0);
	CHECK(agent_parse_mode(&m, "04755") == 0 && m == 04755);
	for (i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		m = 0123;
		CHECK(agent_parse_mode(&m, bad[i]) == ORC_EINVALID);
		CHECK(m == 0123);   /* untouched on failure */
	}
}

/* ---- tar entry names ----------------------------------------------------- */

static void tar_names_stay_inside(void)
{
	static const char *const good[] = { "a", "a/b", "a/", "a/..b", "...", "a/.", "./a", "b/c/d.txt" };
	static const char *const bad[] = { "", "/a", "/", "..", "../a", "a/..", "a/../b", "a/b/../../.." };
	size_t i;

	for (i = 0; i < sizeof(good) / sizeof(*good); i++)
		CHECK(orc_tar_name_check(good[i]) == 0);
	for (i = 0; i < sizeof(bad) / sizeof(*bad); i++)
		CHECK(orc_tar_name_check(bad[i]) == ORC_EINVALID);
	CHECK(orc_tar_name_check(NULL) == ORC_EINVALID);
}

/* ---- base64 -------------------------------------------------------------- */

static void base64_known_answers_and_round_trips(void)
{
	/* RFC 4648 section 10 */
	static const char *const vec[][2] = { { "", "" }, { "f", "Zg==" }, { "fo", "Zm8=" },
		{ "foo", "Zm9v" }, { "foob", "Zm9vYg==" }, { "fooba", "Zm9vYmE=" },
		{ "foobar", "Zm9vYmFy" } };
	struct orc_buf b = ORC_BUF_INIT;
	unsigned char all[256];
	size_t i, n;

	for (i = 0; i < sizeof(vec) / sizeof(*vec); i++) {
		orc_buf_reset(&b);
		CHECK(orc_base64_encode(&b, vec[i][0], strlen(vec[i][0])) == 0);
		CHECK(b.len == strlen(vec[i][1]) && !memcmp(b.ptr ? b.ptr : "", vec[i][1], b.len));
		orc_buf_reset(&b);
		CHECK(orc_base64_decode(&b, vec[i][1], strlen(vec[i][1])) == 0);
		CHECK(b.len == strlen(vec[i][0]) && !memcmp(b.ptr ? b.ptr : "", vec[i][0], b.len));
	}
	for (i = 0; i < sizeof(all); i++)
		all[i] = (unsigned char)(255 - i);
	for (n = 0; n <= sizeof(all); n += 37) {
		struct orc_buf d = ORC_BUF_INIT;
		orc_buf_reset(&b);
		CHECK(orc_base64_encode(&b, all, n) == 0);
		CHECK(orc_base64_decode(&d, b.ptr ? b.ptr : "", b.len) == 0);
		CHECK(d.len == n && (n == 0 || !memcmp(d.ptr, all, n)));
		orc_buf_release(&d);
	}
	orc_buf_release(&b);
}

static void bad_base64_is_refused(void)
{
	static const char *const bad[] = { "Zg", "Zg=", "Z===", "Zg==Zg==", "Zm9v\n", "Zm 9", "Zm9-",
					   "Zm9_", "Z=g=", "====", "Zm9v=" };
	struct orc_buf b = ORC_BUF_INIT;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		orc_buf_reset(&b);
		CHECK(orc_base64_decode(&b, bad[i], strlen(bad[i])) == ORC_EINVALID);
	}
	orc_buf_release(&b);
}

/* ---- PTY frames ---------------------------------------------------------- */

static int parse(struct pty_msg *m, const char *text, char *err, size_t errlen)
{
	struct pty_msg blank = PTY_MSG_BLANK;

	*m = blank;
	return pty_msg_parse(m, text, strlen(text), err, errlen);
}

static void pty_frames_parse(void)
{
	struct pty_msg m;
	char err[256];

	CHECK(parse(&m, "{\"type\":\"init\"}", err, sizeof(err)) == 0);
	CHECK(m.type == PTY_MSG_INIT && m.rows == 24 && m.cols == 80 && !m.argv && !m.cwd);
	CHECK(m.login_shell == -1);
	pty_msg_release(&m);
	CHECK(parse(&m, "{\"type\":\"init\",\"cmd\":[\"/bin/sh\",\"-c\",\"x\"],\"rows\":50,\"cols\":132,"
		    "\"cwd\":\"/tmp\",\"env\":{\"A\":\"1\"},\"login_shell\":true}", err, sizeof(err)) == 0);
	CHECK(m.argc == 3 && !strcmp(m.argv[2], "x") && m.rows == 50 && m.cols == 132);
	CHECK(m.cwd && !strcmp(m.cwd, "/tmp") && m.nenv == 1 && !strcmp(m.env_keys[0], "A"));
	CHECK(m.login_shell == 1);
	pty_msg_release(&m);
	CHECK(parse(&m, "{\"type\":\"stdin\",\"data\":\"AGhpAA==\"}", err, sizeof(err)) == 0);
	CHECK(m.type == PTY_MSG_STDIN && m.data.len == 4 && !memcmp(m.data.ptr, "\0hi\0", 4));
	pty_msg_release(&m);
	CHECK(parse(&m, "{\"type\":\"resize\",\"rows\":1,\"cols\":65535}", err, sizeof(err)) == 0);
	CHECK(m.type == PTY_MSG_RESIZE && m.rows == 1 && m.cols == 65535);
	pty_msg_release(&m);
	CHECK(parse(&m, "{\"type\":\"signal\",\"sig\":\"SIGINT\"}", err, sizeof(err)) == 0);
	CHECK(m.type == PTY_MSG_SIGNAL && m.sig == SIGINT);
	pty_msg_release(&m);
	CHECK(parse(&m, "{\"type\":\"signal\",\"sig\":\"KILL\"}", err, sizeof(err)) == 0 && m.sig == SIGKILL);
	pty_msg_release(&m);
	CHECK(parse(&m, "{\"type\":\"close\"}", err, sizeof(err)) == 0 && m.type == PTY_MSG_CLOSE);
	pty_msg_release(&m);
}

static void bad_pty_frames_say_why(void)
{
	static const struct { const char *text, *why; } bad[] = {
		{ "", NULL }, { "[]", NULL }, { "{\"type\":1}", "type" }, { "{}", "type" },
		{ "{\"type\":\"nope\"}", "unknown frame type" },
		{ "{\"type\":\"stdin\"}", "data" }, { "{\"type\":\"stdin\",\"data\":\"@@@@\"}", "base64" },
		{ "{\"type\":\"resize\",\"rows\":0,\"cols\":80}", "rows" },
		{ "{\"type\":\"resize\",\"rows\":24,\"cols\":65536}", "cols" },
		{ "{\"type\":\"resize\",\"rows\":24}", "cols" },
		{ "{\"type\":\"resize\",\"rows\":\"24\",\"cols\":80}", "rows" },
		{ "{\"type\":\"signal\",\"sig\":\"USR9\"}", "sig" }, { "{\"type\":\"signal\"}", "sig" },
		{ "{\"type\":\"init\",\"cwd\":\"\"}", "cwd" },
		{ "{\"type\":\"init\",\"cmd\":\"sh\"}", "cmd" },
		{ "{\"type\":\"init\",\"rows\":-1}", "rows" },
	};
	struct pty_msg m;
	char err[256];
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		err[0] = '\0';
		CHECK(parse(&m, bad[i].text, err, sizeof(err)) < 0);
		if (bad[i].why && !strstr(err, bad[i].why)) {
			fprintf(stderr, "    frame %s: message \"%s\" lacks \"%s\"\n", bad[i].text, err, bad[i].why);
			unit_failures++;
		}
		pty_msg_release(&m);
	}
}

const struct unit_test agent_parser_tests[] = {
	{ "paths_are_made_absolute_and_normal", paths_are_made_absolute_and_normal },
	{ "bad_paths_are_refused", bad_paths_are_refused },
	{ "modes_are_octal_up_to_07777", modes_are_octal_up_to_07777 },
	{ "tar_names_stay_inside", tar_names_stay_inside },
	{ "base64_known_answers_and_round_trips", base64_known_answers_and_round_trips },
	{ "bad_base64_is_refused", bad_base64_is_refused },
	{ "pty_frames_parse", pty_frames_parse },
	{ "bad_pty_frames_say_why", bad_pty_frames_say_why },
	{ NULL, NULL },
};
