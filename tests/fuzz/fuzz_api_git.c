/*
 * The git routes of the api (api/git.c, included; its agent calls are
 * dropped by --gc-sections): ?cwd= of GET /git/diff (query_cwd), the body
 * of POST /apply_patch (parse_apply) and of POST /git/reset (parse_reset).
 * Input (fuzz_req.h): a query string line, then the body.
 *
 * Properties: a refusal is a 422 with a message; an accepted patch is the
 * body's string field without NUL; timeout_seconds is 1..3600 (30 when
 * absent or 0); check and remove_ignored are booleans of the body (false
 * when absent); cwd is absent or a non-empty field shorter than 4096
 * bytes; ref is absent or 1..1024 bytes without NUL.
 */
#include "fuzz_req.h"
#include "../../api/git.c"

static void check_cwd(json_object *body, const char *cwd)
{
	FUZZ_ASSERT(!cwd || (fuzz_is_field(body, "cwd", cwd) && *cwd && strlen(cwd) < API_PATH_MAX));
}

/* A boolean field's value, def when absent. */
static int bool_field(json_object *body, const char *key, int def)
{
	json_object *v = NULL;

	if (!json_object_object_get_ex(body, key, &v) || !v)
		return def;
	return json_object_get_boolean(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct apply_req ap;
	struct api_req r;
	json_object *body, *v = NULL;
	const char *cwd = NULL, *q, *ref = NULL;
	int remove_ignored = -1, err;

	if (fuzz_req_init(&r, data, size) < 0)
		goto done;
	q = api_req_query(&r, "cwd");
	if (query_cwd(&cwd, &r) == 0)
		FUZZ_ASSERT(cwd == q && (!cwd || strlen(cwd) < API_PATH_MAX));
	else
		FUZZ_ASSERT(r.status == ORC_EINVALID && q && strlen(q) >= API_PATH_MAX);
	if (!(body = fuzz_req_body(&r)))
		goto done;

	r.error[0] = '\0';
	if ((err = parse_apply(&ap, body, &r)) == 0) {
		FUZZ_ASSERT(fuzz_is_field(body, "patch", ap.patch));
		FUZZ_ASSERT(ap.timeout >= 1 && ap.timeout <= APPLY_TIMEOUT_MAX_S);
		if (!json_object_object_get_ex(body, "timeout_seconds", &v) || !v ||
		    json_object_get_int64(v) == 0)
			FUZZ_ASSERT(ap.timeout == APPLY_TIMEOUT_DEFAULT_S);
		else
			FUZZ_ASSERT(ap.timeout == json_object_get_int64(v));
		FUZZ_ASSERT(ap.check == bool_field(body, "check", 0));
		check_cwd(body, ap.cwd);
	} else {
		FUZZ_ASSERT(err == ORC_EINVALID && r.error[0]);
	}

	r.error[0] = '\0';
	cwd = NULL;
	if ((err = parse_reset(&ref, &cwd, &remove_ignored, body, &r)) == 0) {
		FUZZ_ASSERT(!ref || (fuzz_is_field(body, "ref", ref) && *ref && strlen(ref) <= 1024));
		check_cwd(body, cwd);
		FUZZ_ASSERT(remove_ignored == bool_field(body, "remove_ignored", 0));
	} else {
		FUZZ_ASSERT(err == ORC_EINVALID && r.error[0]);
	}
done:
	api_req_release(&r);
	return 0;
}
