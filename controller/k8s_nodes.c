/*
 * The kubernetes driver's capacity (ops->capacity, docs/kubernetes.md
 * "Capacity"): a thread of its own lists the nodes (GET /api/v1/nodes,
 * paginated, with ORCHARD_K8S_NODE_SELECTOR as the label selector) every
 * ORCHARD_K8S_NODES_REFRESH_S and keeps the sum of status.allocatable
 * cpu and memory of the nodes a sandbox pod may land on, and the largest
 * of each; the reconcile loop only reads that under the mutex, so a slow
 * or unreachable API server never blocks it. A node is left out when it
 * is cordoned (spec.unschedulable), not Ready, or has a NoSchedule or
 * NoExecute taint that ORCHARD_K8S_TOLERATIONS does not tolerate. A
 * failed listing, or one without a usable node, keeps the last good one;
 * until there is one the capacity is unknown and admission leaves it to
 * the scheduler (rec_admit.c admits every row, as before capacity).
 */
#include "k8s.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "err.h"
#include "json.h"
#include "log.h"
#include "strutil.h"
#include "url.h"
#include "xalloc.h"

#define PAGE "500"
#define RETRY_MS 2000            /* after a failed listing */

struct raw {
	int nodes;
	int64_t cpu, mem, node_cpu, node_mem;
};

struct k8s_nodes {
	struct k8s_client *client;
	const struct k8s_config *cfg;
	char *selector;               /* "&labelSelector=..." or "" */
	struct k8s_thread thr;

	pthread_mutex_t lock;         /* the two below */
	int have;
	struct raw raw;
};

/* ---- which nodes ------------------------------------------------------------ */

static int toleration_matches(json_object *t, const char *key, const char *value, const char *effect)
{
	const char *tk = orc_json_str_or(t, "key", ""), *op = orc_json_str_or(t, "operator", "Equal");
	const char *te = orc_json_str_or(t, "effect", "");

	if (*te && strcmp(te, effect))
		return 0;
	if (!*tk)
		return !strcmp(op, "Exists");
	if (strcmp(tk, key))
		return 0;
	return !strcmp(op, "Exists") || !strcmp(orc_json_str_or(t, "value", ""), value);
}

static int tolerated(const struct k8s_config *cfg, json_object *taint)
{
	const char *effect = orc_json_str_or(taint, "effect", "");
	size_t i, n = cfg->tolerations ? json_object_array_length(cfg->tolerations) : 0;

	if (strcmp(effect, "NoSchedule") && strcmp(effect, "NoExecute"))
		return 1;   /* PreferNoSchedule and unknown effects do not keep pods off */
	for (i = 0; i < n; i++)
		if (toleration_matches(json_object_array_get_idx(cfg->tolerations, i),
				       orc_json_str_or(taint, "key", ""),
				       orc_json_str_or(taint, "value", ""), effect))
			return 1;
	return 0;
}

static int node_ready(json_object *status)
{
	json_object *conds = orc_json_field(status, "conditions");
	size_t i, n = conds && json_object_is_type(conds, json_type_array) ?
		json_object_array_length(conds) : 0;

	for (i = 0; i < n; i++) {
		json_object *c = json_object_array_get_idx(conds, i);

		if (!strcmp(orc_json_str_or(c, "type", ""), "Ready"))
			return !strcmp(orc_json_str_or(c, "status", ""), "True");
	}
	return 0;
}

static int node_usable(const struct k8s_config *cfg, json_object *node)
{
	json_object *spec = orc_json_field(node, "spec"), *taints, *u;
	size_t i, n;

	if ((u = orc_json_field(spec, "unschedulable")) && json_object_get_boolean(u))
		return 0;
	if (!node_ready(orc_json_field(node, "status")))
		return 0;
	taints = orc_json_field(spec, "taints");
	n = taints && json_object_is_type(taints, json_type_array) ? json_object_array_length(taints) : 0;
	for (i = 0; i < n; i++)
		if (!tolerated(cfg, json_object_array_get_idx(taints, i)))
			return 0;
	return 1;
}

/* Add node's allocatable to *raw when pods of ours may run there. */
static void add_node(struct raw *raw, const struct k8s_config *cfg, json_object *node)
{
	json_object *alloc = orc_json_field(orc_json_field(node, "status"), "allocatable");
	int64_t cpu = 0, mem = 0;

	if (!node_usable(cfg, node))
		return;
	if (orc_parse_cpu(&cpu, orc_json_str_or(alloc, "cpu", "")) < 0 ||
	    orc_parse_memory(&mem, orc_json_str_or(alloc, "memory", "")) < 0) {
		orc_log(ORC_LOG_WARN, "kubernetes: node without a readable allocatable cpu or memory; "
			"left out of the capacity", "node", k8s_meta_str(node, "name"), NULL);
		return;
	}
	raw->nodes++;
	raw->cpu += cpu;
	raw->mem += mem;
	if (cpu > raw->node_cpu)
		raw->node_cpu = cpu;
	if (mem > raw->node_mem)
		raw->node_mem = mem;
}

/* ---- listing ------------------------------------------------------------------ */

/* One page into *raw; *next gets its continue token (or NULL). */
static int list_page(struct k8s_nodes *kn, struct raw *raw, char **next, const char *cont)
{
	struct k8s_response r = K8S_RESPONSE_INIT;
	json_object *list = NULL, *items;
	char *esc = cont ? orc_url_escape(cont, "") : NULL, *path, *why;
	const char *token;
	size_t i, n;
	int err;

	*next = NULL;
	path = xasprintf("/api/v1/nodes?limit=" PAGE "%s%s%s", kn->selector, esc ? "&continue=" : "",
			 esc ? esc : "");
	if ((err = k8s_call(kn->client, &r, "GET", path, NULL, 0)) < 0)
		goto out;
	if (r.status != 200) {
		why = k8s_status_message(&r);
		orc_log(ORC_LOG_WARN, "kubernetes: listing nodes failed (capacity unchanged; the "
			"controller's role needs list on nodes)", "error", why, NULL);
		free(why);
		err = ORC_EUNAVAIL;
		goto out;
	}
	if (orc_json_parse_object(&list, r.body.ptr, r.body.len, NULL, 0) < 0 ||
	    !(items = orc_json_field(list, "items")) || !json_object_is_type(items, json_type_array)) {
		orc_log(ORC_LOG_WARN, "kubernetes: malformed node list", NULL);
		err = ORC_EUNAVAIL;
		goto out;
	}
	n = json_object_array_length(items);
	for (i = 0; i < n; i++)
		add_node(raw, kn->cfg, json_object_array_get_idx(items, i));
	token = orc_json_str_or(orc_json_field(list, "metadata"), "continue", "");
	if (*token)
		*next = xstrdup(token);
out:
	json_object_put(list);
	k8s_response_release(&r);
	free(path);
	free(esc);
	return err;
}

static int list_nodes(struct k8s_nodes *kn)
{
	struct raw raw = { 0 };
	char *cont = NULL, *next = NULL;
	int err;

	do {
		err = list_page(kn, &raw, &next, cont);
		free(cont);
		cont = next;
	} while (err == 0 && cont && !kn->thr.stop);
	free(cont);
	if (err < 0 || kn->thr.stop)
		return err < 0 ? err : ORC_EUNAVAIL;
	if (!raw.nodes) {
		orc_log(ORC_LOG_WARN, "kubernetes: no node that sandbox pods may use (cordoned, not "
			"ready, tainted or not selected); capacity unchanged", NULL);
		return 0;
	}
	pthread_mutex_lock(&kn->lock);
	if (!kn->have || memcmp(&kn->raw, &raw, sizeof(raw)))
		orc_log(ORC_LOG_INFO, "kubernetes: node capacity", ORC_LOG_INT("nodes", raw.nodes),
			ORC_LOG_INT("cpu_millis", raw.cpu), ORC_LOG_INT("memory_bytes", raw.mem), NULL);
	kn->raw = raw;
	kn->have = 1;
	pthread_mutex_unlock(&kn->lock);
	return 0;
}

/* The thread's step: list, then wait for the next listing. */
static int64_t step(void *arg)
{
	struct k8s_nodes *kn = arg;

	return list_nodes(kn) < 0 ? RETRY_MS : kn->cfg->nodes_refresh_s * 1000;
}

/* ---- the interface ---------------------------------------------------------------- */

/* "&labelSelector=k%3Dv%2Ck2%3Dv2" from the node selector, or "". */
static char *selector_query(const struct k8s_config *cfg)
{
	struct orc_buf b = ORC_BUF_INIT;
	char *esc, *out;

	if (!cfg->node_selector || !json_object_object_length(cfg->node_selector))
		return xstrdup("");
	json_object_object_foreach(cfg->node_selector, k, v) {
		orc_buf_addf(&b, "%s%s=%s", b.len ? "," : "", k, json_object_get_string(v));
	}
	esc = orc_url_escape(orc_buf_cstr(&b), "");
	out = xasprintf("&labelSelector=%s", esc);
	free(esc);
	orc_buf_release(&b);
	return out;
}

int k8s_nodes_start(struct k8s_nodes **out, struct k8s_client *c, const struct k8s_config *cfg)
{
	struct k8s_nodes *kn = xcalloc(1, sizeof(*kn));

	kn->client = c;
	kn->cfg = cfg;
	kn->selector = selector_query(cfg);
	pthread_mutex_init(&kn->lock, NULL);
	if (k8s_thread_start(&kn->thr, c, "node listing", step, kn) < 0) {
		k8s_nodes_stop(kn);
		return ORC_ERROR;
	}
	*out = kn;
	return 0;
}

void k8s_nodes_stop(struct k8s_nodes *kn)
{
	if (!kn)
		return;
	k8s_thread_stop(&kn->thr);
	pthread_mutex_destroy(&kn->lock);
	free(kn->selector);
	free(kn);
}

int k8s_nodes_capacity(struct k8s_nodes *kn, struct ctl_capacity *out)
{
	struct raw raw;
	int have;

	pthread_mutex_lock(&kn->lock);
	have = kn->have;
	raw = kn->raw;
	pthread_mutex_unlock(&kn->lock);
	if (!have)
		return ORC_EUNAVAIL;
	return ctl_capacity_scale(out, raw.nodes, raw.cpu, raw.mem, raw.node_cpu, raw.node_mem);
}
