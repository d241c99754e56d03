/*
 * The kubernetes driver's settings: ORCHARD_K8S_* from the environment
 * (docs/kubernetes.md), every value checked here so the rest of the
 * driver can trust struct k8s_config.
 */
#include "k8s.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "json.h"
#include "log.h"
#include "strutil.h"
#include "xalloc.h"

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"
#define MAX_LIST 64

static const char default_except[] =
	"10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,169.254.169.254/32,100.64.0.0/10";

/* An environment value, or NULL when unset or empty. */
static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

static int bad(const char *name, const char *value, const char *why)
{
	orc_log(ORC_LOG_ERROR, "bad kubernetes driver setting", "name", name, "value", value,
		"expected", why, NULL);
	return ORC_EINVALID;
}

static char *dup_env(const char *name, const char *dflt)
{
	const char *v = env(name);

	return v ? xstrdup(v) : dflt ? xstrdup(dflt) : NULL;
}

static int get_int(int64_t *out, const char *name, int64_t dflt, int64_t min, int64_t max)
{
	const char *v = env(name);
	char why[96];

	if (!v) {
		*out = dflt;
		return 0;
	}
	if (orc_parse_i64(out, v, min, max) < 0) {
		snprintf(why, sizeof(why), "an integer in %lld..%lld", (long long)min, (long long)max);
		return bad(name, v, why);
	}
	return 0;
}

/* "a/n" with a numeric address of the right family and 0 <= n <= bits. */
static int cidr_valid(const char *s)
{
	unsigned char addr[16];
	const char *slash = strchr(s, '/');
	char host[64];
	int64_t bits;
	int v6;

	if (!slash || (size_t)(slash - s) >= sizeof(host))
		return 0;
	memcpy(host, s, (size_t)(slash - s));
	host[slash - s] = '\0';
	v6 = strchr(host, ':') != NULL;
	if (inet_pton(v6 ? AF_INET6 : AF_INET, host, addr) != 1)
		return 0;
	return orc_parse_i64(&bits, slash + 1, 0, v6 ? 128 : 32) == 0;
}

/* Split a comma-separated list (spaces around items ignored) into *out. */
static int split_list(char ***out, size_t *nout, const char *name, const char *v,
		      int (*valid)(const char *))
{
	char **items = NULL;
	size_t n = 0;
	const char *p = v, *end;
	int err = 0;

	while (*p) {
		while (*p == ' ' || *p == ',')
			p++;
		if (!*p)
			break;
		end = p + strcspn(p, ", ");
		if (n == MAX_LIST) {
			err = bad(name, v, "at most 64 items");
			break;
		}
		items = xrealloc(items, (n + 1) * sizeof(*items));
		items[n] = xstrndup(p, (size_t)(end - p));
		if (!valid(items[n++])) {
			err = bad(name, v, "a comma-separated list of valid items");
			break;
		}
		p = end;
	}
	if (err < 0) {
		ctl_ids_free(items, n);
		return err;
	}
	*out = items;
	*nout = n;
	return 0;
}

static int is_dns_subdomain(const char *s)
{
	size_t n = strlen(s), i;

	if (n == 0 || n > 253)
		return 0;
	for (i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
		      s[i] == '-' || s[i] == '.'))
			return 0;
	return s[0] != '-' && s[0] != '.' && s[n - 1] != '-' && s[n - 1] != '.';
}

/* A JSON value of the given type; "", "{}" and "[]" mean unset. */
static int get_json(json_object **out, const char *name, json_type type)
{
	const char *v = env(name);
	json_object *o = NULL;
	char msg[128];

	*out = NULL;
	if (!v)
		return 0;
	if (orc_json_parse(&o, v, strlen(v), msg, sizeof(msg)) < 0 || !json_object_is_type(o, type)) {
		json_object_put(o);
		return bad(name, v, type == json_type_object ? "a JSON object" : "a JSON array");
	}
	if ((type == json_type_object && json_object_object_length(o) == 0) ||
	    (type == json_type_array && json_object_array_length(o) == 0)) {
		json_object_put(o);
		return 0;
	}
	*out = o;
	return 0;
}

/* Where the API server is: ORCHARD_K8S_API_URL, else KUBECONFIG, else
 * in-cluster. */
static int api_location(struct k8s_config *cfg)
{
	const char *url = env("ORCHARD_K8S_API_URL"), *kubeconfig = env("KUBECONFIG");
	const char *host = env("KUBERNETES_SERVICE_HOST"), *port = env("KUBERNETES_SERVICE_PORT");
	size_t n;

	if (url) {
		if (strncmp(url, "http://", 7) && strncmp(url, "https://", 8))
			return bad("ORCHARD_K8S_API_URL", url, "an http:// or https:// URL");
		cfg->api_url = xstrdup(url);
		n = strlen(cfg->api_url);
		while (n > 8 && cfg->api_url[n - 1] == '/')
			cfg->api_url[--n] = '\0';
		cfg->token_file = dup_env("ORCHARD_K8S_TOKEN_FILE", NULL);
		cfg->ca_file = dup_env("ORCHARD_K8S_CA_FILE", NULL);
		return 0;
	}
	if (kubeconfig)
		return k8s_kubeconfig_load(cfg, kubeconfig);
	if (!host || !port) {
		orc_log(ORC_LOG_ERROR, "kubernetes driver: set ORCHARD_K8S_API_URL or KUBECONFIG, or "
			"run in a pod (KUBERNETES_SERVICE_HOST/PORT)", NULL);
		return ORC_EINVALID;
	}
	cfg->api_url = strchr(host, ':') ? xasprintf("https://[%s]:%s", host, port)
					 : xasprintf("https://%s:%s", host, port);
	cfg->token_file = dup_env("ORCHARD_K8S_TOKEN_FILE", SA_DIR "/token");
	cfg->ca_file = dup_env("ORCHARD_K8S_CA_FILE", SA_DIR "/ca.crt");
	return 0;
}

static int quantities(struct k8s_config *cfg)
{
	int64_t req, lim;

	cfg->ephemeral_request = dup_env("ORCHARD_K8S_EPHEMERAL_STORAGE_REQUEST", "1Gi");
	cfg->ephemeral_limit = dup_env("ORCHARD_K8S_EPHEMERAL_STORAGE", "10Gi");
	if (orc_parse_memory(&req, cfg->ephemeral_request) < 0)
		return bad("ORCHARD_K8S_EPHEMERAL_STORAGE_REQUEST", cfg->ephemeral_request, "a quantity");
	if (orc_parse_memory(&lim, cfg->ephemeral_limit) < 0)
		return bad("ORCHARD_K8S_EPHEMERAL_STORAGE", cfg->ephemeral_limit, "a quantity");
	if (req > lim)
		return bad("ORCHARD_K8S_EPHEMERAL_STORAGE_REQUEST", cfg->ephemeral_request,
			   "at most ORCHARD_K8S_EPHEMERAL_STORAGE");
	return 0;
}

int k8s_config_load(struct k8s_config *cfg)
{
	const char *v;
	int64_t n;
	int err;

	memset(cfg, 0, sizeof(*cfg));
	if ((err = api_location(cfg)) < 0)
		goto done;
	cfg->ns = dup_env("ORCHARD_K8S_NAMESPACE", "orchard-sandboxes");
	if (!orc_is_dns_label(cfg->ns)) {
		err = bad("ORCHARD_K8S_NAMESPACE", cfg->ns, "a DNS label");
		goto done;
	}
	cfg->agent_image = dup_env("ORCHARD_K8S_AGENT_IMAGE", "orchard/agent:0.1.0");
	cfg->tools_image = dup_env("ORCHARD_K8S_TOOLS_IMAGE", NULL);
	v = env("ORCHARD_K8S_TOOLS_MODE");
	if (v && strcmp(v, "init") && strcmp(v, "image")) {
		err = bad("ORCHARD_K8S_TOOLS_MODE", v, "\"init\" or \"image\"");
		goto done;
	}
	cfg->tools_image_volume = v && !strcmp(v, "image");
	cfg->service_account = dup_env("ORCHARD_K8S_SERVICE_ACCOUNT", NULL);
	cfg->runtime_class = dup_env("ORCHARD_K8S_RUNTIME_CLASS", NULL);
	if ((cfg->service_account && !is_dns_subdomain(cfg->service_account)) ||
	    (cfg->runtime_class && !is_dns_subdomain(cfg->runtime_class))) {
		err = bad("ORCHARD_K8S_SERVICE_ACCOUNT/RUNTIME_CLASS",
			  cfg->runtime_class ? cfg->runtime_class : cfg->service_account,
			  "a DNS subdomain");
		goto done;
	}
	if ((err = get_json(&cfg->node_selector, "ORCHARD_K8S_NODE_SELECTOR", json_type_object)) < 0 ||
	    (err = get_json(&cfg->tolerations, "ORCHARD_K8S_TOLERATIONS", json_type_array)) < 0)
		goto done;
	if ((v = env("ORCHARD_K8S_IMAGE_PULL_SECRETS")) &&
	    (err = split_list(&cfg->pull_secrets, &cfg->npull_secrets, "ORCHARD_K8S_IMAGE_PULL_SECRETS",
			      v, is_dns_subdomain)) < 0)
		goto done;
	v = env("ORCHARD_K8S_EGRESS_EXCEPT");
	if ((err = split_list(&cfg->egress_except, &cfg->negress_except, "ORCHARD_K8S_EGRESS_EXCEPT",
			      v ? v : default_except, cidr_valid)) < 0)
		goto done;
	if ((err = quantities(cfg)) < 0)
		goto done;
	if ((err = get_int(&n, "ORCHARD_K8S_AGENT_PORT", 7070, 1, 65535)) < 0)
		goto done;
	cfg->agent_port = (int)n;
	if ((err = get_int(&n, "ORCHARD_K8S_RUN_AS_NON_ROOT", 0, 0, 1)) < 0)
		goto done;
	cfg->run_as_non_root = (int)n;
	if ((err = get_int(&cfg->run_as_user, "ORCHARD_K8S_RUN_AS_USER", 65532, 1, 2147483647)) < 0)
		goto done;
	if ((err = get_int(&n, "ORCHARD_K8S_MAX_INFLIGHT", 16, 1, 1024)) < 0)
		goto done;
	cfg->max_inflight = (int)n;
	if ((err = get_int(&cfg->grace_s, "ORCHARD_K8S_GRACE_S", 5, 0, 3600)) < 0 ||
	    (err = get_int(&cfg->pending_timeout_s, "ORCHARD_K8S_PENDING_TIMEOUT_S", 300, 1, 86400)) < 0 ||
	    (err = get_int(&cfg->request_timeout_ms, "ORCHARD_K8S_REQUEST_TIMEOUT_MS", 10000, 100,
			   600000)) < 0 ||
	    (err = get_int(&cfg->retry_budget_ms, "ORCHARD_K8S_RETRY_BUDGET_MS", 30000, 0, 600000)) < 0 ||
	    (err = get_int(&cfg->watch_timeout_s, "ORCHARD_K8S_WATCH_TIMEOUT_S", 300, 1, 3600)) < 0 ||
	    (err = get_int(&cfg->nodes_refresh_s, "ORCHARD_K8S_NODES_REFRESH_S", 30, 1, 3600)) < 0)
		goto done;
done:
	if (err < 0)
		k8s_config_release(cfg);
	return err;
}

void k8s_config_release(struct k8s_config *cfg)
{
	free(cfg->api_url);
	free(cfg->token_file);
	free(cfg->ca_file);
	free(cfg->token);
	free(cfg->ca_pem);
	free(cfg->cert_pem);
	free(cfg->key_pem);
	free(cfg->cert_file);
	free(cfg->key_file);
	free(cfg->ns);
	free(cfg->agent_image);
	free(cfg->tools_image);
	free(cfg->service_account);
	free(cfg->runtime_class);
	json_object_put(cfg->node_selector);
	json_object_put(cfg->tolerations);
	ctl_ids_free(cfg->pull_secrets, cfg->npull_secrets);
	ctl_ids_free(cfg->egress_except, cfg->negress_except);
	free(cfg->ephemeral_request);
	free(cfg->ephemeral_limit);
	memset(cfg, 0, sizeof(*cfg));
}
