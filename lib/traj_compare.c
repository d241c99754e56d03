/*
 * Replaying trajectories, independent of transport (traj_compare.h):
 * reading the lines, the bodies a replay sends, the verdict on each step,
 * the short diff that shows where two outputs part ways, and the report.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "json.h"
#include "traj_compare.h"
#include "xalloc.h"

#define DIFF_CONTEXT 1          /* equal lines shown before the difference */
#define DIFF_LINES 3            /* differing lines shown per side */
#define DIFF_LINE_MAX 160       /* bytes shown of one line */
#define COMMAND_TEXT_MAX 60
#define EXEC_DEFAULT_TIMEOUT_S 300

static const char *const compare_names[ORC_TRAJ_NCOMPARE] = { "exact", "exit-code", "none" };
static const char *const verdict_names[ORC_TRAJ_NVERDICT] = { "match", "diverged", "skipped", "error" };
/* The report's count fields, per verdict. */
static const char *const count_names[ORC_TRAJ_NVERDICT] = { "matched", "diverged", "skipped", "errors" };

static const struct {
	const char *type;
	enum orc_traj_kind kind;
} kinds[] = {
	{ "exec", ORC_TRAJ_KIND_EXEC },
	{ "file.write", ORC_TRAJ_KIND_FILE_WRITE },
	{ "git.apply", ORC_TRAJ_KIND_GIT_APPLY },
	{ "git.reset", ORC_TRAJ_KIND_GIT_RESET },
	{ "archive.upload", ORC_TRAJ_KIND_ARCHIVE },
};

int orc_traj_compare_parse(enum orc_traj_compare *out, const char *s)
{
	int i;

	for (i = 0; i < ORC_TRAJ_NCOMPARE; i++) {
		if (!strcmp(s, compare_names[i])) {
			*out = (enum orc_traj_compare)i;
			return 0;
		}
	}
	return ORC_EINVALID;
}

const char *orc_traj_compare_name(enum orc_traj_compare mode)
{
	return (unsigned)mode < ORC_TRAJ_NCOMPARE ? compare_names[mode] : "?";
}

const char *orc_traj_verdict_name(enum orc_traj_verdict v)
{
	return (unsigned)v < ORC_TRAJ_NVERDICT ? verdict_names[v] : "error";
}

enum orc_traj_kind orc_traj_kind_of(const char *type)
{
	size_t i;

	for (i = 0; i < sizeof(kinds) / sizeof(*kinds); i++)
		if (!strcmp(type, kinds[i].type))
			return kinds[i].kind;
	return ORC_TRAJ_KIND_UNKNOWN;
}

/* ---- fields ------------------------------------------------------------------------ */

/* A field as display text: "-" when absent or null. */
static const char *field_text(json_object *o, const char *key)
{
	json_object *v = orc_json_field(o, key);

	if (!v)
		return "-";
	if (json_object_is_type(v, json_type_string))
		return json_object_get_string(v);
	return json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
}

/* A string field's bytes; "" (and 0) when absent or not a string. */
static const char *str_field(json_object *o, const char *key, size_t *len)
{
	json_object *v = orc_json_field(o, key);

	if (v && json_object_is_type(v, json_type_string)) {
		*len = (size_t)json_object_get_string_len(v);
		return json_object_get_string(v);
	}
	*len = 0;
	return "";
}

/* An integer field, or has = 0 when absent or null. */
static long long int_field(json_object *o, const char *key, int *has)
{
	json_object *v = orc_json_field(o, key);

	*has = v && json_object_is_type(v, json_type_int);
	return *has ? (long long)json_object_get_int64(v) : 0;
}

/* A boolean field, or dflt when absent or not a boolean. */
static int bool_field(json_object *o, const char *key, int dflt)
{
	json_object *v = orc_json_field(o, key);

	return v && json_object_is_type(v, json_type_boolean) ? json_object_get_boolean(v) : dflt;
}

/* Copy key from src to dst when present and not null. */
static void copy_field(json_object *dst, json_object *src, const char *key)
{
	json_object *v = orc_json_field(src, key);

	if (v)
		json_object_object_add(dst, key, json_object_get(v));
}

static int job_done(json_object *job)
{
	const char *st = field_text(job, "status");

	return strcmp(st, "queued") && strcmp(st, "running") && strcmp(st, "-");
}

/* ---- reading ------------------------------------------------------------------------- */

void orc_traj_set_release(struct orc_traj_set *s)
{
	size_t i;

	for (i = 0; i < s->n; i++)
		json_object_put(s->v[i].lines);
	free(s->v);
	s->v = NULL;
	s->n = s->alloc = 0;
}

static struct orc_traj *set_find(struct orc_traj_set *s, const char *id)
{
	size_t i;

	/* Lines of one trajectory are contiguous: look at the newest first. */
	for (i = s->n; i-- > 0;)
		if (!strcmp(s->v[i].sandbox_id, id))
			return &s->v[i];
	return NULL;
}

static int check_header(json_object *line, char *msg, size_t msglen)
{
	json_object *v;

	if (strcmp(field_text(line, "format"), ORC_TRAJ_FORMAT)) {
		snprintf(msg, msglen, "not an %s header (format \"%.64s\")", ORC_TRAJ_FORMAT,
			 field_text(line, "format"));
		return ORC_EINVALID;
	}
	v = orc_json_field(line, "version");
	if (!v || !json_object_is_type(v, json_type_int) || json_object_get_int64(v) != ORC_TRAJ_VERSION) {
		snprintf(msg, msglen, "trajectory version %.32s is not supported (version %d is)",
			 field_text(line, "version"), ORC_TRAJ_VERSION);
		return ORC_EINVALID;
	}
	if (!(v = orc_json_field(line, "sandbox")) || !json_object_is_type(v, json_type_object)) {
		snprintf(msg, msglen, "the header has no \"sandbox\" object");
		return ORC_EINVALID;
	}
	return 0;
}

int orc_traj_set_add(struct orc_traj_set *s, json_object *line, char *msg, size_t msglen)
{
	json_object *idv = orc_json_field(line, "sandbox_id");
	const char *type = field_text(line, "type"), *id;
	struct orc_traj *t;
	int err;

	if (!idv || !json_object_is_type(idv, json_type_string)) {
		snprintf(msg, msglen, "a line without \"sandbox_id\"");
		return ORC_EINVALID;
	}
	id = json_object_get_string(idv);
	if (!strcmp(type, "error")) {
		snprintf(msg, msglen, "the export of %.64s failed on the server: %.200s", id,
			 field_text(line, "detail"));
		return ORC_EINVALID;
	}
	if (!strcmp(type, "header")) {
		if ((err = check_header(line, msg, msglen)) < 0)
			return err;
		if (s->max && s->n == s->max) {
			snprintf(msg, msglen, "more than %zu trajector%s", s->max, s->max == 1 ? "y" : "ies");
			return ORC_ETOOBIG;
		}
		if (s->n == s->alloc) {
			s->alloc = s->alloc ? 2 * s->alloc : 4;
			s->v = xrealloc(s->v, orc_mul_size(s->alloc, sizeof(*s->v)));
		}
		t = &s->v[s->n++];
		memset(t, 0, sizeof(*t));
		t->lines = json_object_new_array();
		json_object_array_add(t->lines, line);
		t->sandbox_id = id;
		return 0;
	}
	if (!(t = set_find(s, id)) || t->complete) {
		snprintf(msg, msglen, "a \"%.32s\" line of %.64s outside its trajectory (header ... end)",
			 type, id);
		return ORC_EINVALID;
	}
	json_object_array_add(t->lines, line);
	if (!strcmp(type, "end"))
		t->complete = 1;
	return 0;
}

int orc_traj_set_check(const struct orc_traj_set *s, char *msg, size_t msglen)
{
	size_t i;

	if (!s->n) {
		snprintf(msg, msglen, "no trajectory in it");
		return ORC_EINVALID;
	}
	for (i = 0; i < s->n; i++) {
		if (!s->v[i].complete) {
			snprintf(msg, msglen, "the trajectory of %.64s has no \"end\" line (a truncated export?)",
				 s->v[i].sandbox_id);
			return ORC_EINVALID;
		}
	}
	return 0;
}

/* ---- what a replay sends ------------------------------------------------------------- */

json_object *orc_traj_create_body(json_object *spec, const char *image, const char *recorded_id)
{
	json_object *b = json_object_new_object(), *labels = json_object_new_object();

	if (image)
		json_object_object_add(b, "image", json_object_new_string(image));
	else
		copy_field(b, spec, "image");
	copy_field(b, spec, "cpu");
	copy_field(b, spec, "memory");
	copy_field(b, spec, "block_network");
	copy_field(b, spec, "env");
	copy_field(b, spec, "workdir");
	json_object_object_add(labels, ORC_TRAJ_REPLAY_LABEL, json_object_new_string(recorded_id));
	json_object_object_add(b, "labels", labels);
	return b;
}

json_object *orc_traj_exec_body(json_object *rec, int64_t *timeout_s)
{
	json_object *body = json_object_new_object(), *v;
	int64_t timeout = EXEC_DEFAULT_TIMEOUT_S;

	if ((v = orc_json_field(rec, "timeout_seconds")) && json_object_is_type(v, json_type_int) &&
	    json_object_get_int64(v) > 0)
		timeout = json_object_get_int64(v);
	copy_field(body, rec, "command");
	copy_field(body, rec, "cwd");
	copy_field(body, rec, "env");
	copy_field(body, rec, "login_shell");
	copy_field(body, rec, "stdin");
	json_object_object_add(body, "timeout_seconds", json_object_new_int64(timeout));
	json_object_object_add(body, "wait", json_object_new_boolean(1));
	*timeout_s = timeout;
	return body;
}

int orc_traj_action_body(json_object **out, struct orc_traj_step *s, json_object *rec,
			 enum orc_traj_kind kind)
{
	json_object *body = json_object_new_object();

	*out = NULL;
	switch (kind) {
	case ORC_TRAJ_KIND_FILE_WRITE:
	case ORC_TRAJ_KIND_ARCHIVE:
		if (!orc_json_field(rec, "content")) {
			json_object_put(body);
			orc_traj_skip(s, kind == ORC_TRAJ_KIND_ARCHIVE ?
				      "the archive's content is not in the trajectory (not recorded, or "
				      "exported without content)" :
				      "the file's content is not in the trajectory (export it with content)");
			return 1;
		}
		copy_field(body, rec, "path");
		copy_field(body, rec, "content");
		if (kind == ORC_TRAJ_KIND_FILE_WRITE)
			copy_field(body, rec, "mode");
		break;
	case ORC_TRAJ_KIND_GIT_APPLY:
		copy_field(body, rec, "patch");
		copy_field(body, rec, "cwd");
		break;
	case ORC_TRAJ_KIND_GIT_RESET:
		copy_field(body, rec, "ref");
		copy_field(body, rec, "cwd");
		copy_field(body, rec, "remove_ignored");
		break;
	default:
		json_object_put(body);
		orc_traj_skip(s, "not a step this replay knows how to apply");
		return 1;
	}
	*out = body;
	return 0;
}

/* ---- one step's outcome ----------------------------------------------------------------- */

void orc_traj_step_release(struct orc_traj_step *s)
{
	orc_buf_release(&s->diff);
	json_object_put(s->replayed);
	s->replayed = NULL;
}

void orc_traj_skip(struct orc_traj_step *s, const char *why)
{
	s->verdict = ORC_TRAJ_SKIPPED;
	s->why = why;
}

void orc_traj_refused(struct orc_traj_step *s, const char *what, long status, json_object *answer)
{
	const char *detail = field_text(answer, "detail");

	if (status)
		snprintf(s->why_buf, sizeof(s->why_buf), "%s: %s (HTTP %ld)", what,
			 strcmp(detail, "-") ? detail : "unexpected response", status);
	else
		snprintf(s->why_buf, sizeof(s->why_buf), "%s", what);
	s->why = s->why_buf;
	s->verdict = ORC_TRAJ_ERROR;
}

/* ---- the diff ----------------------------------------------------------------------------- */

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

void orc_traj_diff(struct orc_buf *out, const char *name, const char *a, size_t alen, const char *b,
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

/* ---- judging ------------------------------------------------------------------------------- */

static enum orc_traj_verdict compare_exec(const char **why, struct orc_buf *diff, json_object *rec,
					  json_object *job, enum orc_traj_compare mode)
{
	static const char *const streams[] = { "stdout", "stderr" };
	int has_a, has_b;
	long long ca, cb;
	size_t i, na, nb;
	const char *a, *b;

	if (mode == ORC_TRAJ_NONE)
		return ORC_TRAJ_MATCH;
	if (bool_field(rec, "timed_out", 0) != bool_field(job, "timed_out", 0)) {
		*why = bool_field(job, "timed_out", 0) ? "timed out (the recorded step did not)" :
			"did not time out (the recorded step did)";
		return ORC_TRAJ_DIVERGED;
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
			orc_buf_addf(diff, "none (%s)", field_text(job, "error"));
		orc_buf_addc(diff, '\n');
		return ORC_TRAJ_DIVERGED;
	}
	if (mode == ORC_TRAJ_EXIT_CODE)
		return ORC_TRAJ_MATCH;
	for (i = 0; i < sizeof(streams) / sizeof(*streams); i++) {
		a = str_field(rec, streams[i], &na);
		b = str_field(job, streams[i], &nb);
		if (na == nb && !memcmp(a, b, na))
			continue;
		*why = i == 0 ? "stdout differs" : "stderr differs";
		orc_traj_diff(diff, streams[i], a, na, b, nb);
		return ORC_TRAJ_DIVERGED;
	}
	return ORC_TRAJ_MATCH;
}

void orc_traj_judge_exec(struct orc_traj_step *s, json_object *rec, json_object *job,
			 enum orc_traj_compare mode)
{
	json_object_put(s->replayed);
	s->replayed = json_object_new_object();
	copy_field(s->replayed, job, "job_id");
	copy_field(s->replayed, job, "exit_code");
	copy_field(s->replayed, job, "timed_out");
	copy_field(s->replayed, job, "error");
	if (!job_done(rec)) {
		orc_traj_skip(s, "the recorded step had not finished");
		return;
	}
	s->verdict = compare_exec(&s->why, &s->diff, rec, job, mode);
	if (s->verdict == ORC_TRAJ_DIVERGED) {
		copy_field(s->replayed, job, "stdout");
		copy_field(s->replayed, job, "stderr");
	}
}

void orc_traj_judge_action(struct orc_traj_step *s, json_object *rec, long status,
			   json_object *answer, enum orc_traj_compare mode)
{
	int ok_rec = bool_field(rec, "success", 1);
	int ok_rep = status >= 200 && status <= 299 && bool_field(answer, "success", 1);

	json_object_put(s->replayed);
	s->replayed = json_object_new_object();
	json_object_object_add(s->replayed, "status", json_object_new_int64(status));
	json_object_object_add(s->replayed, "success", json_object_new_boolean(ok_rep));
	if (status >= 400 && status != 409 && status != 422) {
		orc_traj_refused(s, "refused", status, answer);
		return;
	}
	if (mode != ORC_TRAJ_NONE && ok_rec != ok_rep) {
		s->why = ok_rep ? "succeeded (the recorded step failed)" : "failed (the recorded step succeeded)";
		if (!ok_rep)
			orc_buf_addf(&s->diff, "      %s\n", field_text(answer, status >= 400 ? "detail" : "stderr"));
		s->verdict = ORC_TRAJ_DIVERGED;
		return;
	}
	s->verdict = ORC_TRAJ_MATCH;
}

void orc_traj_command_text(char *out, size_t outlen, json_object *command)
{
	struct orc_buf b = ORC_BUF_INIT;
	size_t i, n;

	if (json_object_is_type(command, json_type_string)) {
		orc_buf_adds(&b, json_object_get_string(command));
	} else if (json_object_is_type(command, json_type_array)) {
		n = json_object_array_length(command);
		for (i = 0; i < n; i++) {
			const char *s = json_object_get_string(json_object_array_get_idx(command, i));
			int quote;
			if (!s)
				s = "";
			quote = !*s || strpbrk(s, " \t\n'\"$;&|<>*?()") != NULL;
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

/* ---- the report ------------------------------------------------------------------------------ */

void orc_traj_report_init(struct orc_traj_report *rep, struct orc_buf *text, const char *sandbox_id,
			  const char *image)
{
	memset(rep, 0, sizeof(*rep));
	rep->text = text;
	rep->obj = json_object_new_object();
	rep->steps = json_object_new_array();
	json_object_object_add(rep->obj, "sandbox_id", json_object_new_string(sandbox_id));
	json_object_object_add(rep->obj, "image", image ? json_object_new_string(image) : NULL);
}

void orc_traj_report_sandbox(struct orc_traj_report *rep, const char *replay_id)
{
	free(rep->replay_id);
	rep->replay_id = xstrdup(replay_id);
	json_object_object_add(rep->obj, "replay_sandbox_id", json_object_new_string(replay_id));
}

void orc_traj_report_started(struct orc_traj_report *rep)
{
	if (rep->text)
		orc_buf_addf(rep->text, "replay %s -> %s (image %s)\n", field_text(rep->obj, "sandbox_id"),
			     rep->replay_id ? rep->replay_id : "-", field_text(rep->obj, "image"));
}

/* What a step line shows after its type: the command, path or ref. */
static void step_subject(char *out, size_t outlen, json_object *rec, enum orc_traj_kind kind)
{
	switch (kind) {
	case ORC_TRAJ_KIND_EXEC:
		orc_traj_command_text(out, outlen, orc_json_field(rec, "command"));
		break;
	case ORC_TRAJ_KIND_FILE_WRITE:
	case ORC_TRAJ_KIND_ARCHIVE:
		snprintf(out, outlen, "%s", field_text(rec, "path"));
		break;
	case ORC_TRAJ_KIND_GIT_RESET:
		snprintf(out, outlen, "%s", field_text(rec, "ref"));
		break;
	default:
		out[0] = '\0';
	}
}

void orc_traj_report_step(struct orc_traj_report *rep, json_object *rec, int64_t n,
			  struct orc_traj_step *s)
{
	static const char *const shown[ORC_TRAJ_NVERDICT] = { "ok", "DIVERGED", "skipped", "ERROR" };
	const char *type = field_text(rec, "type");
	enum orc_traj_kind kind = orc_traj_kind_of(type);
	json_object *r = json_object_new_object(), *recorded;
	char subject[128];

	rep->counts[(unsigned)s->verdict < ORC_TRAJ_NVERDICT ? s->verdict : ORC_TRAJ_ERROR]++;
	step_subject(subject, sizeof(subject), rec, kind);
	if (rep->text) {
		orc_buf_addf(rep->text, "  step %-3lld %-10s %-44s %s", (long long)n, type, subject,
			     shown[(unsigned)s->verdict < ORC_TRAJ_NVERDICT ? s->verdict : ORC_TRAJ_ERROR]);
		if (s->why)
			orc_buf_addf(rep->text, ": %s", s->why);
		orc_buf_addc(rep->text, '\n');
		if (s->diff.len)
			orc_buf_adds(rep->text, s->diff.ptr);
	}
	json_object_object_add(r, "step", json_object_new_int64(n));
	json_object_object_add(r, "type", json_object_new_string(type));
	if (kind == ORC_TRAJ_KIND_EXEC)
		copy_field(r, rec, "command");
	else if (subject[0])
		json_object_object_add(r, kind == ORC_TRAJ_KIND_GIT_RESET ? "ref" : "path",
				       json_object_new_string(subject));
	json_object_object_add(r, "result", json_object_new_string(orc_traj_verdict_name(s->verdict)));
	if (s->why)
		json_object_object_add(r, "reason", json_object_new_string(s->why));
	if (s->diff.len)
		json_object_object_add(r, "diff", json_object_new_string(s->diff.ptr));
	if (kind == ORC_TRAJ_KIND_EXEC) {
		recorded = json_object_new_object();
		copy_field(recorded, rec, "job_id");
		copy_field(recorded, rec, "exit_code");
		copy_field(recorded, rec, "timed_out");
		json_object_object_add(r, "recorded", recorded);
	}
	if (s->replayed) {
		json_object_object_add(r, "replayed", s->replayed);
		s->replayed = NULL;
	}
	json_object_array_add(rep->steps, r);
	orc_traj_step_release(s);
}

static const char *result_of(const struct orc_traj_report *rep, const char *error)
{
	if (error || rep->counts[ORC_TRAJ_ERROR])
		return "error";
	return rep->counts[ORC_TRAJ_DIVERGED] ? "diverged" : "match";
}

json_object *orc_traj_report_finish(struct orc_traj_report *rep, const char *error, int kept)
{
	json_object *o = rep->obj;
	int i, total = 0;

	json_object_object_add(o, "result", json_object_new_string(result_of(rep, error)));
	for (i = 0; i < ORC_TRAJ_NVERDICT; i++)
		total += rep->counts[i];
	json_object_object_add(o, "steps", json_object_new_int(total));
	for (i = 0; i < ORC_TRAJ_NVERDICT; i++)
		json_object_object_add(o, count_names[i], json_object_new_int(rep->counts[i]));
	json_object_object_add(o, "kept", json_object_new_boolean(kept && rep->replay_id));
	if (error)
		json_object_object_add(o, "error", json_object_new_string(error));
	json_object_object_add(o, "step_results", rep->steps);
	if (rep->text && error)
		orc_buf_addf(rep->text, "replay %s: %s\n", field_text(o, "sandbox_id"), error);
	if (rep->text && total)
		orc_buf_addf(rep->text, "  result: %s (%d matched, %d diverged, %d skipped, %d errors)%s%s\n",
			     result_of(rep, error), rep->counts[ORC_TRAJ_MATCH], rep->counts[ORC_TRAJ_DIVERGED],
			     rep->counts[ORC_TRAJ_SKIPPED], rep->counts[ORC_TRAJ_ERROR],
			     kept && rep->replay_id ? "; kept sandbox " : "",
			     kept && rep->replay_id ? rep->replay_id : "");
	free(rep->replay_id);
	memset(rep, 0, sizeof(*rep));
	return o;
}

json_object *orc_traj_summary(json_object *const *reports, size_t n, enum orc_traj_compare mode,
			      int *all_matched)
{
	json_object *sum = json_object_new_object(), *steps = json_object_new_object(), *v;
	int64_t totals[ORC_TRAJ_NVERDICT] = { 0 }, matched = 0, diverged = 0, failed = 0;
	size_t i, k;

	for (i = 0; i < n; i++) {
		const char *res = field_text(reports[i], "result");
		if (!strcmp(res, "match"))
			matched++;
		else if (!strcmp(res, "diverged"))
			diverged++;
		else
			failed++;
		for (k = 0; k < ORC_TRAJ_NVERDICT; k++)
			if ((v = orc_json_field(reports[i], count_names[k])) &&
			    json_object_is_type(v, json_type_int))
				totals[k] += json_object_get_int64(v);
	}
	json_object_object_add(sum, "trajectories", json_object_new_int64((int64_t)n));
	json_object_object_add(sum, "matched", json_object_new_int64(matched));
	json_object_object_add(sum, "diverged", json_object_new_int64(diverged));
	json_object_object_add(sum, "errors", json_object_new_int64(failed));
	json_object_object_add(sum, "compare", json_object_new_string(orc_traj_compare_name(mode)));
	for (k = 0; k < ORC_TRAJ_NVERDICT; k++)
		json_object_object_add(steps, count_names[k], json_object_new_int64(totals[k]));
	json_object_object_add(sum, "steps", steps);
	*all_matched = matched == (int64_t)n;
	return sum;
}
