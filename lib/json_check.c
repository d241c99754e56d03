/*
 * A strict RFC 8259 syntax check run before json-c parses a body: json-c's
 * own strict mode still accepts single-quoted keys, NaN, Infinity, "1." and
 * raw control characters in strings, which an API must refuse.
 */
#include "json.h"

#include <stdio.h>
#include <string.h>

#include "err.h"

struct scan {
	const unsigned char *p, *end;
	const char *why;
};

static void skip_ws(struct scan *s)
{
	while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
		s->p++;
}

static int is_digit(const struct scan *s)
{
	return s->p < s->end && *s->p >= '0' && *s->p <= '9';
}

static int scan_number(struct scan *s)
{
	if (s->p < s->end && *s->p == '-')
		s->p++;
	if (!is_digit(s))
		return s->why = "invalid number", -1;
	if (*s->p == '0')
		s->p++;
	else
		while (is_digit(s))
			s->p++;
	if (s->p < s->end && *s->p == '.') {
		s->p++;
		if (!is_digit(s))
			return s->why = "invalid number", -1;
		while (is_digit(s))
			s->p++;
	}
	if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
		s->p++;
		if (s->p < s->end && (*s->p == '+' || *s->p == '-'))
			s->p++;
		if (!is_digit(s))
			return s->why = "invalid number", -1;
		while (is_digit(s))
			s->p++;
	}
	return 0;
}

static int scan_string(struct scan *s)
{
	s->p++; /* opening quote */
	while (s->p < s->end) {
		unsigned char c = *s->p++;
		if (c == '"')
			return 0;
		if (c < 0x20)
			return s->why = "control character in string", -1;
		if (c != '\\')
			continue;
		if (s->p >= s->end)
			break;
		c = *s->p++;
		if (c == 'u') {
			int i;
			for (i = 0; i < 4; i++, s->p++)
				if (s->p >= s->end || !strchr("0123456789abcdefABCDEF", *s->p) || !*s->p)
					return s->why = "invalid \\u escape", -1;
		} else if (!strchr("\"\\/bfnrt", c) || !c) {
			return s->why = "invalid escape in string", -1;
		}
	}
	return s->why = "unterminated string", -1;
}

static int scan_word(struct scan *s, const char *w)
{
	size_t n = strlen(w);

	if ((size_t)(s->end - s->p) < n || memcmp(s->p, w, n))
		return s->why = "unexpected token", -1;
	s->p += n;
	return 0;
}

/* Containers are tracked on an explicit stack, so depth cannot blow ours. */
int orc_json_check(const char *data, size_t len, int max_depth, char *msg, size_t msglen)
{
	struct scan s = { (const unsigned char *)data, (const unsigned char *)data + len, NULL };
	char stack[ORC_JSON_MAX_DEPTH + 1];
	int depth = 0, expect_value = 1, err = 0;

	if (max_depth > ORC_JSON_MAX_DEPTH)
		max_depth = ORC_JSON_MAX_DEPTH;
	for (;;) {
		skip_ws(&s);
		if (expect_value) {
			if (s.p >= s.end) {
				s.why = "unexpected end of input";
				err = -1;
			} else if (*s.p == '{' || *s.p == '[') {
				if (depth >= max_depth) {
					s.why = "nesting too deep";
					err = -1;
					break;
				}
				stack[depth++] = (char)*s.p++;
				skip_ws(&s);
				if (s.p < s.end && *s.p == (stack[depth - 1] == '{' ? '}' : ']')) {
					s.p++;
					depth--;
					expect_value = 0;
				} else if (stack[depth - 1] == '{') {
					if (s.p >= s.end || *s.p != '"') {
						s.why = "object keys must be double-quoted strings";
						err = -1;
					} else if (!(err = scan_string(&s))) {
						skip_ws(&s);
						if (s.p >= s.end || *s.p++ != ':')
							s.why = "expected ':'", err = -1;
					}
				}
				if (err)
					break;
				continue;
			} else if (*s.p == '"') {
				err = scan_string(&s);
			} else if (*s.p == '-' || (*s.p >= '0' && *s.p <= '9')) {
				err = scan_number(&s);
			} else if (*s.p == 't') {
				err = scan_word(&s, "true");
			} else if (*s.p == 'f') {
				err = scan_word(&s, "false");
			} else if (*s.p == 'n') {
				err = scan_word(&s, "null");
			} else {
				s.why = "unexpected character";
				err = -1;
			}
			if (err)
				break;
			expect_value = 0;
			continue;
		}
		/* after a value */
		if (!depth)
			break;
		if (s.p >= s.end) {
			s.why = "unexpected end of input";
			err = -1;
			break;
		}
		if (*s.p == ',') {
			s.p++;
			expect_value = 1;
			if (stack[depth - 1] == '{') {
				skip_ws(&s);
				if (s.p >= s.end || *s.p != '"') {
					s.why = "object keys must be double-quoted strings";
					err = -1;
					break;
				}
				if ((err = scan_string(&s)) < 0)
					break;
				skip_ws(&s);
				if (s.p >= s.end || *s.p++ != ':') {
					s.why = "expected ':'";
					err = -1;
					break;
				}
			}
		} else if (*s.p == (stack[depth - 1] == '{' ? '}' : ']')) {
			s.p++;
			depth--;
		} else {
			s.why = stack[depth - 1] == '{' ? "expected ',' or '}'" : "expected ',' or ']'";
			err = -1;
			break;
		}
	}
	if (!err && s.p < s.end) {
		s.why = "trailing data after the value";
		err = -1;
	}
	if (err) {
		if (msg && msglen)
			snprintf(msg, msglen, "malformed JSON: %s at byte %zu", s.why,
				 (size_t)(s.p - (const unsigned char *)data));
		return ORC_EINVALID;
	}
	return 0;
}
