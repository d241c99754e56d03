#include "server.h"

#include <unistd.h>

#include "version.h"

/* GET /health: answers without waiting for a running exec. */
void agent_handle_health(struct agent_reply *reply, const struct agent_request *req)
{
	json_object *o = json_object_new_object();

	(void)req;
	json_object_object_add(o, "status", json_object_new_string("ok"));
	json_object_object_add(o, "version", json_object_new_string(ORC_VERSION));
	json_object_object_add(o, "pid", json_object_new_int64((int64_t)getpid()));
	agent_reply_json(reply, 200, o);
	json_object_put(o);
}
