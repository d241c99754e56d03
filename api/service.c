/*
 * The open routes: service banner and liveness (no authentication, no
 * database: /health answers as long as the process accepts requests).
 */
#include "api.h"

int api_root_get(struct api_req *r)
{
	json_object *o = api_own_json(r, json_object_new_object());

	json_object_object_add(o, "service", json_object_new_string("orchard"));
	json_object_object_add(o, "version", json_object_new_string(API_VERSION));
	json_object_object_add(o, "status", json_object_new_string("running"));
	return api_reply_json(r, 200, o);
}

int api_health_get(struct api_req *r)
{
	json_object *o = api_own_json(r, json_object_new_object());

	json_object_object_add(o, "status", json_object_new_string("healthy"));
	return api_reply_json(r, 200, o);
}
