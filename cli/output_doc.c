/*
 * -o json, -o yaml and -o jsonpath=EXPR: one object or list printed as a
 * document, the same for every command (output.c prints the tables).
 *
 * YAML is block style, two-space indents; a string is plain when it cannot
 * be read as anything else (a letter first, no YAML 1.1 boolean or null
 * word), else double-quoted with escapes, so what PyYAML or yq reads back
 * equals the JSON. jsonpath is kubectl's, cut down: .name, .a.b, [N]
 * (negative counts from the end), [*] (every item or value), optionally
 * inside {...}; the results are printed space-separated on one line,
 * strings as their text and everything else as JSON.
 */
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <string.h>

#include "cli.h"
#include "err.h"
#include "xalloc.h"

/* The one -o jsonpath= expression of this process (from argv, not copied). */
static const char *jsonpath_expr;

enum step_kind { STEP_FIELD, STEP_INDEX, STEP_ALL };

struct step {
	enum step_kind kind;
	const char *name;            /* STEP_FIELD: not NUL-terminated */
	size_t namelen;
	long index;                  /* STEP_INDEX */
};

static int name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
	       c == '-';
}

/* The next step at *p: 1 and advance, 0 at the end, ORC_EINVALID on bad syntax. */
static int next_step(struct step *out, const char **p)
{
	const char *s = *p, *end;
	char *stop;

	if (!*s)
		return 0;
	if (s[0] == '.' && s[1] == '[')
		s++;   /* .[0] is [0] */
	if (*s == '.') {
		for (end = ++s; name_char(*end); end++)
			;
		if (end == s)
			return ORC_EINVALID;
		out->kind = STEP_FIELD;
		out->name = s;
		out->namelen = (size_t)(end - s);
		*p = end;
		return 1;
	}
	if (*s != '[')
		return ORC_EINVALID;
	if (!strncmp(s, "[*]", 3)) {
		out->kind = STEP_ALL;
		*p = s + 3;
		return 1;
	}
	out->kind = STEP_INDEX;
	out->index = strtol(s + 1, &stop, 10);
	end = stop;
	if (end == s + 1 || *end != ']' || out->index > 1000000 || out->index < -1000000)
		return ORC_EINVALID;
	*p = end + 1;
	return 1;
}

/* The path inside "{...}" or as given, without a lone leading "." (the root). */
static int expr_path(const char **start, size_t *len, const char *expr)
{
	size_t n = strlen(expr);

	if (n >= 2 && expr[0] == '{' && expr[n - 1] == '}') {
		expr++;
		n -= 2;
	}
	if (n >= 2 && expr[0] == '.' && expr[1] == '.')
		return ORC_EINVALID;  /* ".." (recursive descent) is not supported */
	if (n == 1 && expr[0] == '.')
		n = 0;
	*start = expr;
	*len = n;
	return 0;
}

int cli_jsonpath_check(const char *expr)
{
	const char *start, *p;
	struct step st;
	size_t len;
	char *copy;
	int rc;

	if (!*expr || expr_path(&start, &len, expr) < 0)
		return ORC_EINVALID;
	copy = xstrndup(start, len);
	p = copy;
	while ((rc = next_step(&st, &p)) > 0)
		;
	free(copy);
	return rc;
}

static void eval(json_object *results, json_object *v, const char *p, int *wild)
{
	struct step st;
	json_object *child;
	size_t i, n;
	char key[256];

	if (next_step(&st, &p) <= 0) {
		json_object_array_add(results, json_object_get(v));
		return;
	}
	switch (st.kind) {
	case STEP_FIELD:
		if (!json_object_is_type(v, json_type_object) || st.namelen >= sizeof(key))
			return;
		memcpy(key, st.name, st.namelen);
		key[st.namelen] = '\0';
		if (json_object_object_get_ex(v, key, &child))
			eval(results, child, p, wild);
		return;
	case STEP_INDEX:
		if (!json_object_is_type(v, json_type_array))
			return;
		n = json_object_array_length(v);
		if (st.index < 0)
			st.index += (long)n;
		if (st.index >= 0 && (size_t)st.index < n)
			eval(results, json_object_array_get_idx(v, (size_t)st.index), p, wild);
		return;
	case STEP_ALL:
		*wild = 1;
		if (json_object_is_type(v, json_type_array)) {
			for (i = 0, n = json_object_array_length(v); i < n; i++)
				eval(results, json_object_array_get_idx(v, i), p, wild);
		} else if (json_object_is_type(v, json_type_object)) {
			json_object_object_foreach(v, k, val) {
				(void)k;
				eval(results, val, p, wild);
			}
		}
		return;
	}
}

static int print_jsonpath(json_object *o)
{
	json_object *results = json_object_new_array(), *r;
	const char *start;
	size_t i, len;
	char *path;
	int wild = 0, rc = 0;

	expr_path(&start, &len, jsonpath_expr);
	path = xstrndup(start, len);
	eval(results, o, path, &wild);
	if (!json_object_array_length(results) && !wild) {
		cli_error("jsonpath \"%s\": no such field in the output (see it with -o json)", jsonpath_expr);
		rc = CLI_FAIL;
		goto done;
	}
	for (i = 0; i < json_object_array_length(results); i++) {
		r = json_object_array_get_idx(results, i);
		if (i)
			putchar(' ');
		if (json_object_is_type(r, json_type_string))
			fwrite(json_object_get_string(r), 1, (size_t)json_object_get_string_len(r), stdout);
		else
			fputs(r ? json_object_to_json_string_ext(r, JSON_C_TO_STRING_PLAIN |
								 JSON_C_TO_STRING_NOSLASHESCAPE) : "null",
			      stdout);
	}
	putchar('\n');
done:
	free(path);
	json_object_put(results);
	return rc;
}

/* ---- YAML ---- */

static const char *const yaml_words[] = { "y", "n", "yes", "no", "true", "false", "on", "off", "null", NULL };

static int yaml_plain_ok(const char *s, size_t n)
{
	size_t i;

	if (!n || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '_'))
		return 0;
	for (i = 1; i < n; i++)
		if (!name_char(s[i]) && s[i] != '.' && s[i] != '/')
			return 0;
	for (i = 0; yaml_words[i]; i++)
		if (strlen(yaml_words[i]) == n && !strncasecmp(s, yaml_words[i], n))
			return 0;
	return 1;
}

/* One UTF-8 character at s (n bytes left): its length, *cp its code point; 0 when invalid. */
static size_t utf8_char(unsigned *cp, const unsigned char *s, size_t n)
{
	size_t len, i;
	unsigned c;

	if (s[0] < 0x80) {
		*cp = s[0];
		return 1;
	}
	if ((s[0] & 0xe0) == 0xc0)
		len = 2, c = s[0] & 0x1f;
	else if ((s[0] & 0xf0) == 0xe0)
		len = 3, c = s[0] & 0x0f;
	else if ((s[0] & 0xf8) == 0xf0)
		len = 4, c = s[0] & 0x07;
	else
		return 0;
	if (len > n)
		return 0;
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (s[i] & 0x3f);
	}
	if ((len == 2 && c < 0x80) || (len == 3 && c < 0x800) || (len == 4 && c < 0x10000) || c > 0x10ffff ||
	    (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*cp = c;
	return len;
}

/* A code point YAML must see escaped: controls, line separators, non-characters, BOM. */
static int yaml_escape_cp(unsigned c)
{
	return c < 0x20 || c == 0x7f || (c >= 0x80 && c <= 0x9f) || c == 0x2028 || c == 0x2029 ||
	       c == 0xfeff || c == 0xfffe || c == 0xffff;
}

static void yaml_string(const char *str, size_t n)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0, len;
	unsigned c;

	if (yaml_plain_ok(str, n)) {
		fwrite(str, 1, n, stdout);
		return;
	}
	putchar('"');
	while (i < n) {
		if (!(len = utf8_char(&c, s + i, n - i))) {
			fputs("\\ufffd", stdout);   /* not UTF-8: YAML cannot carry the byte */
			i++;
			continue;
		}
		if (c == '"' || c == '\\')
			printf("\\%c", (char)c);
		else if (c == '\n')
			fputs("\\n", stdout);
		else if (c == '\t')
			fputs("\\t", stdout);
		else if (yaml_escape_cp(c))
			printf("\\u%04x", c);
		else
			fwrite(s + i, 1, len, stdout);
		i += len;
	}
	putchar('"');
}

/* A double as YAML 1.1 reads a float: a "." always, a signed exponent. */
static void yaml_double(json_object *v)
{
	const char *t = json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
	const char *e = strpbrk(t, "eE");

	if (!strcmp(t, "NaN")) {
		fputs(".nan", stdout);
	} else if (strstr(t, "Infinity")) {
		fputs(*t == '-' ? "-.inf" : ".inf", stdout);
	} else if (strchr(t, '.')) {
		fputs(t, stdout);
	} else if (e) {
		printf("%.*s.0%s", (int)(e - t), t, e);
	} else {
		printf("%s.0", t);
	}
}

static int yaml_is_block(json_object *v)
{
	return (json_object_is_type(v, json_type_object) && json_object_object_length(v) > 0) ||
	       (json_object_is_type(v, json_type_array) && json_object_array_length(v) > 0);
}

static void yaml_scalar(json_object *v)
{
	switch (json_object_get_type(v)) {
	case json_type_null: fputs("null", stdout); break;
	case json_type_boolean: fputs(json_object_get_boolean(v) ? "true" : "false", stdout); break;
	case json_type_int:
		fputs(json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN), stdout);
		break;
	case json_type_double: yaml_double(v); break;
	case json_type_string:
		yaml_string(json_object_get_string(v), (size_t)json_object_get_string_len(v));
		break;
	case json_type_object: fputs("{}", stdout); break;
	case json_type_array: fputs("[]", stdout); break;
	}
}

static void indent_to(int n)
{
	while (n-- > 0)
		putchar(' ');
}

/*
 * A block node at column indent. inline_first: the cursor already stands
 * there (after "- "), so the first line is not indented.
 */
static void yaml_block(json_object *v, int indent, int inline_first)
{
	int first = 1;
	size_t i, n;
	json_object *item;

	if (json_object_is_type(v, json_type_object)) {
		json_object_object_foreach(v, key, val) {
			if (!first || !inline_first)
				indent_to(indent);
			first = 0;
			yaml_string(key, strlen(key));
			putchar(':');
			if (yaml_is_block(val)) {
				putchar('\n');
				yaml_block(val, indent + 2, 0);
			} else {
				putchar(' ');
				yaml_scalar(val);
				putchar('\n');
			}
		}
		return;
	}
	for (i = 0, n = json_object_array_length(v); i < n; i++) {
		item = json_object_array_get_idx(v, i);
		if (!first || !inline_first)
			indent_to(indent);
		first = 0;
		fputs("- ", stdout);
		if (yaml_is_block(item)) {
			yaml_block(item, indent + 2, 1);
		} else {
			yaml_scalar(item);
			putchar('\n');
		}
	}
}

static void print_yaml(json_object *o)
{
	if (yaml_is_block(o)) {
		yaml_block(o, 0, 0);
	} else {
		yaml_scalar(o);
		putchar('\n');
	}
}

/* ---- the entry points ---- */

void cli_output_set_jsonpath(const char *expr)
{
	jsonpath_expr = expr;
}

int cli_output_is_doc(enum cli_output fmt)
{
	return fmt == CLI_OUT_JSON || fmt == CLI_OUT_YAML || fmt == CLI_OUT_JSONPATH;
}

int cli_print_doc(enum cli_output fmt, json_object *o)
{
	switch (fmt) {
	case CLI_OUT_YAML: print_yaml(o); return 0;
	case CLI_OUT_JSONPATH: return print_jsonpath(o);
	default: cli_print_json(o); return 0;
	}
}

int cli_print_doc_line(enum cli_output fmt, json_object *o)
{
	if (fmt == CLI_OUT_JSON) {
		puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
		return 0;
	}
	if (fmt == CLI_OUT_YAML)
		fputs("---\n", stdout);
	return cli_print_doc(fmt, o);
}
