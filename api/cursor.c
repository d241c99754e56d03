/*
 * Keyset pagination cursors shared by the list routes: "<created_at in
 * epoch microseconds>_<id>", the position of the last row of a page. Opaque
 * to clients; anything that does not parse is 422 at the route.
 */
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "err.h"
#include "strutil.h"

int api_cursor_parse(struct api_cursor *out, const char *s)
{
	const char *sep = strchr(s, '_');
	char num[24];
	int64_t v;

	if (!sep || sep == s || (size_t)(sep - s) >= sizeof(num))
		return ORC_EINVALID;
	memcpy(num, s, (size_t)(sep - s));
	num[sep - s] = '\0';
	if (orc_parse_i64(&v, num, 0, INT64_MAX) < 0 || !api_valid_id(sep + 1))
		return ORC_EINVALID;
	snprintf(out->us, sizeof(out->us), "%lld", (long long)v);
	out->id = sep + 1;
	return 0;
}
