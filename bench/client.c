/* One libcurl easy handle per worker: keep-alive and TLS session reuse. */
#include "bench.h"

#include "err.h"
#include "json.h"
#include "xalloc.h"

#define BODY_MAX (64u << 20)

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct bench_http *c = userdata;
	size_t n = size * nmemb;

	if (orc_buf_add(&c->body, ptr, n) < 0)
		return 0;
	return n;
}

static int http_setup(struct bench_http *c)
{
	memset(c, 0, sizeof(*c));
	orc_buf_init(&c->body, BODY_MAX);
	c->h = curl_easy_init();
	if (!c->h)
		return -1;
	curl_easy_setopt(c->h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c->h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c->h, CURLOPT_WRITEDATA, c);
	curl_easy_setopt(c->h, CURLOPT_ERRORBUFFER, c->err);
	curl_easy_setopt(c->h, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(c->h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
	/* Only plain HTTP/HTTPS, never redirected elsewhere. */
	curl_easy_setopt(c->h, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(c->h, CURLOPT_PROTOCOLS_STR, "http,https");
	return 0;
}

int bench_http_init_api(struct bench_http *c, const struct bench_cfg *cfg)
{
	char *key;

	if (http_setup(c) < 0)
		return -1;
	c->base = cfg->url;
	key = xasprintf("X-API-Key: %s", cfg->api_key);
	c->hdrs = curl_slist_append(c->hdrs, key);
	free(key);
	c->hdrs = curl_slist_append(c->hdrs, "Content-Type: application/json");
	c->hdrs = curl_slist_append(c->hdrs, "Expect:");
	curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, c->hdrs);
	if (cfg->cacert)
		curl_easy_setopt(c->h, CURLOPT_CAINFO, cfg->cacert);
	return 0;
}

int bench_http_init_agent(struct bench_http *c, const char *addr, const char *token)
{
	char *auth;

	if (strncmp(addr, "unix:", 5))
		return -1;
	if (http_setup(c) < 0)
		return -1;
	c->base = "http://agent";
	curl_easy_setopt(c->h, CURLOPT_UNIX_SOCKET_PATH, addr + 5);
	auth = xasprintf("Authorization: Bearer %s", token);
	c->hdrs = curl_slist_append(c->hdrs, auth);
	free(auth);
	c->hdrs = curl_slist_append(c->hdrs, "Content-Type: application/json");
	c->hdrs = curl_slist_append(c->hdrs, "Expect:");
	curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, c->hdrs);
	return 0;
}

void bench_http_release(struct bench_http *c)
{
	if (c->h)
		curl_easy_cleanup(c->h);
	curl_slist_free_all(c->hdrs);
	orc_buf_release(&c->body);
	c->h = NULL;
	c->hdrs = NULL;
}

int bench_http_do(struct bench_http *c, const char *method, const char *path,
		  const char *body, long timeout_ms)
{
	char *url = xasprintf("%s%s", c->base, path);
	CURLcode cc;

	orc_buf_reset(&c->body);
	c->status = 0;
	c->err[0] = '\0';
	curl_easy_setopt(c->h, CURLOPT_URL, url);
	curl_easy_setopt(c->h, CURLOPT_TIMEOUT_MS, timeout_ms);
	if (body) {
		curl_easy_setopt(c->h, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c->h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	} else {
		curl_easy_setopt(c->h, CURLOPT_HTTPGET, 1L);
	}
	curl_easy_setopt(c->h, CURLOPT_CUSTOMREQUEST,
			 strcmp(method, body ? "POST" : "GET") ? method : NULL);
	cc = curl_easy_perform(c->h);
	free(url);
	if (cc != CURLE_OK) {
		if (!c->err[0])
			snprintf(c->err, sizeof(c->err), "%s", curl_easy_strerror(cc));
		return -1;
	}
	curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &c->status);
	return 0;
}

json_object *bench_http_json(struct bench_http *c)
{
	json_object *o = NULL;
	char msg[128];

	if (!c->body.len)
		return NULL;
	if (orc_json_parse_object(&o, c->body.ptr, c->body.len, msg, sizeof(msg)) < 0)
		return NULL;
	return o;
}
