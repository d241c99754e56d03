/*
 * Scenario 4, files. The API has no file routes yet (neither Orchard's
 * base64 `/files` nor raw streams), so this only probes for them and says
 * so; it is the place to add the 256 MiB raw upload/download, the
 * 10,000-file tar and the base64 comparison once the routes exist.
 */
#include "bench.h"

struct probe {
	const char *what;
	const char *fmt;      /* path with one %s for the sandbox id */
};

static const struct probe probes[] = {
	{ "raw download", "/v1/sandboxes/%s/files/raw?path=/etc/hostname" },
	{ "base64 download", "/v1/sandboxes/%s/files?path=/etc/hostname" },
	{ "tar download", "/v1/sandboxes/%s/files/tar?path=/etc" },
};

int bench_files(const struct bench_cfg *cfg, struct bench_report *r)
{
	struct bench_http c;
	json_object *found = json_object_new_object();
	char id[64], path[256];
	size_t i, avail = 0;
	int err = -1;

	if (bench_http_init_api(&c, cfg) < 0) {
		json_object_put(found);
		return -1;
	}
	if (bench_sandbox_create_ready(id, sizeof(id), &c, cfg->image, 60) < 0) {
		fprintf(stderr, "orchard-bench: sandbox for the files scenario: %s\n", c.err);
		goto done;
	}
	for (i = 0; i < sizeof(probes) / sizeof(*probes); i++) {
		snprintf(path, sizeof(path), probes[i].fmt, id);
		if (bench_http_do(&c, "GET", path, NULL, 10000) < 0)
			continue;
		json_object_object_add(found, probes[i].what, json_object_new_int64(c.status));
		if (c.status != 404)
			avail++;
	}
	bench_sandbox_delete(&c, id);
	bench_report_extra(r, "probe_status", found);
	found = NULL;
	if (!avail) {
		printf("not available: the API has no raw file routes yet "
		       "(GET .../files/raw, .../files and .../files/tar answer 404)\n");
		bench_report_note(r, "not available: the API has no raw file routes yet");
	} else {
		bench_report_note(r, "file routes answer, but this benchmark does not "
				  "measure them yet (bench/files.c)");
	}
	err = 0;
done:
	json_object_put(found);
	bench_http_release(&c);
	return err;
}
