/*
 * The controller's rules, from its archive (libcontroller.a, the
 * Makefile): Kubernetes pod state -> sandbox state (k8s_podstate.c,
 * docs/kubernetes.md) and the cgroup paths of a sandbox (cgroup.c).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "../../controller/cgroup.h"
#include "../../controller/k8s.h"
#include "err.h"
#include "unit.h"
#include "xalloc.h"

/* ---- k8s_podstate.c ------------------------------------------------------ */

static void read_pod(struct k8s_pod_state *st, const char *text)
{
	json_object *pod = json_tokener_parse(text);

	CHECK(pod != NULL);
	k8s_pod_state_read(st, pod);
	json_object_put(pod);
}

#define READY_CONDS "\"conditions\": [{\"type\": \"Ready\", \"status\": \"True\"}]"

static void a_running_ready_pod_with_an_ip_is_ready(void)
{
	struct k8s_pod_state st;

	read_pod(&st, "{\"metadata\": {\"uid\": \"u-1\"}, \"status\": {\"phase\": \"Running\", "
		 "\"podIP\": \"10.0.0.7\", " READY_CONDS "}}");
	CHECK(st.phase == K8S_POD_READY);
	CHECK_STR(st.uid, "u-1");
	CHECK_STR(st.ip, "10.0.0.7");
	CHECK(!st.deleting && !st.unschedulable && !st.image_error && !st.message[0]);
	/* without the IP, or not Ready, or not Running: pending */
	read_pod(&st, "{\"status\": {\"phase\": \"Running\", " READY_CONDS "}}");
	CHECK(st.phase == K8S_POD_PENDING);
	read_pod(&st, "{\"status\": {\"phase\": \"Running\", \"podIP\": \"10.0.0.7\"}}");
	CHECK(st.phase == K8S_POD_PENDING);
	read_pod(&st, "{\"status\": {\"phase\": \"Pending\", \"podIP\": \"10.0.0.7\", " READY_CONDS "}}");
	CHECK(st.phase == K8S_POD_PENDING);
}

static void missing_or_odd_fields_read_as_pending(void)
{
	static const char *const pods[] = { "{}", "[]", "{\"status\": 5}", "{\"status\": {\"phase\": 1}}",
					    "{\"status\": {\"conditions\": {}}}",
					    "{\"status\": {\"containerStatuses\": [1, null, {}]}}" };
	struct k8s_pod_state st;
	size_t i;

	for (i = 0; i < sizeof(pods) / sizeof(*pods); i++) {
		read_pod(&st, pods[i]);
		CHECK(st.phase == K8S_POD_PENDING && !st.uid[0] && !st.ip[0]);
	}
}

static void a_bad_image_fails_as_an_image_error(void)
{
	struct k8s_pod_state st;

	read_pod(&st, "{\"status\": {\"phase\": \"Pending\", \"containerStatuses\": [{\"name\": \"s\", "
		 "\"state\": {\"waiting\": {\"reason\": \"ImagePullBackOff\", \"message\": \"no such image\"}}}]}}");
	CHECK(st.phase == K8S_POD_FAILED && st.image_error);
	CHECK(strstr(st.message, "ImagePullBackOff") && strstr(st.message, "no such image"));
	read_pod(&st, "{\"status\": {\"containerStatuses\": [{\"state\": {\"waiting\": "
		 "{\"reason\": \"CrashLoopBackOff\"}}}]}}");
	CHECK(st.phase == K8S_POD_FAILED && !st.image_error);
	/* a passing wait is pending, with its reason */
	read_pod(&st, "{\"status\": {\"containerStatuses\": [{\"state\": {\"waiting\": "
		 "{\"reason\": \"ContainerCreating\"}}}]}}");
	CHECK(st.phase == K8S_POD_PENDING);
	CHECK_STR(st.message, "ContainerCreating");
}

static void exited_containers_fail_the_pod(void)
{
	struct k8s_pod_state st;

	read_pod(&st, "{\"status\": {\"phase\": \"Running\", \"podIP\": \"10.0.0.7\", " READY_CONDS ", "
		 "\"containerStatuses\": [{\"state\": {\"terminated\": {\"exitCode\": 137, "
		 "\"reason\": \"OOMKilled\"}}}]}}");
	CHECK(st.phase == K8S_POD_FAILED);
	CHECK(strstr(st.message, "137") && strstr(st.message, "OOMKilled"));
	/* an init container that exited 0 is fine; one that did not fails */
	read_pod(&st, "{\"status\": {\"initContainerStatuses\": [{\"name\": \"init\", \"state\": "
		 "{\"terminated\": {\"exitCode\": 0}}}]}}");
	CHECK(st.phase == K8S_POD_PENDING);
	read_pod(&st, "{\"status\": {\"initContainerStatuses\": [{\"name\": \"init\", \"state\": "
		 "{\"terminated\": {\"exitCode\": 2, \"reason\": \"Error\"}}}]}}");
	CHECK(st.phase == K8S_POD_FAILED && strstr(st.message, "init") && strstr(st.message, "2"));
	read_pod(&st, "{\"status\": {\"phase\": \"Failed\", \"reason\": \"DeadlineExceeded\"}}");
	CHECK(st.phase == K8S_POD_FAILED && strstr(st.message, "DeadlineExceeded"));
	read_pod(&st, "{\"status\": {\"phase\": \"Succeeded\"}}");
	CHECK(st.phase == K8S_POD_FAILED);
}

static void unschedulable_and_deleting_pods_say_so(void)
{
	struct k8s_pod_state st;

	read_pod(&st, "{\"status\": {\"phase\": \"Pending\", \"conditions\": [{\"type\": \"PodScheduled\", "
		 "\"status\": \"False\", \"reason\": \"Unschedulable\", \"message\": \"0/3 nodes\"}]}}");
	CHECK(st.phase == K8S_POD_PENDING && st.unschedulable);
	CHECK(strstr(st.message, "0/3 nodes") != NULL);
	read_pod(&st, "{\"metadata\": {\"deletionTimestamp\": \"2026-01-01T00:00:00Z\"}, "
		 "\"status\": {\"phase\": \"Running\"}}");
	CHECK(st.deleting);
}

/* ---- cgroup.c ------------------------------------------------------------ */

static void a_sandbox_has_one_dir_per_distinct_base(void)
{
	struct ctl_cgroups cg = CTL_CGROUPS_INIT;
	struct ctl_strv dirs = CTL_STRV_INIT;
	char v2[] = "/sys/fs/cgroup/orchard-t", cpu[] = "/sys/fs/cgroup/cpu/orchard-t",
	     mem[] = "/sys/fs/cgroup/memory/orchard-t";

	/* v2: every controller in one hierarchy, so one directory */
	cg.c[CTL_CG_CPU].version = cg.c[CTL_CG_MEMORY].version = cg.c[CTL_CG_PIDS].version = 2;
	cg.c[CTL_CG_CPU].base = cg.c[CTL_CG_MEMORY].base = cg.c[CTL_CG_PIDS].base = v2;
	ctl_cgroup_dirs(&dirs, &cg, "sb-1");
	CHECK(dirs.n == 1);
	if (dirs.n == 1)
		CHECK_STR(dirs.v[0], "/sys/fs/cgroup/orchard-t/sb-1");
	ctl_strv_release(&dirs);
	/* v1: one per hierarchy; a controller not enforced has none */
	cg.c[CTL_CG_CPU].version = cg.c[CTL_CG_MEMORY].version = 1;
	cg.c[CTL_CG_CPU].base = cpu;
	cg.c[CTL_CG_MEMORY].base = mem;
	cg.c[CTL_CG_PIDS].version = 0;
	ctl_cgroup_dirs(&dirs, &cg, "sb-2");
	CHECK(dirs.n == 2);
	if (dirs.n == 2) {
		CHECK_STR(dirs.v[0], "/sys/fs/cgroup/cpu/orchard-t/sb-2");
		CHECK_STR(dirs.v[1], "/sys/fs/cgroup/memory/orchard-t/sb-2");
	}
	ctl_strv_release(&dirs);
	/* nothing enforced: no directories */
	cg.c[CTL_CG_CPU].version = cg.c[CTL_CG_MEMORY].version = 0;
	ctl_cgroup_dirs(&dirs, &cg, "sb-3");
	CHECK(dirs.n == 0);
	ctl_strv_release(&dirs);
}

static void only_sandbox_cgroups_are_removed(void)
{
	static const struct { const char *dir, *name; } bad[] = {
		{ "relative/orchard-t/sb-1", "sb-1" },          /* not absolute */
		{ "/sys/fs/cgroup/orchard-t/sb-1", "sb-2" },     /* another name */
		{ "/sys/fs/cgroup/other/sb-1", "sb-1" },         /* not under a base */
		{ "/sys/fs/cgroup/orchard-t/../sb-1", "sb-1" },  /* dot segments */
		{ "/sys/fs/cgroup//orchard-t/sb-1", "sb-1" },
		{ "/sys/fs/cgroup/orchard-t/Bad_Name", "Bad_Name" },
		{ "/", "" },
	};
	char tmpl[] = "/tmp/orchard-unit-XXXXXX", *sub, *dir;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		if (ctl_cgroup_remove(bad[i].dir, bad[i].name, 0) != ORC_EINVALID) {
			fprintf(stderr, "    %s was not refused\n", bad[i].dir);
			unit_failures++;
		}
	}
	/* the right shape but not on a cgroup file system: refused, and kept */
	CHECK(mkdtemp(tmpl) != NULL);
	sub = xasprintf("%s/orchard-t", tmpl);
	dir = xasprintf("%s/sb-1", sub);
	CHECK(mkdir(sub, 0700) == 0 && mkdir(dir, 0700) == 0);
	CHECK(ctl_cgroup_remove(dir, "sb-1", 0) == ORC_EINVALID);
	CHECK(access(dir, F_OK) == 0);
	/* gone already: nothing to do */
	CHECK(rmdir(dir) == 0);
	CHECK(ctl_cgroup_remove(dir, "sb-1", 0) == 0);
	rmdir(sub);
	rmdir(tmpl);
	free(dir);
	free(sub);
}

const struct unit_test controller_rule_tests[] = {
	{ "podstate: running, Ready, with an IP is ready", a_running_ready_pod_with_an_ip_is_ready },
	{ "podstate: missing or odd fields read as pending", missing_or_odd_fields_read_as_pending },
	{ "podstate: a bad image fails as an image error", a_bad_image_fails_as_an_image_error },
	{ "podstate: exited containers fail the pod", exited_containers_fail_the_pod },
	{ "podstate: unschedulable and deleting pods", unschedulable_and_deleting_pods_say_so },
	{ "cgroup: one dir per distinct base", a_sandbox_has_one_dir_per_distinct_base },
	{ "cgroup: only sandbox cgroups are removed", only_sandbox_cgroups_are_removed },
	{ NULL, NULL }
};
