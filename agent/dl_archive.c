#define AGENT_DL_ARCHIVE_TABLE
#include "dl_archive.h"

#include "dl.h"
#include "err.h"
#include "tar.h"

/* libarchive's function table (dl_archive.h). */

#define AGENT_DL_DEFINE(f) __typeof__(f) *agent_dl_##f;
AGENT_ARCHIVE_SYMS(AGENT_DL_DEFINE)
#undef AGENT_DL_DEFINE

static const struct agent_dl_sym syms[] = {
#define AGENT_DL_ENTRY(f) { #f, (void **)&agent_dl_##f },
	AGENT_ARCHIVE_SYMS(AGENT_DL_ENTRY)
#undef AGENT_DL_ENTRY
	{ NULL, NULL }
};

struct agent_dl_lib agent_dl_archive = { "libarchive", AGENT_LIBARCHIVE_SONAME, syms, NULL, NULL };

int agent_archive_load(char *msg, size_t msglen)
{
	return agent_dl_load(&agent_dl_archive, msg, msglen);
}
