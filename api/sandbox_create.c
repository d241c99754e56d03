/*
 * POST /sandboxes: validate the request, write the desired sandbox and its
 * 'sandbox.create' event in one statement, answer with the sandbox (status
 * "pending"). The controller notices the row (NOTIFY orchard_sandbox) and
 * launches it; the api never does.
 *
 * Orchard's fields and defaults: image (required), cpu and memory (ours
 * default to 1 / 1Gi, Orchard's to 4 / 16Gi: capacity.c), block_network
 * true, sandbox_id (8 hex generated), timeout 3600. Ours add disk,
 * ttl_seconds, idle_timeout_seconds, labels, env, workdir and tools (NULL ttl and
 * idle timeout mean the controller's defaults). Unknown fields are ignored.
 *
 * Under the local driver an image is "host" or one imported with
 * orchard-admin image import (the `images` table, docs/images.md); any
 * other is a 422 that says how to import it, and nothing is written.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "checkpoint.h"
#include "create.h"
#include "err.h"
#include "json.h"
#include "log.h"
#include "pgarray.h"
#include "strutil.h"
#include "validate.h"
#include "xalloc.h"

#define IMAGE_MAX 1024
#define CREATE_ATTEMPTS 4
#define DISK_MIN ((int64_t)16 << 20)
#define DISK_MAX ((int64_t)64 << 40)

/* The size of a sandbox whose create names none: ORCHARD_SANDBOX_CPU and
 * ORCHARD_SANDBOX_MEMORY, smaller than Orchard's 4 / 16Gi so that a 2-core
 * host runs more than one (docs/controller.md, "Admission"). */
static const char *default_cpu(void)
{
	const char *v = getenv("ORCHARD_SANDBOX_CPU");

	return v && *v ? v : "1";
}

static const char *default_memory(void)
{
	const char *v = getenv("ORCHARD_SANDBOX_MEMORY");

	return v && *v ? v : "1Gi";
}

const char *api_disk_default(void)
{
	const char *v = getenv("ORCHARD_SANDBOX_DISK_DEFAULT");

	return v && *v ? v : "10Gi";
}

/* cpu and memory may be strings or numbers; numbers keep their JSON text. */
static int quantity(char *out, size_t outlen, json_object *body, const char *key,
		    const char *dflt, struct api_req *r)
{
	json_object *v = NULL;
	const char *s;

	if (!json_object_object_get_ex(body, key, &v) || !v) {
		snprintf(out, outlen, "%s", dflt);
		return 0;
	}
	if (json_object_is_type(v, json_type_string)) {
		s = json_object_get_string(v);
		if (strlen(s) != (size_t)json_object_get_string_len(v))
			return api_fail(r, ORC_EINVALID, "field '%s' must not contain NUL "
					"characters", key);
	} else if (json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)) {
		s = orc_json_str(v, NULL);
	} else {
		return api_fail(r, ORC_EINVALID, "field '%s' must be a string such as \"%s\"", key,
				dflt);
	}
	if (strlen(s) >= outlen)
		return api_fail(r, ORC_EINVALID, "field '%s' is too long", key);
	snprintf(out, outlen, "%s", s);
	return 0;
}

int api_disk_parse(char *out, size_t outlen, int64_t *bytes_out, json_object *body,
		   const char *dflt, struct api_req *r)
{
	json_object *v = NULL;
	int err;

	*bytes_out = 0;
	if (!dflt && (!json_object_object_get_ex(body, "disk", &v) || !v)) {
		*out = '\0';
		return 0;
	}
	if ((err = quantity(out, outlen, body, "disk", dflt ? dflt : "", r)) < 0)
		return err;
	if (orc_parse_memory(bytes_out, out) < 0 || *bytes_out < DISK_MIN || *bytes_out > DISK_MAX)
		return api_fail(r, ORC_EINVALID, "invalid disk \"%s\": expected a size such as "
				"\"512Mi\" or \"2Gi\" (16Mi to 64Ti)", out);
	return 0;
}

int api_create_parse(struct api_create_req *c, struct api_req *r, json_object *body)
{
	json_object *v;
	int err;

	memset(c, 0, sizeof(*c));
	c->block_network = 1;
	c->tools = 1;
	c->timeout = 3600;
	if ((err = orc_json_get_str(body, "image", &c->image, API_ERRBUF(r))) < 0)
		return err;
	if (err == 1 || !*c->image)
		return api_fail(r, ORC_EINVALID, "field 'image' is required (for example \"host\")");
	if (strlen(c->image) > IMAGE_MAX || !orc_utf8_valid(c->image, strlen(c->image)) ||
	    strpbrk(c->image, " \t\r\n"))
		return api_fail(r, ORC_EINVALID, "field 'image' must be an image reference of at "
				"most %d characters without whitespace", IMAGE_MAX);
	if ((err = quantity(c->cpu, sizeof(c->cpu), body, "cpu", default_cpu(), r)) < 0)
		return err;
	if (orc_parse_cpu(&c->cpu_millis, c->cpu) < 0)
		return api_fail(r, ORC_EINVALID, "invalid cpu \"%s\": expected cores such as "
				"\"2\", \"0.5\" or \"500m\"", c->cpu);
	if ((err = quantity(c->memory, sizeof(c->memory), body, "memory", default_memory(), r)) < 0)
		return err;
	if (orc_parse_memory(&c->memory_bytes, c->memory) < 0 || c->memory_bytes < (1 << 20))
		return api_fail(r, ORC_EINVALID, "invalid memory \"%s\": expected a size such as "
				"\"512Mi\" or \"16Gi\" (at least 1Mi)", c->memory);
	if ((err = api_disk_parse(c->disk, sizeof(c->disk), &c->disk_bytes, body, api_disk_default(),
				  r)) < 0)
		return err;
	if ((err = orc_json_get_bool(body, "block_network", &c->block_network, API_ERRBUF(r))) < 0)
		return err;
	if ((err = orc_json_get_bool(body, "tools", &c->tools, API_ERRBUF(r))) < 0)
		return err;
	if ((err = orc_json_get_str(body, "sandbox_id", &c->sandbox_id, API_ERRBUF(r))) < 0)
		return err;
	if (err == 0 && !api_valid_id(c->sandbox_id))
		return api_fail(r, ORC_EINVALID, "sandbox_id \"%.80s\" is not a DNS label: 1-63 "
				"characters of [a-z0-9-], starting and ending with a letter or "
				"digit", c->sandbox_id);
	/* Orchard treats 0 like "not given". */
	if ((err = orc_json_get_int(body, "timeout", &c->timeout, 0, 86400, API_ERRBUF(r))) < 0)
		return err;
	if (c->timeout == 0)
		c->timeout = 3600;
	if ((err = orc_json_get_int(body, "ttl_seconds", &c->ttl, 1, 30 * 86400, API_ERRBUF(r))) < 0)
		return err;
	if ((err = orc_json_get_int(body, "idle_timeout_seconds", &c->idle, 1, 30 * 86400,
				    API_ERRBUF(r))) < 0)
		return err;
	if ((err = orc_json_get_object(body, "labels", &c->labels, API_ERRBUF(r))) < 0 ||
	    (c->labels && (err = api_check_labels(c->labels, r)) < 0))
		return err;
	if ((err = orc_json_get_object(body, "env", &c->env, API_ERRBUF(r))) < 0 ||
	    (c->env && (err = api_check_env(c->env, "env", r)) < 0))
		return err;
	if (json_object_object_get_ex(body, "workdir", &v) && v) {
		if ((err = api_check_path(v, "workdir", r)) < 0)
			return err;
		c->workdir = json_object_get_string(v);
	}
	if ((err = api_step_policy_parse(&c->checkpoints, body, r)) < 0)
		return err;
	c->idempotency_key = api_req_param(r, "HTTP_IDEMPOTENCY_KEY");
	if (c->idempotency_key && !*c->idempotency_key)
		c->idempotency_key = NULL;
	if (c->idempotency_key && !api_check_idempotency_key(c->idempotency_key))
		return api_fail(r, API_EBADREQ, "Idempotency-Key must be 1-255 printable ASCII "
				"characters");
	return 0;
}

/* The sandbox created earlier with the same Idempotency-Key, if any. */
static int find_replay(PGresult **out, PGconn *db, struct api_req *r, const char *key)
{
	char tenant[24], sql[1024];
	const char *params[2] = { tenant, key };
	PGresult *res = NULL;
	int err;

	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	snprintf(sql, sizeof(sql), "SELECT %s FROM sandboxes s JOIN tenants t ON t.id = s.tenant_id"
		 " WHERE s.tenant_id = $1 AND s.idempotency_key = $2", api_sandbox_cols);
	if ((err = orc_pg_query_one(&res, db, sql, 2, params)) < 0)
		return err;
	api_idempotency_replayed(r);
	*out = res;
	return 0;
}

/* Local driver: is the image "host" or imported? Kubernetes driver: not
 * "host" (it would be pulled as a container image and end in
 * ErrImagePull). ORC_EINVALID (api_fail) when not. (An image removed after
 * this check fails the row in the controller with the same hint.) */
static int check_image(PGconn *db, const char *image, struct api_req *r)
{
	const char *params[1] = { image };
	PGresult *res = NULL;
	int err, found;

	if (!strcmp(image, "host") && !strcmp(api_server.driver, "kubernetes"))
		return api_fail(r, ORC_EINVALID, "image \"host\" is the local driver's: under the "
				"kubernetes driver give a container image (e.g. python:3.11-slim)");
	if (!strcmp(image, "host") || strcmp(api_server.driver, "local"))
		return 0;
	if ((err = orc_pg_query(&res, db, "SELECT 1 FROM images WHERE name = $1", 1, params)) < 0)
		return err;
	found = PQntuples(res) == 1;
	PQclear(res);
	if (found)
		return 0;
	return api_fail(r, ORC_EINVALID, "image \"%.100s\" is not available: the local driver "
			"runs \"host\" or an imported image; import it with: orchard-admin image "
			"import NAME --dir PATH | --tar FILE | --oci LAYOUT[:TAG]", image);
}

static char *event_data(const struct api_create_req *c)
{
	json_object *o = json_object_new_object();
	char *s;

	json_object_object_add(o, "image", json_object_new_string(c->image));
	json_object_object_add(o, "cpu", json_object_new_string(c->cpu));
	json_object_object_add(o, "memory", json_object_new_string(c->memory));
	json_object_object_add(o, "disk", json_object_new_string(c->disk));
	json_object_object_add(o, "block_network", json_object_new_boolean(c->block_network));
	json_object_object_add(o, "timeout", json_object_new_int64(c->timeout));
	if (c->labels)
		json_object_object_add(o, "labels", json_object_get(c->labels));
	s = xstrdup(orc_json_str(o, NULL));
	json_object_put(o);
	return s;
}

int api_create_insert(PGresult **out, PGconn *db, struct api_req *r, const struct api_create_req *c,
		      const char *const *ids, int n, const char *batch_id)
{
	struct orc_pg_array id_arr = ORC_PG_ARRAY_INIT, token_arr = ORC_PG_ARRAY_INIT;
	PGresult *res = NULL;
	char tenant[24], cpu_m[24], mem_b[24], disk_b[24], timeout[24], ttl[24], idle[24], token[65];
	char *data = event_data(c), *sql;
	const char *params[24];
	int err = 0, i;

	for (i = 0; i < n; i++) {
		orc_random_hex(token, 32);
		orc_pg_array_add(&id_arr, ids[i]);
		orc_pg_array_add(&token_arr, token);
	}
	snprintf(tenant, sizeof(tenant), "%lld", (long long)r->tenant_id);
	snprintf(cpu_m, sizeof(cpu_m), "%lld", (long long)c->cpu_millis);
	snprintf(mem_b, sizeof(mem_b), "%lld", (long long)c->memory_bytes);
	snprintf(disk_b, sizeof(disk_b), "%lld", (long long)c->disk_bytes);
	snprintf(timeout, sizeof(timeout), "%lld", (long long)c->timeout);
	snprintf(ttl, sizeof(ttl), "%lld", (long long)c->ttl);
	snprintf(idle, sizeof(idle), "%lld", (long long)c->idle);
	params[0] = orc_pg_array_cstr(&id_arr);
	params[1] = tenant;
	params[2] = c->image;
	params[3] = c->cpu;
	params[4] = c->memory;
	params[5] = cpu_m;
	params[6] = mem_b;
	params[7] = c->block_network ? "true" : "false";
	params[8] = c->labels ? orc_json_str(c->labels, NULL) : "{}";
	params[9] = c->env ? orc_json_str(c->env, NULL) : "{}";
	params[10] = c->workdir;
	params[11] = timeout;
	params[12] = c->ttl ? ttl : NULL;
	params[13] = c->idle ? idle : NULL;
	params[14] = orc_pg_array_cstr(&token_arr);
	params[15] = r->key_id;
	params[16] = c->idempotency_key;
	params[17] = data;
	params[18] = r->request_id;
	params[19] = api_server.driver;
	params[20] = c->tools ? "true" : "false";
	params[21] = batch_id;
	params[22] = c->disk;
	params[23] = disk_b;
	sql = xasprintf(
		"WITH s AS (INSERT INTO sandboxes (id, tenant_id, image, cpu, memory, cpu_millis,"
		" memory_bytes, block_network, labels, env, workdir, timeout_seconds, ttl_seconds,"
		" idle_timeout_seconds, agent_token, created_by_key, idempotency_key, driver, tools,"
		" batch_id, disk, disk_bytes)"
		" SELECT u.id, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10::jsonb, $11, $12, $13, $14,"
		" u.token, $16::bigint, $17, $20, $21::boolean, $22, $23, $24::bigint"
		" FROM unnest($1::text[], $15::text[]) WITH ORDINALITY AS u(id, token, n) ORDER BY u.n"
		" RETURNING *),"
		" e AS (INSERT INTO events (sandbox_id, tenant_id, kind, data, api_key_id, request_id)"
		" SELECT s.id, s.tenant_id, 'sandbox.create', $18::jsonb, $16::bigint, nullif($19, '')"
		" FROM s)"
		" SELECT %s FROM s JOIN tenants t ON t.id = s.tenant_id", api_sandbox_cols);
	if ((err = orc_pg_query(&res, db, sql, 24, params)) < 0)
		goto done;
	for (i = 0; i < n && err == 0; i++)
		err = api_step_policy_store(db, ids[i], r->tenant_id, &c->checkpoints);
	if (err < 0) {
		PQclear(res);
		goto done;
	}
	*out = res;
done:
	orc_pg_array_release(&id_arr);
	orc_pg_array_release(&token_arr);
	free(sql);
	free(data);
	return err;
}

int api_create_precheck(PGconn *db, const struct api_create_req *c, struct api_req *r)
{
	int err;

	if ((err = check_image(db, c->image, r)) < 0)
		return err;
	return api_capacity_check(db, c->cpu_millis, c->memory_bytes, r);
}

/* One sandbox: the quota check and the insert are one transaction (quota.c). */
static int insert(PGresult **out, long *retry_out, PGconn *db, struct api_req *r,
		  const struct api_create_req *c, const char *id)
{
	const char *ids[1] = { id };
	PGresult *res = NULL;
	int err;

	if ((err = orc_pg_begin(db)) < 0)
		return err;
	if ((err = api_quota_check(retry_out, db, r, 1, c->cpu_millis, c->memory_bytes)) < 0 ||
	    (err = api_create_insert(&res, db, r, c, ids, 1, NULL)) < 0 ||
	    (err = orc_pg_commit(db)) < 0) {
		orc_pg_rollback(db);
		PQclear(res);
		return err;
	}
	*out = res;
	return 0;
}

int api_sandbox_create(struct api_req *r)
{
	struct api_create_req c;
	json_object *body;
	PGresult *res = NULL;
	PGconn *db = NULL;
	char genid[9];
	long retry = 0;
	int err, attempt;

	if ((err = api_req_json_body(&body, r)) < 0)
		return err;
	if ((err = api_create_parse(&c, r, body)) < 0)
		return api_reply_failed(r, err);
	if ((err = orc_pg_pool_acquire(&api_server.db, &db)) < 0)
		return api_reply_error(r, err, "database unavailable");
	if (c.idempotency_key && (err = api_idempotency_bind(r, db, "sandbox", c.idempotency_key)) < 0) {
		orc_pg_pool_release(&api_server.db, db);
		return err;
	}
	if (c.idempotency_key && (err = find_replay(&res, db, r, c.idempotency_key)) != ORC_ENOTFOUND)
		goto done;
	if ((err = api_create_precheck(db, &c, r)) < 0)
		goto done;
	for (attempt = 0; attempt < CREATE_ATTEMPTS; attempt++) {
		const char *id = c.sandbox_id;
		if (!id) {
			orc_random_hex(genid, 4);
			id = genid;
		}
		err = insert(&res, &retry, db, r, &c, id);
		if (err != ORC_ECONFLICT)
			break;
		/* A concurrent request with our Idempotency-Key won the race? */
		if (c.idempotency_key && (err = find_replay(&res, db, r, c.idempotency_key)) != ORC_ENOTFOUND)
			break;
		err = ORC_ECONFLICT;
		if (c.sandbox_id)
			break;
	}
done:
	orc_pg_pool_release(&api_server.db, db);
	if (err == ORC_ECONFLICT)
		return api_reply_error(r, err, "sandbox \"%s\" already exists",
				       c.sandbox_id ? c.sandbox_id : "(generated)");
	if (err == ORC_EQUOTA)
		return api_reply_quota(r, retry);
	if (err == ORC_EINVALID)
		return api_reply_failed(r, err);
	if (err < 0)
		return api_reply_error(r, err, "cannot create the sandbox");
	api_own_pg(r, res);
	orc_log(ORC_LOG_INFO, "sandbox created", "sandbox_id", PQgetvalue(res, 0, 0), NULL);
	return api_reply_json(r, 200, api_own_json(r, api_sandbox_view(res, 0)));
}
