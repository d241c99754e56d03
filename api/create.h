#ifndef API_CREATE_H
#define API_CREATE_H
#include <stdint.h>
#include <stddef.h>
#include <json-c/json.h>
#include <libpq-fe.h>

#include "api.h"
#include "checkpoint.h"
/*
 * Creating sandboxes, shared by POST /sandboxes (sandbox_create.c) and
 * POST /sandboxes/batch (batch_create.c): one parsed spec, one insert.
 */

struct api_create_req {
	const char *image;
	char cpu[32];
	char memory[32];
	int64_t cpu_millis;
	int64_t memory_bytes;
	char disk[32];            /* api_disk_parse() */
	int64_t disk_bytes;
	int block_network;
	int tools;                /* the sandbox-tools bundle (default true) */
	const char *sandbox_id;   /* NULL: generate */
	int64_t timeout;
	int64_t ttl;              /* 0: default */
	int64_t idle;             /* 0: default */
	json_object *labels;
	json_object *env;
	const char *workdir;
	const char *idempotency_key;
	struct api_step_policy checkpoints;   /* step_policy.c */
};

/* The create fields of body (and the Idempotency-Key header); 0, or
 * ORC_EINVALID / API_EBADREQ (api_fail). */
int api_create_parse(struct api_create_req *c, struct api_req *r, json_object *body);
/*
 * The "disk" field of body (a size such as "2Gi", the memory units):
 * its text in out and its value in *bytes_out. Absent: dflt, or when dflt
 * is NULL out is "" and *bytes_out 0 (a fork keeps its checkpoint's).
 * ORC_EINVALID (api_fail) for a bad unit, less than 16Mi or more than 64Ti.
 */
int api_disk_parse(char *out, size_t outlen, int64_t *bytes_out, json_object *body,
		   const char *dflt, struct api_req *r);
/* ORCHARD_SANDBOX_DISK_DEFAULT, else "10Gi". */
const char *api_disk_default(void);
/* Checks that need the database: the image exists (local driver) and the
 * size fits the largest node; ORC_EINVALID (api_fail) when not. */
int api_create_precheck(PGconn *db, const struct api_create_req *c, struct api_req *r);
/*
 * Inside the caller's transaction (after api_quota_check): insert n
 * sandboxes of spec c with ids[0..n-1], each with its 'sandbox.create'
 * event and step policy, in batch_id (NULL: none). *out: the rows
 * (api_sandbox_cols), in no particular order. ORC_ECONFLICT when an id
 * (or c's Idempotency-Key) is taken.
 */
int api_create_insert(PGresult **out, PGconn *db, struct api_req *r, const struct api_create_req *c,
		      const char *const *ids, int n, const char *batch_id);
#endif
