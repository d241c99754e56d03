#include "dl.h"

#include <dlfcn.h>
#include <link.h>
#include <stdio.h>

#include "err.h"
#include "log.h"

/*
 * The lazy loader (dl.h). Loading is rare (once per library per process)
 * and takes a mutex; the fast path is one atomic load of the handle.
 * dlopen searches like the dynamic loader: the bundle's --library-path or
 * the agent's DT_RPATH (scripts/agent-bundle.sh), else the system's paths.
 */

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

static struct agent_dl_lib *const lazy_libs[] = { &agent_dl_git, &agent_dl_archive };

static int open_lib(struct agent_dl_lib *lib, char *msg, size_t msglen)
{
	const struct agent_dl_sym *s;
	const char *why;
	void *h, *fn;

	/* RTLD_NOW: a missing symbol fails here, with a message, rather
	 * than as a crash in the middle of a request. */
	if (!(h = dlopen(lib->soname, RTLD_NOW | RTLD_LOCAL))) {
		why = dlerror();
		snprintf(msg, msglen, "%s cannot be loaded (%s): %s", lib->label, lib->soname,
			 why ? why : "unknown error");
		return ORC_ERROR;
	}
	for (s = lib->syms; s->name; s++) {
		dlerror();
		if (!(fn = dlsym(h, s->name))) {
			why = dlerror();
			snprintf(msg, msglen, "%s (%s) has no %s: %s", lib->label, lib->soname,
				 s->name, why ? why : "null symbol");
			dlclose(h);
			return ORC_ERROR;
		}
		*s->slot = fn;
	}
	if (lib->init)
		lib->init();
	__atomic_store_n(&lib->handle, h, __ATOMIC_RELEASE);
	return 0;
}

int agent_dl_load(struct agent_dl_lib *lib, char *msg, size_t msglen)
{
	int err = 0;

	if (__atomic_load_n(&lib->handle, __ATOMIC_ACQUIRE))
		return 0;
	pthread_mutex_lock(&load_lock);
	if (!lib->handle && (err = open_lib(lib, msg, msglen)) == 0)
		orc_log(ORC_LOG_INFO, "library loaded", "library", lib->soname, NULL);
	pthread_mutex_unlock(&load_lock);
	if (err)
		orc_log(ORC_LOG_ERROR, "library load failed", "detail", msg, NULL);
	return err;
}

int agent_dl_print_paths(void)
{
	struct link_map *map;
	char msg[1024];
	size_t i;

	for (i = 0; i < sizeof(lazy_libs) / sizeof(*lazy_libs); i++) {
		if (agent_dl_load(lazy_libs[i], msg, sizeof(msg)) < 0) {
			fprintf(stderr, "orchard-agent: %s\n", msg);
			return ORC_ERROR;
		}
		if (dlinfo(lazy_libs[i]->handle, RTLD_DI_LINKMAP, &map) < 0 || !map->l_name[0]) {
			fprintf(stderr, "orchard-agent: no path for %s\n", lazy_libs[i]->soname);
			return ORC_ERROR;
		}
		printf("%s\n", map->l_name);
	}
	return 0;
}
