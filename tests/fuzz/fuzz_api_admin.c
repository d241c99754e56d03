/*
 * The admin routes of the api (api/tenants.c and api/keys.c, included;
 * their SQL is dropped by --gc-sections): the bodies of POST /tenants
 * (parse_tenant_create), PATCH /tenants/{name} (parse_tenant_patch) and
 * POST /keys (parse_key_create), ?tenant= of GET /keys (query_tenant), and
 * the {id} of DELETE /keys/{id} (parse_key_ref) taken from ?id= (the
 * router has let through only DNS labels; any string is tried here).
 * Input (fuzz_req.h): a query string line, then the body.
 *
 * Properties: a refusal is a 4xx with a message; a tenant name is a DNS
 * label; each quota is "given" exactly when its field is in the body, and
 * its value is empty (null) or the field's integer in range, in canonical
 * decimal; a patch changes something; unknown fields are refused; a key's
 * tenant is a DNS label, its role user or admin, its name absent or
 * valid; a key reference is exactly one of a valid key id (the input) and
 * a positive number in canonical decimal equal to the input's value.
 */
#include "fuzz_req.h"
#include "../../api/tenants.c"
#include "../../api/keys.c"

static void check_quotas(const struct quota_patch *p, json_object *body)
{
	json_object *v;
	int64_t n;
	size_t i;

	for (i = 0; i < NQUOTAS; i++) {
		v = NULL;
		FUZZ_ASSERT(p->given[i] == json_object_object_get_ex(body, quotas[i].field, &v));
		if (!p->value[i][0]) {
			FUZZ_ASSERT(!v);
			continue;
		}
		FUZZ_ASSERT(v);
		FUZZ_ASSERT(orc_parse_i64(&n, p->value[i], quotas[i].min, quotas[i].max) == 0);
		FUZZ_ASSERT(n == json_object_get_int64(v));
		FUZZ_ASSERT(p->value[i][0] != '0' || !p->value[i][1]);
	}
	json_object_object_foreach(body, k, val) {
		int known = !strcmp(k, "name");
		(void)val;
		for (i = 0; i < NQUOTAS; i++)
			known |= !strcmp(k, quotas[i].field);
		FUZZ_ASSERT(known);
	}
}

static void key_ref(const char *id)
{
	const char *key_id = (const char *)1;
	char num[24] = "x";
	int64_t a, b;

	if (parse_key_ref(&key_id, num, id) < 0) {
		FUZZ_ASSERT(!orc_key_id_valid(id));
		return;
	}
	FUZZ_ASSERT(!key_id != !num[0]);
	if (key_id) {
		FUZZ_ASSERT(key_id == id && orc_key_id_valid(id));
		return;
	}
	FUZZ_ASSERT(orc_parse_i64(&a, num, 1, INT64_MAX) == 0 && orc_parse_i64(&b, id, 1, INT64_MAX) == 0);
	FUZZ_ASSERT(a == b && num[0] != '0' && strspn(num, "0123456789") == strlen(num));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct quota_patch p;
	struct api_req r;
	json_object *body;
	const char *name = NULL, *tenant = NULL, *role = NULL, *q;
	int err, any;
	size_t i;

	if (fuzz_req_init(&r, data, size) < 0)
		goto done;
	q = api_req_query(&r, "tenant");
	if (query_tenant(&tenant, &r) == 0)
		FUZZ_ASSERT(q && *q ? tenant == q && orc_is_dns_label(q) : !tenant);
	else
		FUZZ_ASSERT(r.status == ORC_EINVALID && q && *q && !orc_is_dns_label(q));
	if ((q = api_req_query(&r, "id")))
		key_ref(q);
	if (!(body = fuzz_req_body(&r)))
		goto done;

	r.error[0] = '\0';
	if ((err = parse_tenant_create(&name, &p, body, &r)) == 0) {
		FUZZ_ASSERT(fuzz_is_field(body, "name", name) && orc_is_dns_label(name));
		check_quotas(&p, body);
	} else {
		FUZZ_ASSERT(err == ORC_EINVALID && r.error[0]);
	}
	r.error[0] = '\0';
	if ((err = parse_tenant_patch(&p, body, &r)) == 0) {
		FUZZ_ASSERT(!json_object_object_get_ex(body, "name", NULL));
		check_quotas(&p, body);
		for (any = 0, i = 0; i < NQUOTAS; i++)
			any |= p.given[i];
		FUZZ_ASSERT(any);
	} else {
		FUZZ_ASSERT(err == ORC_EINVALID && r.error[0]);
	}

	fuzz_req_rearm(&r);
	tenant = role = name = NULL;
	if (parse_key_create(&r, body, &tenant, &role, &name) == 0) {
		FUZZ_ASSERT(!r.replied);
		FUZZ_ASSERT(fuzz_is_field(body, "tenant", tenant) && orc_is_dns_label(tenant));
		FUZZ_ASSERT(!strcmp(role, "user") || !strcmp(role, "admin"));
		FUZZ_ASSERT(!name || (fuzz_is_field(body, "name", name) && orc_key_name_valid(name)));
		json_object_object_foreach(body, k, v) {
			(void)v;
			FUZZ_ASSERT(!strcmp(k, "tenant") || !strcmp(k, "role") || !strcmp(k, "name"));
		}
	} else {
		FUZZ_ASSERT(r.replied && r.status == ORC_EINVALID);
	}
done:
	api_req_release(&r);
	return 0;
}
