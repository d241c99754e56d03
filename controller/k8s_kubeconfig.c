/*
 * KUBECONFIG (docs/kubernetes.md, "API server access"): the API server and
 * credentials of the current context, as kubectl reads them. The files of
 * the colon-separated list are read in order and, as kubectl merges them,
 * the first file that sets current-context, or names a context, cluster or
 * user, wins. Relative paths are relative to the file that holds them.
 * Supported: server, certificate-authority[-data], token, tokenFile,
 * client-certificate[-data], client-key[-data]. Refused with a clear error:
 * exec and auth-provider plugins, basic auth, insecure-skip-tls-verify.
 */
#include "k8s.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "base64.h"
#include "err.h"
#include "log.h"
#include "xalloc.h"

#define MAX_FILES 16
#define MAX_DEPTH 32

struct kubeconfig {
	char *path[MAX_FILES];
	json_object *doc[MAX_FILES];
	size_t n;
};

static int fail(const char *file, const char *why)
{
	orc_log(ORC_LOG_ERROR, "bad KUBECONFIG", "file", file, "problem", why, NULL);
	return ORC_EINVALID;
}

/* ---- YAML -> json-c (every scalar a string) --------------------------------- */

static json_object *node_json(yaml_document_t *doc, yaml_node_t *n, int depth)
{
	json_object *o = NULL, *v;
	yaml_node_item_t *it;
	yaml_node_pair_t *p;
	yaml_node_t *k;

	if (!n || depth > MAX_DEPTH)
		return NULL;
	switch (n->type) {
	case YAML_SCALAR_NODE:
		return json_object_new_string_len((const char *)n->data.scalar.value,
						  (int)n->data.scalar.length);
	case YAML_SEQUENCE_NODE:
		o = json_object_new_array();
		for (it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
			if (!(v = node_json(doc, yaml_document_get_node(doc, *it), depth + 1)))
				goto bad;
			json_object_array_add(o, v);
		}
		return o;
	case YAML_MAPPING_NODE:
		o = json_object_new_object();
		for (p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
			k = yaml_document_get_node(doc, p->key);
			if (!k || k->type != YAML_SCALAR_NODE ||
			    !(v = node_json(doc, yaml_document_get_node(doc, p->value), depth + 1)))
				goto bad;
			json_object_object_add(o, (const char *)k->data.scalar.value, v);
		}
		return o;
	default:
		return NULL;
	}
bad:
	json_object_put(o);
	return NULL;
}

static int parse_file(json_object **out, const char *path)
{
	yaml_parser_t parser;
	yaml_document_t doc;
	FILE *f = fopen(path, "r");
	int err = 0;

	*out = NULL;
	if (!f)
		return fail(path, "cannot be opened");
	yaml_parser_initialize(&parser);
	yaml_parser_set_input_file(&parser, f);
	if (!yaml_parser_load(&parser, &doc)) {
		err = fail(path, parser.problem ? parser.problem : "not YAML");
		goto out;
	}
	*out = node_json(&doc, yaml_document_get_root_node(&doc), 0);
	yaml_document_delete(&doc);
	if (!*out || !json_object_is_type(*out, json_type_object)) {
		json_object_put(*out);
		*out = NULL;
		err = fail(path, "not a kubeconfig (a YAML mapping of scalars, lists and mappings)");
	}
out:
	yaml_parser_delete(&parser);
	fclose(f);
	return err;
}

/* ---- lookups ------------------------------------------------------------------ */

static const char *str(json_object *o, const char *key)
{
	json_object *v = NULL;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
		return NULL;
	return *json_object_get_string(v) ? json_object_get_string(v) : NULL;
}

/* The body (key `what`) of the entry of list `list` named name; *file is
 * the index of the file it came from. */
static json_object *named(const struct kubeconfig *kc, size_t *file, const char *list,
			  const char *what, const char *name)
{
	json_object *arr = NULL, *e, *body = NULL;
	size_t i, j;

	for (i = 0; i < kc->n; i++) {
		if (!json_object_object_get_ex(kc->doc[i], list, &arr) ||
		    !json_object_is_type(arr, json_type_array))
			continue;
		for (j = 0; j < json_object_array_length(arr); j++) {
			e = json_object_array_get_idx(arr, j);
			if (json_object_is_type(e, json_type_object) && str(e, "name") &&
			    !strcmp(str(e, "name"), name) && json_object_object_get_ex(e, what, &body) &&
			    json_object_is_type(body, json_type_object)) {
				*file = i;
				return body;
			}
		}
	}
	return NULL;
}

/* path as given when absolute, else next to the kubeconfig file. */
static char *resolve(const char *file, const char *path)
{
	const char *slash = strrchr(file, '/');

	if (path[0] == '/' || !slash)
		return xstrdup(path);
	return xasprintf("%.*s/%s", (int)(slash - file), file, path);
}

/* A *-data field: base64 of PEM text. */
static int pem(char **out, const char *file, const char *key, const char *b64)
{
	struct orc_buf b = ORC_BUF_INIT;

	if (orc_base64_decode(&b, b64, strlen(b64)) < 0 || !b.ptr || strlen(b.ptr) != b.len) {
		orc_buf_release(&b);
		return fail(file, key);
	}
	*out = orc_buf_detach(&b, NULL);
	return 0;
}

/* One credential: inline data, else a file path. */
static int credential(char **data_out, char **file_out, const char *file, json_object *o,
		      const char *data_key, const char *file_key)
{
	const char *v;

	if ((v = str(o, data_key)))
		return pem(data_out, file, data_key, v);
	if ((v = str(o, file_key)))
		*file_out = resolve(file, v);
	return 0;
}

static int cluster(struct k8s_config *cfg, const char *file, json_object *c)
{
	const char *server = str(c, "server"), *skip = str(c, "insecure-skip-tls-verify");
	size_t n;

	if (!server || (strncmp(server, "https://", 8) && strncmp(server, "http://", 7)))
		return fail(file, "the cluster's server is not an http(s):// URL");
	if (skip && strcmp(skip, "false"))
		return fail(file, "insecure-skip-tls-verify is not supported: give the cluster's CA");
	cfg->api_url = xstrdup(server);
	n = strlen(cfg->api_url);
	while (n > 8 && cfg->api_url[n - 1] == '/')
		cfg->api_url[--n] = '\0';
	return credential(&cfg->ca_pem, &cfg->ca_file, file, c, "certificate-authority-data",
			  "certificate-authority");
}

static int user(struct k8s_config *cfg, const char *file, json_object *u)
{
	const char *v;
	int err;

	if (json_object_object_get_ex(u, "exec", NULL) ||
	    json_object_object_get_ex(u, "auth-provider", NULL))
		return fail(file, "exec and auth-provider credential plugins are not supported: "
			    "use a token (e.g. a service account's) or a client certificate");
	if (str(u, "username") || str(u, "password"))
		return fail(file, "basic auth is not supported: use a token or a client certificate");
	if ((v = str(u, "token")))
		cfg->token = xstrdup(v);
	else if ((v = str(u, "tokenFile")))
		cfg->token_file = resolve(file, v);
	if ((err = credential(&cfg->cert_pem, &cfg->cert_file, file, u, "client-certificate-data",
			      "client-certificate")) < 0 ||
	    (err = credential(&cfg->key_pem, &cfg->key_file, file, u, "client-key-data",
			      "client-key")) < 0)
		return err;
	if (!(cfg->cert_pem || cfg->cert_file) != !(cfg->key_pem || cfg->key_file))
		return fail(file, "a client certificate needs its key and a key its certificate");
	return 0;
}

static int current(struct k8s_config *cfg, const struct kubeconfig *kc)
{
	const char *ctx_name = NULL, *cl_name, *user_name;
	json_object *ctx, *cl, *u;
	size_t i, f = 0, fc = 0, fu = 0;
	int err;

	for (i = 0; i < kc->n && !ctx_name; i++)
		ctx_name = str(kc->doc[i], "current-context");
	if (!ctx_name)
		return fail(kc->path[0], "no current-context");
	if (!(ctx = named(kc, &f, "contexts", "context", ctx_name)))
		return fail(kc->path[0], "the current-context is not among the contexts");
	cl_name = str(ctx, "cluster");
	user_name = str(ctx, "user");
	if (!cl_name || !(cl = named(kc, &fc, "clusters", "cluster", cl_name)))
		return fail(kc->path[f], "the current context's cluster is not among the clusters");
	if ((err = cluster(cfg, kc->path[fc], cl)) < 0)
		return err;
	if (!user_name)
		return 0;       /* no credentials: e.g. a server behind kubectl proxy */
	if (!(u = named(kc, &fu, "users", "user", user_name)))
		return fail(kc->path[f], "the current context's user is not among the users");
	return user(cfg, kc->path[fu], u);
}

int k8s_kubeconfig_load(struct k8s_config *cfg, const char *paths)
{
	struct kubeconfig kc = { { NULL }, { NULL }, 0 };
	const char *p = paths, *end;
	int err = 0;
	size_t i;

	while (*p) {
		end = p + strcspn(p, ":");
		if (end > p) {
			if (kc.n == MAX_FILES) {
				err = fail(paths, "more than 16 files");
				goto out;
			}
			kc.path[kc.n] = xstrndup(p, (size_t)(end - p));
			if ((err = parse_file(&kc.doc[kc.n], kc.path[kc.n])) < 0) {
				kc.n++;
				goto out;
			}
			kc.n++;
		}
		p = *end ? end + 1 : end;
	}
	if (kc.n == 0) {
		err = fail(paths, "no file");
		goto out;
	}
	err = current(cfg, &kc);
	if (err == 0)
		orc_log(ORC_LOG_INFO, "kubernetes driver: credentials from KUBECONFIG", "file",
			kc.path[0], "server", cfg->api_url, NULL);
out:
	for (i = 0; i < kc.n; i++) {
		free(kc.path[i]);
		json_object_put(kc.doc[i]);
	}
	return err;
}
