#include "json.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "err.h"
#include "strutil.h"

static int fail(char *msg, size_t msglen, const char *fmt, const char *a, const char *b)
{
	if (msg && msglen)
		snprintf(msg, msglen, fmt, a, b);
	return ORC_EINVALID;
}

int orc_json_parse(json_object **out, const char *data, size_t len, char *msg, size_t msglen)
{
	json_tokener *tok;
	json_object *o;
	enum json_tokener_error jerr;
	size_t off;
	int err = 0;

	if (len > INT32_MAX)
		return fail(msg, msglen, "%s%s", "body too large", "");
	if (len == 0)
		return fail(msg, msglen, "%s%s", "request body is empty; expected JSON", "");
	if ((err = orc_json_check(data, len, ORC_JSON_MAX_DEPTH, msg, msglen)) < 0)
		return err;
	if (!orc_utf8_valid(data, len))
		return fail(msg, msglen, "%s%s", "malformed JSON: invalid UTF-8", "");
	tok = json_tokener_new_ex(ORC_JSON_MAX_DEPTH + 1);
	if (!tok)
		return ORC_ERROR;
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	o = json_tokener_parse_ex(tok, data, (int)len);
	jerr = json_tokener_get_error(tok);
	off = json_tokener_get_parse_end(tok);
	/* A number at the very end stays open until json-c sees what follows
	 * it ("12" could go on); json_tokener_parse passes the NUL for that.
	 * orc_json_check has seen the whole value, so end it the same way. */
	if (!o && jerr == json_tokener_continue) {
		o = json_tokener_parse_ex(tok, "", 1);
		jerr = json_tokener_get_error(tok);
		off = len;
	}
	/* o is NULL on success too: that is JSON null. */
	if (jerr != json_tokener_success) {
		if (jerr == json_tokener_continue)
			err = fail(msg, msglen, "%s%s", "malformed JSON: unexpected end of input", "");
		else
			err = fail(msg, msglen, "malformed JSON: %s%s", json_tokener_error_desc(jerr), "");
		json_object_put(o);
		goto done;
	}
	for (; off < len; off++) {
		if (!strchr(" \t\r\n", data[off])) {
			json_object_put(o);
			err = fail(msg, msglen, "%s%s", "malformed JSON: trailing data after the value", "");
			goto done;
		}
	}
	*out = o;
done:
	json_tokener_free(tok);
	return err;
}

int orc_json_parse_object(json_object **out, const char *data, size_t len, char *msg, size_t msglen)
{
	json_object *o = NULL;
	int err;

	if ((err = orc_json_parse(&o, data, len, msg, msglen)) < 0)
		return err;
	if (!json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		return fail(msg, msglen, "%s%s", "request body must be a JSON object", "");
	}
	*out = o;
	return 0;
}

json_object *orc_json_field(json_object *o, const char *key)
{
	json_object *v = NULL;

	/* json-c answers 0 for NULL and for what is not an object */
	if (!o || !json_object_object_get_ex(o, key, &v))
		return NULL;
	return v; /* NULL for JSON null too */
}

const char *orc_json_str_or(json_object *o, const char *key, const char *dflt)
{
	json_object *v = orc_json_field(o, key);

	return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : dflt;
}

int orc_json_get_bytes(json_object *o, const char *key, const char **out, size_t *len_out,
		       char *msg, size_t msglen)
{
	json_object *v = orc_json_field(o, key);

	if (!v)
		return 1;
	if (!json_object_is_type(v, json_type_string))
		return fail(msg, msglen, "field '%s' must be a %s", key, "string");
	*out = json_object_get_string(v);
	*len_out = (size_t)json_object_get_string_len(v);
	return 0;
}

int orc_json_get_str(json_object *o, const char *key, const char **out, char *msg, size_t msglen)
{
	const char *s = NULL;
	size_t len = 0;
	int err;

	if ((err = orc_json_get_bytes(o, key, &s, &len, msg, msglen)) != 0)
		return err;
	/* A C string would silently end at the NUL: "ok\u0000../x" is not "ok". */
	if (memchr(s, '\0', len))
		return fail(msg, msglen, "field '%s' must not contain NUL %s", key, "characters");
	*out = s;
	return 0;
}

int orc_json_get_bool(json_object *o, const char *key, int *out, char *msg, size_t msglen)
{
	json_object *v = orc_json_field(o, key);

	if (!v)
		return 1;
	if (!json_object_is_type(v, json_type_boolean))
		return fail(msg, msglen, "field '%s' must be a %s", key, "boolean");
	*out = json_object_get_boolean(v);
	return 0;
}

int orc_json_get_int(json_object *o, const char *key, int64_t *out, int64_t min, int64_t max,
		     char *msg, size_t msglen)
{
	json_object *v = orc_json_field(o, key);
	int64_t i;

	if (!v)
		return 1;
	if (json_object_is_type(v, json_type_double)) {
		double d = json_object_get_double(v);
		if (!isfinite(d) || d != floor(d) || d < -9e15 || d > 9e15)
			return fail(msg, msglen, "field '%s' must be an %s", key, "integer");
		i = (int64_t)d;
	} else if (json_object_is_type(v, json_type_int)) {
		i = json_object_get_int64(v);
	} else {
		return fail(msg, msglen, "field '%s' must be an %s", key, "integer");
	}
	if (i < min || i > max) {
		char range[64];
		snprintf(range, sizeof(range), "%lld..%lld", (long long)min, (long long)max);
		return fail(msg, msglen, "field '%s' is out of range (%s)", key, range);
	}
	*out = i;
	return 0;
}

int orc_json_get_number(json_object *o, const char *key, double *out, double min, double max,
			char *msg, size_t msglen)
{
	json_object *v = orc_json_field(o, key);
	double d;

	if (!v)
		return 1;
	if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
		return fail(msg, msglen, "field '%s' must be a %s", key, "number");
	d = json_object_get_double(v);
	if (!isfinite(d) || d < min || d > max)
		return fail(msg, msglen, "field '%s' is out of %s", key, "range");
	*out = d;
	return 0;
}

int orc_json_get_object(json_object *o, const char *key, json_object **out, char *msg, size_t msglen)
{
	json_object *v = orc_json_field(o, key);

	if (!v)
		return 1;
	if (!json_object_is_type(v, json_type_object))
		return fail(msg, msglen, "field '%s' must be an %s", key, "object");
	*out = v;
	return 0;
}

int orc_json_quote_len(struct orc_buf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	size_t i;
	int err = orc_buf_addc(b, '"');

	for (i = 0; !err && i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		switch (c) {
		case '"': err = orc_buf_add(b, "\\\"", 2); break;
		case '\\': err = orc_buf_add(b, "\\\\", 2); break;
		case '\n': err = orc_buf_add(b, "\\n", 2); break;
		case '\r': err = orc_buf_add(b, "\\r", 2); break;
		case '\t': err = orc_buf_add(b, "\\t", 2); break;
		default:
			if (c < 0x20) {
				char e[6] = { '\\', 'u', '0', '0', hex[c >> 4], hex[c & 15] };
				err = orc_buf_add(b, e, 6);
			} else {
				err = orc_buf_addc(b, (char)c);
			}
		}
	}
	return err ? err : orc_buf_addc(b, '"');
}

int orc_json_quote(struct orc_buf *b, const char *s)
{
	return orc_json_quote_len(b, s ? s : "", s ? strlen(s) : 0);
}

const char *orc_json_str(json_object *o, size_t *len_out)
{
	size_t len = 0;
	const char *s = json_object_to_json_string_length(
		o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
	if (len_out)
		*len_out = len;
	return s;
}

json_object *orc_json_new_text(const char *s, size_t n)
{
	struct orc_buf b = ORC_BUF_INIT;
	json_object *o;
	size_t i = 0;

	if (orc_utf8_valid(s, n))
		return json_object_new_string_len(s, (int)n);
	/* Replace each byte that does not start a valid sequence with U+FFFD. */
	while (i < n) {
		size_t len = 1, k;
		unsigned char c = (unsigned char)s[i];
		if (c >= 0xc2 && c <= 0xdf) len = 2;
		else if (c >= 0xe0 && c <= 0xef) len = 3;
		else if (c >= 0xf0 && c <= 0xf4) len = 4;
		for (k = len; k > 1; k--)
			if (i + k <= n && orc_utf8_valid(s + i, k))
				break;
		if (c < 0x80 || (k > 1 && i + k <= n)) {
			orc_buf_add(&b, s + i, c < 0x80 ? 1 : k);
			i += c < 0x80 ? 1 : k;
		} else {
			orc_buf_add(&b, "\xef\xbf\xbd", 3);
			i++;
		}
	}
	o = json_object_new_string_len(orc_buf_cstr(&b), (int)b.len);
	orc_buf_release(&b);
	return o;
}
