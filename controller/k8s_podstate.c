/*
 * Pod state -> sandbox state (docs/kubernetes.md, "Pod state → sandbox
 * state"): Running with Ready=True is ready; an image that cannot be
 * pulled, a container that cannot be created, a container or init
 * container that exited, or a Failed/Succeeded phase (activeDeadlineSeconds
 * included) is failed with the reason; anything else is pending, with the
 * scheduler's message when the pod is unschedulable.
 */
#include "k8s.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Waiting reasons after which the container never starts by itself. */
static const struct {
	const char *reason;
	int image;
} fatal_waits[] = {
	{ "ErrImagePull", 1 },
	{ "ImagePullBackOff", 1 },
	{ "InvalidImageName", 1 },
	{ "ErrImageNeverPull", 1 },
	{ "CreateContainerConfigError", 0 },
	{ "CreateContainerError", 0 },
	{ "RunContainerError", 0 },
	{ "CrashLoopBackOff", 0 },
};

static json_object *get(json_object *o, const char *key)
{
	json_object *v = NULL;

	if (!o || !json_object_object_get_ex(o, key, &v))
		return NULL;
	return v;
}

static const char *str(json_object *o, const char *key)
{
	json_object *v = get(o, key);

	return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

static void copy(char *dst, size_t n, const char *src)
{
	snprintf(dst, n, "%s", src ? src : "");
}

/* Mark the pod failed with a message (printf-style); the first reason
 * found is the one reported. */
static void __attribute__((format(printf, 3, 4)))
fail(struct k8s_pod_state *st, int image, const char *fmt, ...)
{
	va_list ap;

	if (st->phase == K8S_POD_FAILED)
		return;
	st->phase = K8S_POD_FAILED;
	st->image_error = image;
	va_start(ap, fmt);
	vsnprintf(st->message, sizeof(st->message), fmt, ap);
	va_end(ap);
}

static const char *or(const char *s, const char *dflt)
{
	return s ? s : dflt;
}

/* A container's state: waiting with a fatal reason or terminated fails
 * the pod (an init container only when it did not exit 0). */
static void container(struct k8s_pod_state *st, json_object *cs, int init)
{
	json_object *state = get(cs, "state"), *w = get(state, "waiting"), *t = get(state, "terminated");
	json_object *ec;
	const char *reason, *msg;
	int64_t code;
	size_t i;

	if (w && (reason = str(w, "reason")) != NULL) {
		msg = str(w, "message");
		for (i = 0; i < sizeof(fatal_waits) / sizeof(*fatal_waits); i++)
			if (!strcmp(reason, fatal_waits[i].reason))
				fail(st, fatal_waits[i].image, "%s%s%s", reason, msg ? ": " : "", or(msg, ""));
		if (st->phase != K8S_POD_FAILED && !st->message[0])
			copy(st->message, sizeof(st->message), reason);
	}
	if (!t)
		return;
	ec = get(t, "exitCode");
	code = ec && json_object_is_type(ec, json_type_int) ? json_object_get_int64(ec) : -1;
	reason = or(str(t, "reason"), "no reason");
	msg = str(t, "message");
	if (init && code != 0)
		fail(st, 0, "init container %s exited with code %lld (%s)%s%s", or(str(cs, "name"), "?"),
		     (long long)code, reason, msg ? ": " : "", or(msg, ""));
	else if (!init)
		fail(st, 0, "container exited with code %lld (%s)%s%s", (long long)code, reason,
		     msg ? ": " : "", or(msg, ""));
}

static void containers(struct k8s_pod_state *st, json_object *list, int init)
{
	size_t i, n;

	if (!list || !json_object_is_type(list, json_type_array))
		return;
	n = json_object_array_length(list);
	for (i = 0; i < n && i < 64; i++)
		container(st, json_object_array_get_idx(list, i), init);
}

void k8s_pod_state_read(struct k8s_pod_state *st, json_object *pod)
{
	json_object *status = get(pod, "status"), *conds = get(status, "conditions"), *c;
	const char *phase = str(status, "phase"), *type, *cstatus, *reason;
	int ready = 0;
	size_t i, n;

	memset(st, 0, sizeof(*st));
	st->phase = K8S_POD_PENDING;
	copy(st->uid, sizeof(st->uid), k8s_meta_str(pod, "uid"));
	copy(st->ip, sizeof(st->ip), str(status, "podIP"));
	st->deleting = k8s_meta_str(pod, "deletionTimestamp") != NULL;
	if (conds && json_object_is_type(conds, json_type_array)) {
		n = json_object_array_length(conds);
		for (i = 0; i < n && i < 64; i++) {
			c = json_object_array_get_idx(conds, i);
			type = str(c, "type");
			cstatus = str(c, "status");
			reason = str(c, "reason");
			if (!type || !cstatus)
				continue;
			if (!strcmp(type, "Ready") && !strcmp(cstatus, "True"))
				ready = 1;
			if (!strcmp(type, "PodScheduled") && !strcmp(cstatus, "False") && reason &&
			    !strcmp(reason, "Unschedulable")) {
				st->unschedulable = 1;
				snprintf(st->message, sizeof(st->message), "pod unschedulable: %s",
					 str(c, "message") ? str(c, "message") : "no node fits");
			}
		}
	}
	containers(st, get(status, "initContainerStatuses"), 1);
	containers(st, get(status, "containerStatuses"), 0);
	if (phase && (!strcmp(phase, "Failed") || !strcmp(phase, "Succeeded"))) {
		reason = str(status, "reason");
		fail(st, 0, "pod %s%s%s%s%s%s", phase, reason ? ": " : "", or(reason, ""),
		     str(status, "message") ? " (" : "", or(str(status, "message"), ""),
		     str(status, "message") ? ")" : "");
	}
	if (st->phase == K8S_POD_PENDING && phase && !strcmp(phase, "Running") && ready && st->ip[0])
		st->phase = K8S_POD_READY;
}
