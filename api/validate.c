/*
 * Validation of the JSON fields shared by several routes (labels, env,
 * paths, commands). Each check returns 0 or ORC_EINVALID with a message
 * (api_fail) that names the field and what was expected.
 */
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "err.h"
#include "json.h"
#include "validate.h"

/* A JSON string without embedded NUL, at most max bytes. */
static int plain_string(json_object *v, size_t max)
{
	size_t n;

	if (!json_object_is_type(v, json_type_string))
		return 0;
	n = (size_t)json_object_get_string_len(v);
	return n <= max && strlen(json_object_get_string(v)) == n;
}

static int is_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* A label name or value (Kubernetes): at most 63 characters of
 * [A-Za-z0-9._-], starting and ending alphanumeric; empty when allow_empty. */
static int label_name_ok(const char *s, size_t n, int allow_empty)
{
	size_t i;

	if (n == 0)
		return allow_empty;
	if (n > API_LABEL_NAME_MAX || !is_alnum(s[0]) || !is_alnum(s[n - 1]))
		return 0;
	for (i = 0; i < n; i++)
		if (!is_alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
			return 0;
	return 1;
}

/* A DNS subdomain (RFC 1123): dot-separated DNS labels, at most 253. */
static int dns_subdomain_ok(const char *s, size_t n)
{
	size_t i, start = 0;

	if (n < 1 || n > API_LABEL_PREFIX_MAX)
		return 0;
	for (i = 0; i <= n; i++) {
		char c = i < n ? s[i] : '.';
		if (c == '.') {
			size_t len = i - start;
			if (len < 1 || len > 63 || s[start] == '-' || s[i - 1] == '-')
				return 0;
			start = i + 1;
		} else if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) {
			return 0;
		}
	}
	return 1;
}

/* [prefix/]name, as Kubernetes label keys. */
static int label_key_ok(const char *k)
{
	const char *slash = strchr(k, '/');

	if (!slash)
		return label_name_ok(k, strlen(k), 0);
	return dns_subdomain_ok(k, (size_t)(slash - k)) &&
	       label_name_ok(slash + 1, strlen(slash + 1), 0);
}

int api_check_label(const char *key, json_object *v, struct api_req *r)
{
	if (!label_key_ok(key))
		return api_fail(r, ORC_EINVALID, "label key '%.80s' is invalid: an optional DNS "
				"subdomain prefix and '/', then a name of 1-63 characters of "
				"[A-Za-z0-9._-] starting and ending with a letter or digit", key);
	if (!v || !json_object_is_type(v, json_type_string) ||
	    strlen(json_object_get_string(v)) != (size_t)json_object_get_string_len(v) ||
	    !label_name_ok(json_object_get_string(v), (size_t)json_object_get_string_len(v), 1))
		return api_fail(r, ORC_EINVALID, "label '%.80s' has an invalid value: a string of "
				"at most 63 characters of [A-Za-z0-9._-] starting and ending with "
				"a letter or digit, or empty", key);
	return 0;
}

int api_check_labels(json_object *o, struct api_req *r)
{
	int err;

	if (json_object_object_length(o) > API_LABELS_MAX)
		return api_fail(r, ORC_EINVALID, "field 'labels' has %d entries; at most %d are "
				"allowed", json_object_object_length(o), API_LABELS_MAX);
	json_object_object_foreach(o, k, v) {
		if ((err = api_check_label(k, v, r)) < 0)
			return err;
	}
	return 0;
}

static int env_name_ok(const char *k)
{
	size_t i, n = strlen(k);

	if (n < 1 || n > 256 || (k[0] >= '0' && k[0] <= '9'))
		return 0;
	for (i = 0; i < n; i++) {
		char c = k[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
			return 0;
	}
	return 1;
}

int api_check_env(json_object *o, const char *field, struct api_req *r)
{
	if (json_object_object_length(o) > API_ENV_MAX)
		return api_fail(r, ORC_EINVALID, "field '%s' has more than %d entries", field,
				API_ENV_MAX);
	json_object_object_foreach(o, k, v) {
		if (!env_name_ok(k))
			return api_fail(r, ORC_EINVALID, "environment variable name '%.80s' is "
					"invalid in '%s'", k, field);
		if (!plain_string(v, API_ENV_VALUE_MAX))
			return api_fail(r, ORC_EINVALID, "environment variable '%.80s' in '%s' "
					"must be a string (at most 65536 bytes, no NUL)", k, field);
	}
	return 0;
}

int api_check_path(json_object *v, const char *field, struct api_req *r)
{
	const char *s;

	if (!plain_string(v, API_PATH_MAX))
		return api_fail(r, ORC_EINVALID, "field '%s' must be a string of at most 4096 "
				"bytes", field);
	s = json_object_get_string(v);
	if (s[0] != '/')
		return api_fail(r, ORC_EINVALID, "field '%s' must be an absolute path", field);
	return 0;
}

int api_check_command(json_object *v, struct api_req *r)
{
	size_t i, n;

	if (json_object_is_type(v, json_type_string)) {
		if (!plain_string(v, API_COMMAND_MAX) || !json_object_get_string_len(v))
			return api_fail(r, ORC_EINVALID, "field 'command' must be a non-empty "
					"string of at most 1 MiB without NUL bytes");
		return 0;
	}
	if (!json_object_is_type(v, json_type_array))
		return api_fail(r, ORC_EINVALID, "field 'command' must be a string or an array of "
				"strings");
	n = json_object_array_length(v);
	if (n < 1 || n > API_ARGV_MAX)
		return api_fail(r, ORC_EINVALID, "field 'command' must have 1 to 4096 elements");
	for (i = 0; i < n; i++) {
		json_object *a = json_object_array_get_idx(v, i);
		if (!a || !plain_string(a, API_COMMAND_MAX))
			return api_fail(r, ORC_EINVALID, "every element of 'command' must be a "
					"string without NUL bytes");
	}
	if (!json_object_get_string_len(json_object_array_get_idx(v, 0)))
		return api_fail(r, ORC_EINVALID, "the program name (command[0]) must not be empty");
	return 0;
}

int api_check_idempotency_key(const char *s)
{
	size_t i, n = strlen(s);

	if (n < 1 || n > 255)
		return 0;
	for (i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
			return 0;
	return 1;
}
