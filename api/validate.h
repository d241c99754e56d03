#ifndef API_VALIDATE_H
#define API_VALIDATE_H
#include <stddef.h>
#include <json-c/json.h>

struct api_req;
/*
 * Checks of request fields shared by several routes. Each returns 0, or
 * ORC_EINVALID with a message (api_fail on r) naming the field and what
 * was expected.
 */
#define API_LABELS_MAX 64
#define API_LABEL_NAME_MAX 63      /* a key's name part, and a value */
#define API_LABEL_PREFIX_MAX 253    /* a key's optional DNS subdomain prefix */
#define API_ENV_MAX 1024
#define API_ENV_VALUE_MAX 65536
#define API_PATH_MAX 4096
#define API_COMMAND_MAX (1u << 20)
#define API_ARGV_MAX 4096

/*
 * labels, by Kubernetes' rules: at most 64; a key is an optional DNS
 * subdomain prefix (at most 253 characters) and '/', then a name of 1-63
 * characters of [A-Za-z0-9._-] starting and ending alphanumeric; a value is
 * empty or follows the rules of a name.
 */
int api_check_labels(json_object *o, struct api_req *r);
/* One label (v must be a string). */
int api_check_label(const char *key, json_object *v, struct api_req *r);
/* env: an object of strings with POSIX-ish names. */
int api_check_env(json_object *o, const char *field, struct api_req *r);
/* An absolute path string. */
int api_check_path(json_object *v, const char *field, struct api_req *r);
/* A non-empty string, or a non-empty array of strings (argv). */
int api_check_command(json_object *v, struct api_req *r);
/* Idempotency-Key header value: 1-255 printable ASCII characters. */
int api_check_idempotency_key(const char *s);
#endif
