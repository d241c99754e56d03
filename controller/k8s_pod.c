/*
 * The objects a sandbox is made of on Kubernetes (docs/kubernetes.md):
 * its Pod, the Secret holding its agent token, and — for block_network
 * false — its egress NetworkPolicy. Bodies are exactly what a strict API
 * server accepts: no unknown fields, every quantity and name valid.
 */
#include "k8s.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strutil.h"
#include "xalloc.h"

#define AGENT_DIR "/orchard"            /* the emptyDir the agent is copied into */
#define TOKEN_DIR "/run/orchard"        /* the token Secret's mount */

char *k8s_pod_name(const char *id)
{
	return xasprintf("sb-%s", id);
}

char *k8s_secret_name(const char *id)
{
	return xasprintf("sb-%s-token", id);
}

char *k8s_policy_name(const char *id)
{
	return xasprintf("sb-%s-egress", id);
}

/* ---- small json-c helpers ------------------------------------------------------ */

static void put(json_object *o, const char *key, json_object *v)
{
	json_object_object_add(o, key, v);
}

static void put_str(json_object *o, const char *key, const char *v)
{
	json_object_object_add(o, key, json_object_new_string(v));
}

static void put_int(json_object *o, const char *key, int64_t v)
{
	json_object_object_add(o, key, json_object_new_int64(v));
}

static json_object *strings(int n, ...)
{
	json_object *a = json_object_new_array();
	va_list ap;

	va_start(ap, n);
	while (n-- > 0)
		json_object_array_add(a, json_object_new_string(va_arg(ap, const char *)));
	va_end(ap);
	return a;
}

static json_object *named(const char *key, const char *name, const char *key2, json_object *v)
{
	json_object *o = json_object_new_object();

	put_str(o, key, name);
	if (key2)
		put(o, key2, v);
	return o;
}

static json_object *labels(const char *id)
{
	json_object *l = json_object_new_object();

	put_str(l, K8S_LABEL_MANAGED, K8S_MANAGER);
	put_str(l, K8S_LABEL_SANDBOX, id);
	return l;
}

static json_object *metadata(const char *name, const char *id)
{
	json_object *m = json_object_new_object();

	put_str(m, "name", name);
	put(m, "labels", labels(id));
	return m;
}

static json_object *top(const char *api_version, const char *kind, const char *name, const char *id)
{
	json_object *o = json_object_new_object();

	put_str(o, "apiVersion", api_version);
	put_str(o, "kind", kind);
	put(o, "metadata", metadata(name, id));
	return o;
}

/* ---- the pod ------------------------------------------------------------------ */

static json_object *container_security(void)
{
	json_object *sc = json_object_new_object(), *caps = json_object_new_object();

	put(sc, "allowPrivilegeEscalation", json_object_new_boolean(0));
	put(caps, "drop", strings(1, "ALL"));
	put(sc, "capabilities", caps);
	return sc;
}

static json_object *mount(const char *name, const char *path, int read_only)
{
	json_object *m = named("name", name, NULL, NULL);

	put_str(m, "mountPath", path);
	if (read_only)
		put(m, "readOnly", json_object_new_boolean(1));
	return m;
}

static json_object *init_container(const struct k8s_config *cfg)
{
	json_object *c = named("name", "agent-install", NULL, NULL);
	json_object *res = json_object_new_object(), *lim = json_object_new_object();
	json_object *mounts = json_object_new_array();

	put_str(c, "image", cfg->agent_image);
	put(c, "command", strings(4, "cp", "-a", "/opt/orchard/.", AGENT_DIR "/"));
	put_str(lim, "cpu", "100m");
	put_str(lim, "memory", "64Mi");
	put(res, "limits", lim);
	put(c, "resources", res);
	put(c, "securityContext", container_security());
	json_object_array_add(mounts, mount("orchard", AGENT_DIR, 0));
	put(c, "volumeMounts", mounts);
	return c;
}

/* The sandbox-tools bundle (docs/sandbox-tools.md): at TOOLS_DIR in the
 * tools image; copied into an emptyDir, or mounted as an image volume. */
#define TOOLS_DIR "/opt/sandbox-tools"
#define TOOLS_COPY "/tools"
#define TOOLS_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:" TOOLS_DIR "/bin"

static json_object *tools_init_container(const struct k8s_config *cfg)
{
	json_object *c = named("name", "tools-install", NULL, NULL);
	json_object *res = json_object_new_object(), *lim = json_object_new_object();
	json_object *mounts = json_object_new_array();

	put_str(c, "image", cfg->tools_image);
	put(c, "command", strings(4, "cp", "-a", TOOLS_DIR "/.", TOOLS_COPY "/"));
	put_str(lim, "cpu", "500m");
	put_str(lim, "memory", "256Mi");
	put(res, "limits", lim);
	put(c, "resources", res);
	put(c, "securityContext", container_security());
	json_object_array_add(mounts, mount("sandbox-tools", TOOLS_COPY, 0));
	put(c, "volumeMounts", mounts);
	return c;
}

static json_object *env_var(const char *name, const char *value)
{
	json_object *e = named("name", name, NULL, NULL);

	put_str(e, "value", value);
	return e;
}

/* The main container's side: the mount, SANDBOX_TOOLS and PATH (its bin/
 * last, as the local driver does). */
static void tools_mount(json_object *c, json_object *mounts, const struct k8s_config *cfg)
{
	json_object *m = mount("sandbox-tools", TOOLS_DIR, 1), *env = json_object_new_array();

	if (cfg->tools_image_volume)
		put_str(m, "subPath", "opt/sandbox-tools");  /* TOOLS_DIR in the image */
	json_object_array_add(mounts, m);
	json_object_array_add(env, env_var("SANDBOX_TOOLS", TOOLS_DIR));
	json_object_array_add(env, env_var("PATH", TOOLS_PATH));
	put(c, "env", env);
}

static json_object *sandbox_resources(const struct k8s_config *cfg, const struct ctl_sandbox *sb)
{
	json_object *res = json_object_new_object();
	json_object *req = json_object_new_object(), *lim = json_object_new_object();
	int64_t cpu_n = sb->cpu_millis > 0 ? sb->cpu_millis : 1;
	int64_t mem_n = sb->memory_bytes > 0 ? sb->memory_bytes : 1;
	char cpu[32], mem[32], rcpu[32], rmem[32];
	double cpu_ratio = 1, mem_ratio = 1;
	int64_t rc, rm;

	/* Requests are the size over the overcommit ratios (capacity.c), so
	 * the scheduler places what admission admitted; limits the size. */
	if (ctl_capacity_overcommit(&cpu_ratio, &mem_ratio) < 0)
		cpu_ratio = mem_ratio = 1;
	snprintf(cpu, sizeof(cpu), "%lldm", (long long)cpu_n);
	snprintf(mem, sizeof(mem), "%lld", (long long)mem_n);
	rc = (int64_t)((double)cpu_n / cpu_ratio);
	rm = (int64_t)((double)mem_n / mem_ratio);
	snprintf(rcpu, sizeof(rcpu), "%lldm", (long long)(rc > 0 ? rc : 1));
	snprintf(rmem, sizeof(rmem), "%lld", (long long)(rm > 0 ? rm : 1));
	put_str(req, "cpu", rcpu);
	put_str(req, "memory", rmem);
	put_str(req, "ephemeral-storage", cfg->ephemeral_request);
	put_str(lim, "cpu", cpu);
	put_str(lim, "memory", mem);
	put_str(lim, "ephemeral-storage", cfg->ephemeral_limit);
	put(res, "requests", req);
	put(res, "limits", lim);
	return res;
}

static json_object *sandbox_container(const struct k8s_config *cfg, const struct ctl_sandbox *sb)
{
	json_object *c = named("name", "sandbox", NULL, NULL);
	json_object *ports = json_object_new_array(), *port = named("name", "agent", NULL, NULL);
	json_object *probe = json_object_new_object(), *tcp = json_object_new_object();
	json_object *mounts = json_object_new_array();
	char listen[48];

	snprintf(listen, sizeof(listen), "tcp:0.0.0.0:%d", cfg->agent_port);
	put_str(c, "image", sb->image);
	put(c, "command", strings(1, AGENT_DIR "/bin/orchard-agent"));
	put(c, "args", strings(4, "--listen", listen, "--token-file", TOKEN_DIR "/token"));
	put_str(c, "workingDir", "/workspace");
	put_int(port, "containerPort", cfg->agent_port);
	put_str(port, "protocol", "TCP");
	json_object_array_add(ports, port);
	put(c, "ports", ports);
	put_str(tcp, "port", "agent");
	put(probe, "tcpSocket", tcp);
	put_int(probe, "periodSeconds", 1);
	put(c, "readinessProbe", probe);
	put(c, "resources", sandbox_resources(cfg, sb));
	put(c, "securityContext", container_security());
	json_object_array_add(mounts, mount("orchard", AGENT_DIR, 1));
	json_object_array_add(mounts, mount("token", TOKEN_DIR, 1));
	json_object_array_add(mounts, mount("workspace", "/workspace", 0));
	if (cfg->tools_image && sb->tools)
		tools_mount(c, mounts, cfg);
	put(c, "volumeMounts", mounts);
	return c;
}

static json_object *tools_volume(const struct k8s_config *cfg)
{
	json_object *src = json_object_new_object();

	if (cfg->tools_image_volume) {
		put_str(src, "reference", cfg->tools_image);
		put_str(src, "pullPolicy", "IfNotPresent");
		return named("name", "sandbox-tools", "image", src);
	}
	put_str(src, "sizeLimit", "2Gi");
	return named("name", "sandbox-tools", "emptyDir", src);
}

static json_object *volumes(const struct k8s_config *cfg, const struct ctl_sandbox *sb)
{
	json_object *v = json_object_new_array(), *ed = json_object_new_object();
	json_object *secret = json_object_new_object();
	char *sname = k8s_secret_name(sb->id);

	put_str(ed, "sizeLimit", "128Mi");
	json_object_array_add(v, named("name", "orchard", "emptyDir", ed));
	put_str(secret, "secretName", sname);
	/* Non-root: group-readable, and fsGroup makes the group ours. */
	put_int(secret, "defaultMode", cfg->run_as_non_root ? 0440 : 0400);
	json_object_array_add(v, named("name", "token", "secret", secret));
	json_object_array_add(v, named("name", "workspace", "emptyDir", json_object_new_object()));
	if (cfg->tools_image && sb->tools)
		json_object_array_add(v, tools_volume(cfg));
	free(sname);
	return v;
}

json_object *k8s_pod_new(const struct k8s_config *cfg, const struct ctl_sandbox *sb)
{
	char *name = k8s_pod_name(sb->id);
	json_object *pod = top("v1", "Pod", name, sb->id), *spec = json_object_new_object();
	json_object *psc = json_object_new_object(), *seccomp = json_object_new_object();
	json_object *inits = json_object_new_array(), *containers = json_object_new_array();
	json_object *pulls;
	size_t i;

	put_str(spec, "restartPolicy", "Never");
	/* Kubernetes itself ends the pod at the TTL, even with no controller. */
	put_int(spec, "activeDeadlineSeconds", sb->ttl_left_s > 0 ? sb->ttl_left_s : 1);
	put(spec, "automountServiceAccountToken", json_object_new_boolean(0));
	if (cfg->service_account)
		put_str(spec, "serviceAccountName", cfg->service_account);
	put(spec, "enableServiceLinks", json_object_new_boolean(0));
	put_int(spec, "terminationGracePeriodSeconds", cfg->grace_s);
	put_str(seccomp, "type", "RuntimeDefault");
	put(psc, "seccompProfile", seccomp);
	if (cfg->run_as_non_root) {
		put(psc, "runAsNonRoot", json_object_new_boolean(1));
		put_int(psc, "runAsUser", cfg->run_as_user);
		put_int(psc, "runAsGroup", cfg->run_as_user);
		put_int(psc, "fsGroup", cfg->run_as_user);
	}
	put(spec, "securityContext", psc);
	if (cfg->runtime_class)
		put_str(spec, "runtimeClassName", cfg->runtime_class);
	if (cfg->node_selector)
		put(spec, "nodeSelector", json_object_get(cfg->node_selector));
	if (cfg->tolerations)
		put(spec, "tolerations", json_object_get(cfg->tolerations));
	if (cfg->npull_secrets) {
		pulls = json_object_new_array();
		for (i = 0; i < cfg->npull_secrets; i++)
			json_object_array_add(pulls, named("name", cfg->pull_secrets[i], NULL, NULL));
		put(spec, "imagePullSecrets", pulls);
	}
	json_object_array_add(inits, init_container(cfg));
	if (cfg->tools_image && sb->tools && !cfg->tools_image_volume)
		json_object_array_add(inits, tools_init_container(cfg));
	put(spec, "initContainers", inits);
	json_object_array_add(containers, sandbox_container(cfg, sb));
	put(spec, "containers", containers);
	put(spec, "volumes", volumes(cfg, sb));
	put(pod, "spec", spec);
	free(name);
	return pod;
}

/* ---- the token secret ---------------------------------------------------------- */

static char *base64(const char *s)
{
	static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s), i, o = 0;
	char *out = xmalloc(orc_add_size(orc_mul_size(n / 3 + 1, 4), 1));
	unsigned v;

	for (i = 0; i + 2 < n; i += 3) {
		v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8 | p[i + 2];
		out[o++] = tab[v >> 18];
		out[o++] = tab[(v >> 12) & 63];
		out[o++] = tab[(v >> 6) & 63];
		out[o++] = tab[v & 63];
	}
	if (i < n) {
		v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0);
		out[o++] = tab[v >> 18];
		out[o++] = tab[(v >> 12) & 63];
		out[o++] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
		out[o++] = '=';
	}
	out[o] = '\0';
	return out;
}

json_object *k8s_secret_new(const struct k8s_config *cfg, const struct ctl_sandbox *sb)
{
	char *name = k8s_secret_name(sb->id), *b64 = base64(sb->token ? sb->token : "");
	json_object *s = top("v1", "Secret", name, sb->id), *data = json_object_new_object();

	(void)cfg;
	put_str(s, "type", "Opaque");
	put(s, "immutable", json_object_new_boolean(1));
	put_str(data, "token", b64);
	put(s, "data", data);
	free(name);
	free(b64);
	return s;
}

/* ---- the egress policy ---------------------------------------------------------- */

/* {"ipBlock": {"cidr": all, "except": [the configured CIDRs of that family]}} */
static json_object *ip_block(const struct k8s_config *cfg, const char *all, int v6)
{
	json_object *peer = json_object_new_object(), *blk = json_object_new_object();
	json_object *except = json_object_new_array();
	size_t i;

	put_str(blk, "cidr", all);
	for (i = 0; i < cfg->negress_except; i++)
		if ((strchr(cfg->egress_except[i], ':') != NULL) == v6)
			json_object_array_add(except, json_object_new_string(cfg->egress_except[i]));
	if (json_object_array_length(except))
		put(blk, "except", except);
	else
		json_object_put(except);
	put(peer, "ipBlock", blk);
	return peer;
}

static json_object *dns_rule(void)
{
	json_object *rule = json_object_new_object(), *to = json_object_new_array();
	json_object *peer = json_object_new_object(), *ns = json_object_new_object();
	json_object *pods = json_object_new_object(), *ports = json_object_new_array();
	json_object *m, *p;
	const char *proto[] = { "UDP", "TCP" };
	size_t i;

	m = json_object_new_object();
	put_str(m, "kubernetes.io/metadata.name", "kube-system");
	put(ns, "matchLabels", m);
	m = json_object_new_object();
	put_str(m, "k8s-app", "kube-dns");
	put(pods, "matchLabels", m);
	put(peer, "namespaceSelector", ns);
	put(peer, "podSelector", pods);
	json_object_array_add(to, peer);
	for (i = 0; i < 2; i++) {
		p = json_object_new_object();
		put_str(p, "protocol", proto[i]);
		put_int(p, "port", 53);
		json_object_array_add(ports, p);
	}
	put(rule, "to", to);
	put(rule, "ports", ports);
	return rule;
}

json_object *k8s_egress_policy_new(const struct k8s_config *cfg, const struct ctl_sandbox *sb)
{
	char *name = k8s_policy_name(sb->id);
	json_object *np = top("networking.k8s.io/v1", "NetworkPolicy", name, sb->id);
	json_object *spec = json_object_new_object(), *sel = json_object_new_object();
	json_object *match = json_object_new_object(), *egress = json_object_new_array();
	json_object *anywhere = json_object_new_object(), *to = json_object_new_array();
	size_t i;
	int v6 = 0;

	put_str(match, K8S_LABEL_SANDBOX, sb->id);
	put(sel, "matchLabels", match);
	put(spec, "podSelector", sel);
	put(spec, "policyTypes", strings(1, "Egress"));
	/* IPv6 egress only when the operator listed IPv6 ranges to keep out. */
	for (i = 0; i < cfg->negress_except; i++)
		v6 |= strchr(cfg->egress_except[i], ':') != NULL;
	json_object_array_add(to, ip_block(cfg, "0.0.0.0/0", 0));
	if (v6)
		json_object_array_add(to, ip_block(cfg, "::/0", 1));
	put(anywhere, "to", to);
	json_object_array_add(egress, anywhere);
	/* Cluster DNS lives inside the excluded ranges: let name lookups through. */
	json_object_array_add(egress, dns_rule());
	put(spec, "egress", egress);
	put(np, "spec", spec);
	free(name);
	return np;
}

/* ---- reading objects back ---------------------------------------------------------- */

const char *k8s_meta_str(json_object *obj, const char *key)
{
	json_object *meta = NULL, *v = NULL;

	if (!json_object_object_get_ex(obj, "metadata", &meta) ||
	    !json_object_object_get_ex(meta, key, &v) || !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

static const char *label(json_object *obj, const char *key)
{
	json_object *meta = NULL, *l = NULL, *v = NULL;

	if (!json_object_object_get_ex(obj, "metadata", &meta) ||
	    !json_object_object_get_ex(meta, "labels", &l) ||
	    !json_object_object_get_ex(l, key, &v) || !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

const char *k8s_object_sandbox(json_object *obj)
{
	const char *m = label(obj, K8S_LABEL_MANAGED), *id = label(obj, K8S_LABEL_SANDBOX);

	if (!m || strcmp(m, K8S_MANAGER) || !id || !orc_is_dns_label(id))
		return NULL;
	return id;
}

int k8s_object_is_ours(json_object *obj, const char *id)
{
	const char *have = k8s_object_sandbox(obj);

	return have && !strcmp(have, id);
}
