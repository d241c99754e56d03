/*
 * Judging a replayed step against the recorded one, and the short diff
 * that shows where two outputs first part ways.
 */
#include <stdio.h>
#include <string.h>

#include "replay.h"

#define DIFF_CONTEXT 1          /* equal lines shown before the difference */
#define DIFF_LINES 3            /* differing lines shown per side */
#define DIFF_LINE_MAX 160       /* bytes shown of one line */
#define COMMAND_TEXT_MAX 60

const char *replay_verdict_name(enum replay_verdict v)
{
	switch (v) {
	case REPLAY_MATCH: return "match";
	case REPLAY_DIVERGED: return "diverged";
	case REPLAY_SKIPPED: return "skipped";
	default: return "error";
	}
}

/* A string field's bytes; "" (and 0) when absent or not a string. */
static const char *str_field(json_object *o, const char *key, size_t *len)
{
	json_object *v;

	if (json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string)) {
		*len = (size_t)json_object_get_string_len(v);
		return json_object_get_string(v);
	}
	*len = 0;
	return "";
}

/* An integer field, or has = 0 when absent or null. */
static long long int_field(json_object *o, const char *key, int *has)
{
	json_object *v;

	*has = json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_int);
	return *has ? (long long)json_object_get_int64(v) : 0;
}

static int bool_field(json_object *o, const char *key)
{
	json_object *v;

	return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_boolean) &&
	       json_object_get_boolean(v);
}

/* The start of line n (0-based) of s, or NULL past the end. */
static const char *line_at(const char *s, size_t len, size_t n, size_t *line_len)
{
	const char *p = s, *end = s + len, *nl;

	while (n--) {
		if (!(nl = memchr(p, '\n', (size_t)(end - p))))
			return NULL;
		p = nl + 1;
	}
	if (p >= end)
		return NULL;
	nl = memchr(p, '\n', (size_t)(end - p));
	*line_len = nl ? (size_t)(nl - p) : (size_t)(end - p);
	return p;
}

static void add_line(struct orc_buf *out, char mark, const char *p, size_t n)
{
	size_t i;

	orc_buf_addf(out, "      %c", mark);
	for (i = 0; i < n && i < DIFF_LINE_MAX; i++)
		orc_buf_addc(out, (unsigned char)p[i] < 0x20 && p[i] != '\t' ? '?' : p[i]);
	if (n > DIFF_LINE_MAX)
		orc_buf_adds(out, "...");
	orc_buf_addc(out, '\n');
}

void replay_diff(struct orc_buf *out, const char *name, const char *a, size_t alen, const char *b,
		 size_t blen)
{
	const char *pa, *pb;
	size_t first = 0, la = 0, lb = 0, i, from;

	/* The first line that differs (a missing line differs from any). */
	for (;; first++) {
		pa = line_at(a, alen, first, &la);
		pb = line_at(b, blen, first, &lb);
		if (!pa || !pb || la != lb || memcmp(pa, pb, la))
			break;
	}
	orc_buf_addf(out, "      --- recorded %s\n      +++ replayed %s\n      @@ line %zu @@\n",
		     name, name, first + 1);
	from = first > DIFF_CONTEXT ? first - DIFF_CONTEXT : 0;
	for (i = from; i < first; i++)
		if ((pa = line_at(a, alen, i, &la)))
			add_line(out, ' ', pa, la);
	for (i = first; i < first + DIFF_LINES; i++)
		if ((pa = line_at(a, alen, i, &la)))
			add_line(out, '-', pa, la);
	for (i = first; i < first + DIFF_LINES; i++)
		if ((pb = line_at(b, blen, i, &lb)))
			add_line(out, '+', pb, lb);
	/* Equal lines but one ends with a newline and the other not. */
	if (alen != blen && !line_at(a, alen, first, &la) && !line_at(b, blen, first, &lb))
		orc_buf_adds(out, "      \\ the outputs differ only in a final newline\n");
}

static int same_stream(json_object *rec, json_object *job, const char *key)
{
	size_t ra, rb;
	const char *a = str_field(rec, key, &ra), *b = str_field(job, key, &rb);

	return ra == rb && !memcmp(a, b, ra);
}

enum replay_verdict replay_compare_exec(const char **why, struct orc_buf *diff, json_object *rec,
					json_object *job, enum replay_compare mode)
{
	static const char *const streams[] = { "stdout", "stderr" };
	int has_a, has_b;
	long long ca, cb;
	size_t i, na, nb;
	const char *a, *b;

	if (mode == REPLAY_NONE)
		return REPLAY_MATCH;
	if (bool_field(rec, "timed_out") != bool_field(job, "timed_out")) {
		*why = bool_field(job, "timed_out") ? "timed out (the recorded step did not)" :
			"did not time out (the recorded step did)";
		return REPLAY_DIVERGED;
	}
	ca = int_field(rec, "exit_code", &has_a);
	cb = int_field(job, "exit_code", &has_b);
	if (has_a != has_b || ca != cb) {
		*why = "exit code differs";
		orc_buf_adds(diff, "      exit code: recorded ");
		if (has_a)
			orc_buf_addf(diff, "%lld", ca);
		else
			orc_buf_adds(diff, "none");
		orc_buf_adds(diff, ", replayed ");
		if (has_b)
			orc_buf_addf(diff, "%lld", cb);
		else
			orc_buf_addf(diff, "none (%s)", cli_field_text(job, "error"));
		orc_buf_addc(diff, '\n');
		return REPLAY_DIVERGED;
	}
	if (mode == REPLAY_EXIT_CODE)
		return REPLAY_MATCH;
	for (i = 0; i < sizeof(streams) / sizeof(*streams); i++) {
		if (same_stream(rec, job, streams[i]))
			continue;
		a = str_field(rec, streams[i], &na);
		b = str_field(job, streams[i], &nb);
		*why = i == 0 ? "stdout differs" : "stderr differs";
		replay_diff(diff, streams[i], a, na, b, nb);
		return REPLAY_DIVERGED;
	}
	return REPLAY_MATCH;
}

void replay_command_text(char *out, size_t outlen, json_object *command)
{
	struct orc_buf b = ORC_BUF_INIT;
	size_t i, n;

	if (json_object_is_type(command, json_type_string)) {
		orc_buf_adds(&b, json_object_get_string(command));
	} else if (json_object_is_type(command, json_type_array)) {
		n = json_object_array_length(command);
		for (i = 0; i < n; i++) {
			const char *s = json_object_get_string(json_object_array_get_idx(command, i));
			int quote = !*s || strpbrk(s, " \t\n'\"$;&|<>*?()") != NULL;
			orc_buf_addf(&b, "%s%s%s%s", i ? " " : "", quote ? "'" : "", s, quote ? "'" : "");
		}
	}
	for (i = 0; i < b.len; i++)
		if ((unsigned char)b.ptr[i] < 0x20)
			b.ptr[i] = ' ';
	if (b.len > COMMAND_TEXT_MAX)
		snprintf(out, outlen, "%.*s...", COMMAND_TEXT_MAX - 3, b.ptr);
	else
		snprintf(out, outlen, "%s", orc_buf_cstr(&b));
	orc_buf_release(&b);
}
