#ifndef AGENT_TAR_H
#define AGENT_TAR_H
/*
 * Directories as tar streams (libarchive): GET /archive writes one, PUT
 * /archive extracts one (handlers in files.h).
 */

#include <stddef.h>

#define AGENT_TAR_MAX_DEPTH 256    /* directory levels archived */

/* Load libarchive on first use (dl_archive.c): 0, or ORC_ERROR and msg
 * naming the library. Before any libarchive function. */
int agent_archive_load(char *msg, size_t msglen);

/* An entry name that stays inside the target directory: not empty, not
 * absolute, no ".." component. 0 or ORC_EINVALID. (tar_name.c) */
int agent_tar_name_check(const char *name);
#endif
