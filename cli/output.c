/*
 * What orchardctl prints: error messages, JSON, aligned tables, ages.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "err.h"
#include "strutil.h"
#include "xalloc.h"

void cli_error(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	cli_spinner_clear_line();
	fputs("orchardctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int cli_usage_error(const char *usage, const char *fmt, ...)
{
	va_list ap;

	fputs("orchardctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\n\n", stderr);
	fputs(usage, stderr);
	return CLI_USAGE;
}

int cli_bad_option(const char *usage)
{
	fputc('\n', stderr);
	fputs(usage, stderr);
	return CLI_USAGE;
}

static const char *status_hint(long status)
{
	switch (status) {
	case 401: return "no API key was sent: set ORCHARD_API_KEY or pass --api-key";
	case 403: return "the API key was refused (wrong or revoked): check ORCHARD_API_KEY";
	case 502: case 503: case 504: return "the service is unavailable; try again shortly";
	default: return NULL;
	}
}

void cli_report_response(const struct cli_response *r)
{
	json_object *v = NULL;
	const char *detail = NULL, *rid = r->request_id, *hint;
	char fallback[64];

	if (r->json && json_object_is_type(r->json, json_type_object)) {
		if ((json_object_object_get_ex(r->json, "detail", &v) ||
		     json_object_object_get_ex(r->json, "error", &v)) && v) {
			detail = json_object_is_type(v, json_type_string) ?
				json_object_get_string(v) :
				json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
		}
		if (json_object_object_get_ex(r->json, "request_id", &v) &&
		    json_object_is_type(v, json_type_string) && *json_object_get_string(v))
			rid = json_object_get_string(v);
	}
	if (!detail || !*detail) {
		snprintf(fallback, sizeof(fallback), "request failed");
		detail = fallback;
	}
	if (rid && *rid)
		cli_error("%s (HTTP %ld, request %s)", detail, r->status, rid);
	else
		cli_error("%s (HTTP %ld)", detail, r->status);
	if ((hint = status_hint(r->status)) != NULL)
		fprintf(stderr, "orchardctl: hint: %s\n", hint);
}

void cli_print_json(json_object *o)
{
	puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
					       JSON_C_TO_STRING_NOSLASHESCAPE));
}

const char *cli_field_text(json_object *o, const char *key)
{
	json_object *v;

	if (!o || !json_object_is_type(o, json_type_object) ||
	    !json_object_object_get_ex(o, key, &v) || !v)
		return "-";
	if (json_object_is_type(v, json_type_string))
		return json_object_get_string(v);
	return json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
}

/* "2024-05-01T12:00:00[.frac][Z|+hh:mm]" -> epoch seconds. */
static int parse_iso8601(double *out, const char *s)
{
	struct tm tm;
	const char *p;
	double t;
	int sign, hh, mm;

	memset(&tm, 0, sizeof(tm));
	if (!(p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm)) &&
	    !(p = strptime(s, "%Y-%m-%d %H:%M:%S", &tm)))
		return ORC_EINVALID;
	t = (double)timegm(&tm);
	if (*p == '.')
		for (p++; *p >= '0' && *p <= '9'; p++)
			;
	if (*p == '+' || *p == '-') {
		sign = *p == '-' ? -1 : 1;
		if (sscanf(p + 1, "%2d:%2d", &hh, &mm) != 2 && sscanf(p + 1, "%2d%2d", &hh, &mm) != 2)
			return ORC_EINVALID;
		t -= sign * (hh * 3600.0 + mm * 60.0);
	} else if (*p != 'Z' && *p != '\0') {
		return ORC_EINVALID;
	}
	*out = t;
	return 0;
}

void cli_format_age(char *out, size_t outlen, json_object *v)
{
	double t, age;

	if (v && (json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)))
		t = json_object_get_double(v);
	else if (!v || !json_object_is_type(v, json_type_string) ||
		 parse_iso8601(&t, json_object_get_string(v)) < 0) {
		snprintf(out, outlen, "-");
		return;
	}
	age = orc_now() - t;
	if (!isfinite(age) || age < 0)
		age = 0;
	if (age < 120)
		snprintf(out, outlen, "%.0fs", floor(age));
	else if (age < 7200)
		snprintf(out, outlen, "%.0fm", floor(age / 60));
	else if (age < 172800)
		snprintf(out, outlen, "%.0fh", floor(age / 3600));
	else
		snprintf(out, outlen, "%.0fd", floor(age / 86400));
}

void cli_format_duration(char *out, size_t outlen, int64_t s)
{
	if (s < 0)
		snprintf(out, outlen, "-");
	else if (s < 120 || s % 60)
		snprintf(out, outlen, "%llds", (long long)s);
	else if (s < 7200 || s % 3600)
		snprintf(out, outlen, "%lldm", (long long)(s / 60));
	else if (s < 172800 || s % 86400)
		snprintf(out, outlen, "%lldh", (long long)(s / 3600));
	else
		snprintf(out, outlen, "%lldd", (long long)(s / 86400));
}

int cli_parse_output(enum cli_output *out, const char *arg)
{
	if (*arg == '=')
		arg++;
	if (!strcmp(arg, "json"))
		*out = CLI_OUT_JSON;
	else if (!strcmp(arg, "yaml"))
		*out = CLI_OUT_YAML;
	else if (!strcmp(arg, "table"))
		*out = CLI_OUT_TABLE;
	else if (!strcmp(arg, "wide"))
		*out = CLI_OUT_WIDE;
	else if (!strncmp(arg, "jsonpath=", 9) && cli_jsonpath_check(arg + 9) == 0) {
		*out = CLI_OUT_JSONPATH;
		cli_output_set_jsonpath(arg + 9);
	} else
		return ORC_EINVALID;
	return 0;
}

int cli_output_arg(enum cli_output *out, const char *arg, const char *cmd, const char *usage, int tables)
{
	if (cli_parse_output(out, arg) == 0 && (tables || cli_output_is_doc(*out)))
		return 0;
	if (!strncmp(arg + (*arg == '='), "jsonpath=", 9))
		return cli_usage_error(usage, "%s: -o jsonpath= takes .field, .a.b, [N] and [*] "
				       "(e.g. '{.items[*].name}'), not \"%s\"", cmd, arg + (*arg == '=') + 9);
	return cli_usage_error(usage, "%s: -o wants %s, not \"%s\"", cmd,
			       tables ? "table, wide, json, yaml or jsonpath=EXPR" : "json, yaml or jsonpath=EXPR",
			       arg);
}

/* ---- tables ---- */

static int no_headers;   /* --no-headers: one flag for the whole process */

void cli_output_set_no_headers(void)
{
	no_headers = 1;
}

int cli_output_headers(void)
{
	return !no_headers;
}

/* A cell without control characters, so a hostile value cannot move the cursor. */
static char *cell_dup(const char *s)
{
	char *c = xstrdup(s ? s : "-"), *p;

	for (p = c; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	return c;
}

static void table_push(struct cli_table *t, const char *const *cells)
{
	size_t i, need = orc_mul_size(orc_add_size(t->nrows, 1), t->ncols);

	if (need > t->alloc) {
		t->alloc = need * 2;
		t->cells = xrealloc(t->cells, orc_mul_size(t->alloc, sizeof(char *)));
	}
	for (i = 0; i < t->ncols; i++)
		t->cells[t->nrows * t->ncols + i] = cell_dup(cells[i]);
	t->nrows++;
}

void cli_table_init(struct cli_table *t, size_t ncols, const char *const *headers)
{
	memset(t, 0, sizeof(*t));
	t->ncols = ncols;
	table_push(t, headers);
}

void cli_table_add(struct cli_table *t, const char *const *cells)
{
	table_push(t, cells);
}

void cli_table_print(const struct cli_table *t)
{
	size_t *width = xcalloc(t->ncols, sizeof(size_t)), r, c, w, first = no_headers ? 1 : 0;
	const char *cell;

	for (r = first; r < t->nrows; r++)
		for (c = 0; c < t->ncols; c++)
			if ((w = orc_utf8_width(t->cells[r * t->ncols + c])) > width[c])
				width[c] = w;
	for (r = first; r < t->nrows; r++) {
		for (c = 0; c < t->ncols; c++) {
			cell = t->cells[r * t->ncols + c];
			fputs(cell, stdout);
			if (c + 1 < t->ncols)
				for (w = orc_utf8_width(cell); w < width[c] + 3; w++)
					putchar(' ');
		}
		putchar('\n');
	}
	free(width);
}

void cli_table_release(struct cli_table *t)
{
	size_t i;

	for (i = 0; t->cells && i < t->nrows * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	memset(t, 0, sizeof(*t));
}
