/*
 * A Kubernetes watch event line as the controller reads it
 * (controller/k8s_watch.c, on_event): {"type", "object"}, the sandbox the
 * pod belongs to (k8s_object_sandbox, controller/k8s_pod.c) and the pod's
 * state (k8s_pod_state_read, controller/k8s_podstate.c). The API server is
 * trusted but not its every byte: a pod's status carries kubelet and
 * scheduler text.
 *
 * Properties: the sandbox id, when there is one, is a DNS label; the state
 * is one of the three phases with every text field NUL-terminated inside
 * its array; an image error is a failure; a failure and an unschedulable
 * pod say why; ready needs an IP; reading is deterministic.
 */
#include "k8s.h"

#include "fuzz.h"
#include "json.h"
#include "strutil.h"

static int terminated(const char *s, size_t n)
{
	return memchr(s, '\0', n) != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct k8s_pod_state st, again;
	json_object *ev = NULL, *obj = NULL;
	const char *type = NULL, *id;

	if (orc_json_parse_object(&ev, (const char *)data, size, NULL, 0) < 0)
		return 0;
	if (orc_json_get_str(ev, "type", &type, NULL, 0) != 0 ||
	    orc_json_get_object(ev, "object", &obj, NULL, 0) != 0 || !obj)
		goto done;
	id = k8s_object_sandbox(obj);
	FUZZ_ASSERT(!id || orc_is_dns_label(id));
	memset(&st, 0xa5, sizeof(st));
	k8s_pod_state_read(&st, obj);
	FUZZ_ASSERT(st.phase == K8S_POD_PENDING || st.phase == K8S_POD_READY || st.phase == K8S_POD_FAILED);
	FUZZ_ASSERT(terminated(st.uid, sizeof(st.uid)) && terminated(st.ip, sizeof(st.ip)) &&
		    terminated(st.message, sizeof(st.message)));
	FUZZ_ASSERT(!st.image_error || st.phase == K8S_POD_FAILED);
	FUZZ_ASSERT(st.phase != K8S_POD_FAILED || st.message[0]);
	FUZZ_ASSERT(!st.unschedulable || st.message[0]);
	FUZZ_ASSERT(st.phase != K8S_POD_READY || st.ip[0]);
	k8s_pod_state_read(&again, obj);
	FUZZ_ASSERT(!memcmp(&st, &again, sizeof(st)));
done:
	json_object_put(ev);
	return 0;
}
