#ifndef ORC_JSON_H
#define ORC_JSON_H
#include <stddef.h>
#include <stdint.h>
#include <json-c/json.h>

#include "buf.h"
/*
 * JSON at the edge: bounded parsing and typed field access over json-c.
 *
 * Getters return 0 when the field is present with the right type (and set
 * *out), 1 when it is absent or null (out untouched), and ORC_EINVALID when
 * it has the wrong type or is out of range; then msg (if not NULL) says
 * which field and what was expected.
 */

#define ORC_JSON_MAX_DEPTH 32

/* Strict RFC 8259 syntax check of exactly one value, nesting at most
 * max_depth (capped at ORC_JSON_MAX_DEPTH). */
int orc_json_check(const char *data, size_t len, int max_depth, char *msg, size_t msglen);

/* Parse exactly one JSON value from data[0..len): UTF-8 validated, depth
 * bounded, nothing but whitespace after it. ORC_EINVALID with a message. */
int orc_json_parse(json_object **out, const char *data, size_t len,
		   char *msg, size_t msglen);
/* Like orc_json_parse but the value must be an object. */
int orc_json_parse_object(json_object **out, const char *data, size_t len,
			  char *msg, size_t msglen);

/* Field key of o, or NULL when o is NULL or not an object, the field is
 * absent, or its value is null. No type check: for reading answers, not
 * for validating input (the getters below). */
json_object *orc_json_field(json_object *o, const char *key);
/* Field key of o when it is a string, else dflt. */
const char *orc_json_str_or(json_object *o, const char *key, const char *dflt);

/* A string without NUL characters (one would silently cut a C string). */
int orc_json_get_str(json_object *o, const char *key, const char **out,
		     char *msg, size_t msglen);
/* Any string, NUL characters included, with its length (e.g. stdin). */
int orc_json_get_bytes(json_object *o, const char *key, const char **out, size_t *len_out,
		       char *msg, size_t msglen);
int orc_json_get_bool(json_object *o, const char *key, int *out,
		      char *msg, size_t msglen);
/* Integers only (no fractions, no strings), within [min, max]. */
int orc_json_get_int(json_object *o, const char *key, int64_t *out,
		     int64_t min, int64_t max, char *msg, size_t msglen);
/* Integers or floats within [min, max]. */
int orc_json_get_number(json_object *o, const char *key, double *out,
			double min, double max, char *msg, size_t msglen);
int orc_json_get_object(json_object *o, const char *key, json_object **out,
			char *msg, size_t msglen);

/* Append s as a JSON string literal (with quotes). */
int orc_json_quote(struct orc_buf *b, const char *s);
int orc_json_quote_len(struct orc_buf *b, const char *s, size_t n);
/* Compact serialisation of o (owned by o; valid until o changes). */
const char *orc_json_str(json_object *o, size_t *len_out);
/* json_object_new_string_len, replacing invalid UTF-8 with U+FFFD. */
json_object *orc_json_new_text(const char *s, size_t n);
#endif
