#ifndef AGENT_DL_H
#define AGENT_DL_H
#include <pthread.h>
#include <stddef.h>
/*
 * Libraries loaded on first use (dlopen), so that an idle agent maps none
 * of them nor their dependencies: libgit2 (dl_git.c) and libarchive
 * (dl_archive.c). Each has a table of the functions the agent calls,
 * resolved with dlsym into function pointers that the library's names are
 * #defined to (dl_git.h, dl_archive.h). docs/agent-protocol.md, "Memory".
 */

struct agent_dl_sym {
	const char *name;
	void **slot;               /* a function pointer, as void * (POSIX dlsym) */
};

struct agent_dl_lib {
	const char *label;         /* "libgit2" */
	const char *soname;        /* "libgit2.so.1.5": searched as the loader searches */
	const struct agent_dl_sym *syms;  /* ends with { NULL, NULL } */
	void (*init)(void);        /* run once after loading, or NULL */
	void *handle;              /* set once loaded (atomic) */
};

extern struct agent_dl_lib agent_dl_git;       /* dl_git.c */
extern struct agent_dl_lib agent_dl_archive;   /* dl_archive.c */

/*
 * Load lib and resolve every symbol, once per process (later calls return
 * at once). 0, or ORC_ERROR with msg naming the library and why (dlerror);
 * a failed load is tried again on the next call.
 */
int agent_dl_load(struct agent_dl_lib *lib, char *msg, size_t msglen);

/*
 * --lazy-libs: load every lazy library and print the path it was loaded
 * from, one per line (scripts/agent-bundle.sh copies them and their
 * dependencies). 0, or ORC_ERROR after printing why to stderr.
 */
int agent_dl_print_paths(void);
#endif
