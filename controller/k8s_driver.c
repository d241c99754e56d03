/*
 * The kubernetes driver's operations (driver.h): a sandbox is a pod
 * sb-<id> with its token Secret sb-<id>-token and, for block_network
 * false, the egress NetworkPolicy sb-<id>-egress (docs/kubernetes.md).
 *
 * Creates are idempotent: 409 AlreadyExists adopts the object when its
 * labels say it is this sandbox's, so a controller that died between
 * creating a pod and recording it picks the pod up again. Deletes are
 * idempotent: 404 is success. Pod state comes from the watch's table
 * (k8s_watch.c), never from a request per check.
 *
 * create() returns as soon as the API server has accepted the pod (its
 * answer goes into the watch table); status() then reports the pod's
 * progress from the table without waiting, so the reconcile loop keeps
 * many pods starting at once and learns the pod's IP, its failure reason
 * or its scheduling trouble from there.
 */
#include "k8s.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "json.h"
#include "log.h"
#include "strutil.h"
#include "url.h"
#include "xalloc.h"

#define SYNC_WAIT_MS 10000        /* alive() before the first LIST: wait this long */
#define LIST_OTHERS_EVERY 10      /* list_owned: secrets and policies every Nth call */
#define LIST_BUDGET_MS 3000       /* list_owned runs every sweep: fail fast, try next time */
#define NO_ADDRESS "unix:/nonexistent/orchard-k8s-pod-has-no-ip"

struct k8s_driver {
	struct k8s_config cfg;
	struct k8s_client *client;
	struct k8s_watch *watch;
	struct k8s_store *store;
	struct k8s_nodes *nodes;
	unsigned list_calls;
};

enum { RES_SECRET, RES_POLICY, RES_POD, RES_N };

static const struct resource {
	const char *prefix;       /* API group path */
	const char *plural;
	const char *kind;         /* for messages */
	char *(*name)(const char *id);
} resources[RES_N] = {
	[RES_SECRET] = { "/api/v1", "secrets", "secret", k8s_secret_name },
	[RES_POLICY] = { "/apis/networking.k8s.io/v1", "networkpolicies", "network policy",
			 k8s_policy_name },
	[RES_POD] = { "/api/v1", "pods", "pod", k8s_pod_name },
};

static struct k8s_driver *kd_of(struct ctl_driver *d)
{
	return d->priv;
}

struct k8s_store *k8s_driver_store(struct ctl_driver *d)
{
	return kd_of(d)->store;
}

static char *collection(const struct k8s_driver *kd, int res)
{
	return xasprintf("%s/namespaces/%s/%s", resources[res].prefix, kd->cfg.ns, resources[res].plural);
}

/* SIGTERM/SIGINT arrived (they are blocked outside the loop's wait). */
static int stop_requested(void)
{
	sigset_t set;

	return sigpending(&set) == 0 && (sigismember(&set, SIGTERM) == 1 || sigismember(&set, SIGINT) == 1);
}

/* ---- lifecycle -------------------------------------------------- */

static int k8s_init(struct ctl_driver *d)
{
	struct k8s_driver *kd = xcalloc(1, sizeof(*kd));
	int err;

	d->priv = kd;
	if ((err = k8s_config_load(&kd->cfg)) < 0)
		return err;
	if ((err = k8s_store_open(&kd->store, d->cfg->state_dir)) < 0)
		return err;
	k8s_client_new(&kd->client, &kd->cfg);
	if ((err = k8s_watch_start(&kd->watch, kd->client, &kd->cfg)) < 0 ||
	    (err = k8s_nodes_start(&kd->nodes, kd->client, &kd->cfg)) < 0)
		return err;
	orc_log(ORC_LOG_INFO, "kubernetes driver", "api", kd->cfg.api_url, "namespace", kd->cfg.ns,
		"agent_image", kd->cfg.agent_image, NULL);
	return 0;
}

static void k8s_release(struct ctl_driver *d)
{
	struct k8s_driver *kd = kd_of(d);

	if (!kd)
		return;
	k8s_nodes_stop(kd->nodes);
	k8s_watch_stop(kd->watch);
	k8s_client_free(kd->client);
	k8s_config_release(&kd->cfg);
	k8s_store_free(kd->store);
	free(kd);
	d->priv = NULL;
}

/* ---- create ---------------------------------------------------------------------- */

/*
 * POST body; on 409 adopt the existing object if it is this sandbox's
 * (and, for the secret, holds the same token). Sets *mine when the object
 * is now ours to delete, *uid_out (pods) to its uid.
 */
static int ensure(struct k8s_driver *kd, char **uid_out, int *mine, struct ctl_sandbox *sb,
		  int res, json_object *body)
{
	struct k8s_response r = K8S_RESPONSE_INIT;
	json_object *got = NULL, *want_data, *have_data;
	char *coll = collection(kd, res), *name = resources[res].name(sb->id), *path = NULL, *why;
	const char *uid;
	int err = 0, tries;

	for (tries = 0; tries < 3; tries++) {
		if ((err = k8s_call(kd->client, &r, "POST", coll, orc_json_str(body, NULL), 0)) < 0) {
			sb->error = xasprintf("creating %s %s failed: the Kubernetes API server is unavailable",
					      resources[res].kind, name);
			goto done;
		}
		if (r.status != 409)
			break;
		/* AlreadyExists: ours (a previous controller made it) or not? */
		free(path);
		path = xasprintf("%s/%s", coll, name);
		if ((err = k8s_call(kd->client, &r, "GET", path, NULL, 0)) < 0) {
			sb->error = xasprintf("reading %s %s failed: the Kubernetes API server is unavailable",
					      resources[res].kind, name);
			goto done;
		}
		if (r.status == 404)
			continue;   /* deleted meanwhile: create again */
		break;
	}
	if (r.status != 200 && r.status != 201) {
		why = k8s_status_message(&r);
		sb->error = xasprintf("creating %s %s failed: %s", resources[res].kind, name, why);
		free(why);
		err = r.status == 400 || r.status == 422 ? ORC_EINVALID : ORC_ERROR;
		goto done;
	}
	if ((err = orc_json_parse_object(&got, r.body.ptr, r.body.len, NULL, 0)) < 0) {
		sb->error = xasprintf("creating %s %s: malformed answer", resources[res].kind, name);
		goto done;
	}
	if (r.status == 200) {
		if (!k8s_object_is_ours(got, sb->id)) {
			sb->error = xasprintf("%s %s already exists and is not this sandbox's",
					      resources[res].kind, name);
			err = ORC_ECONFLICT;
			goto done;
		}
		if (res == RES_SECRET &&
		    (!json_object_object_get_ex(body, "data", &want_data) ||
		     !json_object_object_get_ex(got, "data", &have_data) ||
		     !json_object_equal(want_data, have_data))) {
			sb->error = xasprintf("secret %s already exists with another token", name);
			err = ORC_ECONFLICT;
			goto done;
		}
		if (res == RES_POD && k8s_meta_str(got, "deletionTimestamp")) {
			sb->error = xasprintf("pod %s is still being deleted", name);
			err = ORC_ECONFLICT;
			goto done;
		}
		orc_log(ORC_LOG_INFO, "adopted an existing object", "sandbox_id", sb->id,
			"kind", resources[res].kind, "name", name, NULL);
	}
	if (res == RES_POD)
		k8s_watch_put(kd->watch, got);   /* status() knows it before the watch does */
	*mine = 1;
	if (uid_out) {
		uid = k8s_meta_str(got, "uid");
		*uid_out = xstrdup(uid ? uid : "");
	}
done:
	json_object_put(got);
	k8s_response_release(&r);
	free(coll);
	free(name);
	free(path);
	return err;
}

static char *address(const struct k8s_driver *kd, const char *ip)
{
	if (!ip[0])
		return xstrdup(NO_ADDRESS);
	return strchr(ip, ':') ? xasprintf("http://[%s]:%d", ip, kd->cfg.agent_port)
			       : xasprintf("http://%s:%d", ip, kd->cfg.agent_port);
}

static int delete_one(struct k8s_driver *kd, int res, const char *id);

static int k8s_create(struct ctl_driver *d, struct ctl_sandbox *sb)
{
	struct k8s_driver *kd = kd_of(d);
	json_object *obj = NULL;
	int mine[RES_N] = { 0, 0, 0 }, err, i;
	char *uid = NULL, *name = NULL;

	if (!orc_is_dns_label(sb->id)) {
		sb->error = xstrdup("sandbox id is not a DNS label");
		return ORC_EINVALID;
	}
	obj = k8s_secret_new(&kd->cfg, sb);
	err = ensure(kd, NULL, &mine[RES_SECRET], sb, RES_SECRET, obj);
	json_object_put(obj);
	if (err < 0)
		goto done;
	if (!sb->block_network) {
		obj = k8s_egress_policy_new(&kd->cfg, sb);
		err = ensure(kd, NULL, &mine[RES_POLICY], sb, RES_POLICY, obj);
		json_object_put(obj);
		if (err < 0)
			goto done;
	}
	obj = k8s_pod_new(&kd->cfg, sb);
	err = ensure(kd, &uid, &mine[RES_POD], sb, RES_POD, obj);
	json_object_put(obj);
	if (err < 0)
		goto done;
	/* The pod starts in the background; status() follows it. */
	name = k8s_pod_name(sb->id);
	sb->handle = xasprintf("%s/%s/%s", kd->cfg.ns, name, uid);
done:
	if (err < 0) {
		/* Leave nothing behind but what was never ours. */
		for (i = RES_N - 1; i >= 0; i--)
			if (mine[i])
				delete_one(kd, i, sb->id);
	}
	free(uid);
	free(name);
	return err;
}

/* ---- destroy, alive, list ------------------------------------------------------------ */

/*
 * DELETE the object of sandbox id if it is ours (our labels), with its uid
 * as a precondition so that nothing created meanwhile goes instead; 404
 * is success. A pod in the watch table is ours and its uid known.
 */
static int delete_one(struct k8s_driver *kd, int res, const char *id)
{
	struct k8s_response r = K8S_RESPONSE_INIT;
	struct k8s_pod_state st;
	json_object *got = NULL;
	char *coll = collection(kd, res), *name = resources[res].name(id), *path, *why, *uid = NULL;
	struct orc_buf opts = ORC_BUF_INIT;
	int err = 0;

	path = xasprintf("%s/%s", coll, name);
	if (res == RES_POD && k8s_watch_get(kd->watch, &st, NULL, id) == 0 && st.uid[0]) {
		uid = xstrdup(st.uid);
	} else {
		if ((err = k8s_call(kd->client, &r, "GET", path, NULL, 0)) < 0 || r.status == 404)
			goto done;
		if (r.status != 200 || orc_json_parse_object(&got, r.body.ptr, r.body.len, NULL, 0) < 0 ||
		    !k8s_meta_str(got, "uid")) {
			err = ORC_EUNAVAIL;
			goto fail;
		}
		if (!k8s_object_is_ours(got, id)) {
			orc_log(ORC_LOG_WARN, "not deleting an object that is not this sandbox's",
				"kind", resources[res].kind, "name", name, NULL);
			goto done;
		}
		uid = xstrdup(k8s_meta_str(got, "uid"));
	}
	orc_buf_adds(&opts, "{\"apiVersion\":\"v1\",\"kind\":\"DeleteOptions\",\"preconditions\":{\"uid\":");
	orc_json_quote(&opts, uid);
	orc_buf_adds(&opts, "}}");
	err = k8s_call(kd->client, &r, "DELETE", path, orc_buf_cstr(&opts), 0);
	if (err == 0 && r.status != 200 && r.status != 202 && r.status != 404)
		err = ORC_EUNAVAIL;   /* 409: replaced meanwhile; the next sweep looks again */
fail:
	if (err < 0) {
		why = r.status ? k8s_status_message(&r) : xstrdup("the API server is unavailable");
		orc_log(ORC_LOG_WARN, "kubernetes delete failed", "kind", resources[res].kind, "name", name,
			"error", why, NULL);
		free(why);
	}
done:
	json_object_put(got);
	k8s_response_release(&r);
	free(coll);
	free(name);
	free(path);
	free(uid);
	orc_buf_release(&opts);
	return err;
}

static int k8s_destroy(struct ctl_driver *d, const char *id, const char *handle)
{
	struct k8s_driver *kd = kd_of(d);
	int i, err = 0;

	(void)handle;
	if (!orc_is_dns_label(id))
		return ORC_EINVALID;
	for (i = RES_POD; i >= 0; i--)
		if (delete_one(kd, i, id) < 0)
			err = ORC_EUNAVAIL;
	return err;
}

/* The uid part of a handle "<ns>/<pod>/<uid>", or NULL. */
static const char *handle_uid(const char *handle)
{
	const char *slash = handle ? strrchr(handle, '/') : NULL;

	return slash && slash[1] ? slash + 1 : NULL;
}

static int k8s_alive(struct ctl_driver *d, const char *id, const char *handle)
{
	struct k8s_driver *kd = kd_of(d);
	struct k8s_pod_state st;
	const char *uid = handle_uid(handle);
	int64_t until = orc_mono_ms() + SYNC_WAIT_MS;
	uint64_t gen;
	int err;

	for (;;) {
		gen = k8s_watch_generation(kd->watch);
		err = k8s_watch_get(kd->watch, &st, NULL, id);
		if (err != ORC_EUNAVAIL || orc_mono_ms() >= until || stop_requested())
			break;
		k8s_watch_wait(kd->watch, gen, until);
	}
	if (err == ORC_EUNAVAIL)
		return 1;   /* no LIST has worked yet: never conclude a sandbox is gone */
	if (err == ORC_ENOTFOUND || (uid && strcmp(st.uid, uid)))
		return 0;
	return st.phase != K8S_POD_FAILED && !st.deleting;
}

static void ids_add(char ***ids, size_t *n, const char *id)
{
	size_t i;

	for (i = 0; i < *n; i++)
		if (!strcmp((*ids)[i], id))
			return;
	*ids = xrealloc(*ids, orc_mul_size(*n + 1, sizeof(**ids)));
	(*ids)[(*n)++] = xstrdup(id);
}

/* The sandbox ids of every object of ours of one resource (paginated). */
static int list_ids(struct k8s_driver *kd, char ***ids, size_t *n, int res)
{
	struct k8s_response r = K8S_RESPONSE_INIT;
	json_object *list = NULL, *items, *meta, *v;
	char *coll = collection(kd, res), *cont = NULL, *esc, *path;
	const char *id;
	size_t i, m;
	int err = 0, pages;

	for (pages = 0; pages < 10000; pages++) {
		esc = cont ? orc_url_escape(cont, "") : NULL;
		path = xasprintf("%s?%s&limit=500%s%s", coll, K8S_SELECTOR, esc ? "&continue=" : "",
				 esc ? esc : "");
		free(esc);
		err = k8s_call(kd->client, &r, "GET", path, NULL, LIST_BUDGET_MS);
		free(path);
		free(cont);
		cont = NULL;
		if (err < 0 || r.status != 200 ||
		    orc_json_parse_object(&list, r.body.ptr, r.body.len, NULL, 0) < 0 ||
		    !json_object_object_get_ex(list, "items", &items) ||
		    !json_object_is_type(items, json_type_array)) {
			err = ORC_EUNAVAIL;
			break;
		}
		m = json_object_array_length(items);
		for (i = 0; i < m; i++) {
			json_object *o = json_object_array_get_idx(items, i);
			if ((id = k8s_object_sandbox(o)) && !k8s_meta_str(o, "deletionTimestamp"))
				ids_add(ids, n, id);
		}
		if (json_object_object_get_ex(list, "metadata", &meta) &&
		    json_object_object_get_ex(meta, "continue", &v) &&
		    json_object_is_type(v, json_type_string) && json_object_get_string_len(v) > 0)
			cont = xstrdup(json_object_get_string(v));
		json_object_put(list);
		list = NULL;
		if (!cont)
			break;
	}
	json_object_put(list);
	k8s_response_release(&r);
	free(coll);
	free(cont);
	return err;
}

static int k8s_list_owned(struct ctl_driver *d, char ***out, size_t *nout)
{
	struct k8s_driver *kd = kd_of(d);
	char **ids = NULL;
	size_t n = 0;
	int err;

	/* A failed LIST is an error, never an empty list: no deletions follow. */
	err = list_ids(kd, &ids, &n, RES_POD);
	if (err == 0 && kd->list_calls++ % LIST_OTHERS_EVERY == 0) {
		/* Leftovers of failed creates; rare, so looked for less often. */
		if ((err = list_ids(kd, &ids, &n, RES_SECRET)) == 0)
			err = list_ids(kd, &ids, &n, RES_POLICY);
	}
	if (err < 0) {
		orc_log(ORC_LOG_WARN, "kubernetes: listing our objects failed; no orphan cleanup this time",
			NULL);
		ctl_ids_free(ids, n);
		return err;
	}
	*out = ids;
	*nout = n;
	return 0;
}

/* ---- addresses, hints ------------------------------------------------------------------ */

static char *k8s_agent_address(struct ctl_driver *d, const char *id)
{
	struct k8s_driver *kd = kd_of(d);
	struct k8s_pod_state st;

	if (k8s_watch_get(kd->watch, &st, NULL, id) < 0)
		return xstrdup(NO_ADDRESS);
	return address(kd, st.ip);
}

/*
 * The pod as the watch last saw it, without waiting: failed when it
 * failed, vanished, is being deleted, was replaced by another pod of the
 * same name, or has been unschedulable for the pending timeout; else
 * ready or pending, with its address once it has an IP and the waiting or
 * scheduling reason as a note. Before the first LIST nothing is known:
 * pending.
 */
static int k8s_status(struct ctl_driver *d, struct ctl_sb_status *out, const char *id,
		      const char *handle)
{
	struct k8s_driver *kd = kd_of(d);
	struct k8s_pod_state st;
	const char *uid = handle_uid(handle);
	int64_t unsched = 0;
	int err;

	memset(out, 0, sizeof(*out));
	out->state = CTL_SB_FAILED;
	err = k8s_watch_get(kd->watch, &st, &unsched, id);
	if (err == ORC_EUNAVAIL) {
		out->state = CTL_SB_PENDING;
	} else if (err < 0) {
		out->message = xstrdup("the pod is gone");
	} else if (uid && strcmp(st.uid, uid)) {
		out->message = xstrdup("the pod was replaced by another pod of the same name");
	} else if (st.phase == K8S_POD_FAILED) {
		out->message = xstrdup(st.message[0] ? st.message : "the pod failed");
	} else if (st.deleting) {
		out->message = xstrdup("the pod is being deleted");
	} else if (st.unschedulable && unsched >= kd->cfg.pending_timeout_s * 1000) {
		out->message = xasprintf("%s (for %llds)", st.message, (long long)kd->cfg.pending_timeout_s);
	} else {
		out->state = st.phase == K8S_POD_READY ? CTL_SB_READY : CTL_SB_PENDING;
		out->address = st.ip[0] ? address(kd, st.ip) : NULL;
		out->message = st.message[0] ? xstrdup(st.message) : NULL;
	}
	return 0;
}

static char *k8s_diagnose(struct ctl_driver *d, const char *id)
{
	struct k8s_driver *kd = kd_of(d);
	struct k8s_pod_state st;

	if (k8s_watch_get(kd->watch, &st, NULL, id) < 0)
		return xstrdup("the pod is gone");
	return st.message[0] ? xstrdup(st.message) : NULL;
}

static int k8s_events_fd(struct ctl_driver *d)
{
	return k8s_watch_fd(kd_of(d)->watch);
}

static void k8s_drain(struct ctl_driver *d, ctl_ready_fn fn, void *arg)
{
	k8s_watch_drain(kd_of(d)->watch, fn, arg);
}

static int k8s_capacity(struct ctl_driver *d, struct ctl_capacity *out)
{
	return k8s_nodes_capacity(kd_of(d)->nodes, out);
}

const struct ctl_driver_ops ctl_driver_k8s = {
	.name = "kubernetes",
	.init = k8s_init,
	.release = k8s_release,
	.create = k8s_create,
	.destroy = k8s_destroy,
	.alive = k8s_alive,
	.list_owned = k8s_list_owned,
	.agent_address = k8s_agent_address,
	.diagnose = k8s_diagnose,
	.status = k8s_status,
	.events_fd = k8s_events_fd,
	.drain = k8s_drain,
	.unwatch = NULL,
	.seal = NULL,
	.checkpoint_remove = k8s_checkpoint_remove,
	.checkpoint_list = k8s_checkpoint_list,
	.checkpoint_agent = k8s_checkpoint_take,
	.restore_agent = k8s_checkpoint_restore,
	.capacity = k8s_capacity,
};
