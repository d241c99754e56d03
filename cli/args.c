/*
 * Arguments checked before anything is sent: durations, K=V pairs, and the
 * questions asked on a terminal.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "err.h"
#include "strutil.h"
#include "xalloc.h"

#define KV_KEY_MAX 256

int cli_parse_duration(int64_t *out, const char *arg, int64_t min, int64_t max)
{
	const char *p = arg;
	int64_t total = 0, n, unit;

	if (!*p)
		return ORC_EINVALID;
	while (*p) {
		if (!isdigit((unsigned char)*p))
			return ORC_EINVALID;
		for (n = 0; isdigit((unsigned char)*p); p++) {
			if (n > (INT64_MAX - 9) / 10)
				return ORC_EINVALID;
			n = n * 10 + (*p - '0');
		}
		switch (*p) {
		case '\0': unit = 1; break;   /* a bare number: seconds, last only */
		case 's': unit = 1; p++; break;
		case 'm': unit = 60; p++; break;
		case 'h': unit = 3600; p++; break;
		case 'd': unit = 86400; p++; break;
		default: return ORC_EINVALID;
		}
		if (n > (max - total) / unit)
			return ORC_EINVALID;
		total += n * unit;
	}
	if (total < min || total > max)
		return ORC_EINVALID;
	*out = total;
	return 0;
}

int cli_kv_add(json_object *obj, const char *kv)
{
	const char *eq = strchr(kv, '=');
	char *key;

	if (!eq || eq == kv || (size_t)(eq - kv) > KV_KEY_MAX || !orc_utf8_valid(kv, strlen(kv)))
		return ORC_EINVALID;
	key = xstrndup(kv, (size_t)(eq - kv));
	json_object_object_add(obj, key, json_object_new_string(eq + 1));
	free(key);
	return 0;
}

int cli_confirm(const char *prompt)
{
	char line[64];

	fprintf(stderr, "%s [y/N] ", prompt);
	fflush(stderr);
	if (!fgets(line, sizeof(line), stdin))
		return 0;
	line[strcspn(line, "\r\n")] = '\0';
	return !strcasecmp(line, "y") || !strcasecmp(line, "yes");
}

int cli_stderr_is_tty(void)
{
	const char *term = getenv("TERM");

	return isatty(STDERR_FILENO) && (!term || strcmp(term, "dumb"));
}
