/*
 * The tar entry name check (tar_name.h).
 */
#include <string.h>

#include "err.h"
#include "tar_name.h"

int orc_tar_name_check(const char *name)
{
	const char *p = name, *end;
	size_t len;

	if (!name || !*name || *name == '/')
		return ORC_EINVALID;
	while (*p) {
		end = strchr(p, '/');
		len = end ? (size_t)(end - p) : strlen(p);
		if (len == 2 && p[0] == '.' && p[1] == '.')
			return ORC_EINVALID;
		if (!end)
			break;
		p = end + 1;
	}
	return 0;
}
