/*
 * HTTP to the Kubernetes API server with libcurl: bearer token (re-read
 * when the file changes: projected service-account tokens rotate), the
 * cluster CA, a bound on requests in flight, and retries with backoff on
 * 429, 5xx and connection errors that honour Retry-After.
 *
 * Each thread keeps one easy handle (curl_easy_reset keeps its connection
 * cache), so calls reuse keep-alive connections without sharing them
 * across threads. A watch gets a handle of its own.
 */
#include "k8s.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <curl/curl.h>

#include "err.h"
#include "json.h"
#include "log.h"
#include "strutil.h"
#include "xalloc.h"

#define MAX_BODY (64u << 20)       /* one answer (lists are paginated) */
#define MAX_LINE (16u << 20)       /* one watch event */
#define MAX_TOKEN 16384
#define BACKOFF_FIRST_MS 200
#define BACKOFF_MAX_MS 5000
#define RETRY_AFTER_MAX_S 60

struct k8s_client {
	const struct k8s_config *cfg;
	pthread_mutex_t lock;      /* token, inflight */
	pthread_cond_t slot;
	int inflight;
	char *token;
	struct stat token_st;
	volatile int stopping;     /* k8s_client_stop(): abort transfers, no retries */
};

static __thread CURL *thread_handle;

void k8s_response_release(struct k8s_response *r)
{
	orc_buf_release(&r->body);
	r->status = 0;
}

int k8s_client_new(struct k8s_client **out, const struct k8s_config *cfg)
{
	struct k8s_client *c = xcalloc(1, sizeof(*c));

	c->cfg = cfg;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->slot, NULL);
	*out = c;
	return 0;
}

void k8s_client_free(struct k8s_client *c)
{
	if (!c)
		return;
	k8s_client_thread_done();
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->slot);
	free(c->token);
	free(c);
}

void k8s_client_stop(struct k8s_client *c)
{
	c->stopping = 1;
}

/* ---- the token ------------------------------------------------------------ */

static int read_small_file(char **out, const char *path)
{
	char buf[MAX_TOKEN + 1];
	size_t len = 0;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return ORC_ENOTFOUND;
	while (len < sizeof(buf) - 1) {
		n = read(fd, buf + len, sizeof(buf) - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' '))
		len--;
	if (len == 0 || len >= MAX_TOKEN)
		return ORC_EINVALID;
	*out = xstrndup(buf, len);
	return 0;
}

/* The current token (a copy, NULL without a token file). Re-read when the
 * file changed or force is set. */
static char *token_get(struct k8s_client *c, int force)
{
	const char *path = c->cfg->token_file;
	struct stat st;
	char *fresh = NULL, *copy = NULL;

	if (!path)
		return c->cfg->token ? xstrdup(c->cfg->token) : NULL;
	pthread_mutex_lock(&c->lock);
	if (stat(path, &st) == 0 &&
	    (force || !c->token || st.st_ino != c->token_st.st_ino || st.st_size != c->token_st.st_size ||
	     st.st_mtim.tv_sec != c->token_st.st_mtim.tv_sec ||
	     st.st_mtim.tv_nsec != c->token_st.st_mtim.tv_nsec)) {
		if (read_small_file(&fresh, path) == 0) {
			if (c->token && strcmp(c->token, fresh))
				orc_log(ORC_LOG_INFO, "kubernetes token re-read", "file", path, NULL);
			free(c->token);
			c->token = fresh;
			c->token_st = st;
		} else {
			orc_log(ORC_LOG_WARN, "cannot read the kubernetes token file", "file", path, NULL);
		}
	}
	if (c->token)
		copy = xstrdup(c->token);
	pthread_mutex_unlock(&c->lock);
	return copy;
}

/* ---- one attempt ------------------------------------------------------------ */

struct sink {
	struct orc_buf *buf;
	int toobig;
	double retry_after;        /* seconds, < 0 when absent */
};

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *arg)
{
	struct sink *s = arg;
	size_t n = size * nmemb;

	if (orc_buf_add(s->buf, ptr, n) < 0) {
		s->toobig = 1;
		return 0;
	}
	return n;
}

static size_t on_header(char *ptr, size_t size, size_t nmemb, void *arg)
{
	struct sink *s = arg;
	size_t n = size * nmemb, k = sizeof("Retry-After:") - 1;
	char val[128];
	int64_t secs;
	time_t when;

	if (n > k && n - k < sizeof(val) && !strncasecmp(ptr, "Retry-After:", k)) {
		memcpy(val, ptr + k, n - k);
		val[n - k] = '\0';
		val[strcspn(val, "\r\n")] = '\0';
		if (orc_parse_i64(&secs, val + strspn(val, " \t"), 0, 86400) == 0) {
			s->retry_after = (double)secs;
		} else if ((when = curl_getdate(val, NULL)) > 0) {
			s->retry_after = (double)when - orc_now();
			if (s->retry_after < 0)
				s->retry_after = 0;
		}
	}
	return n;
}

/* Called about once a second during a transfer: k8s_client_stop() aborts it. */
static int on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	const struct k8s_client *c = arg;

	(void)dt; (void)dn; (void)ut; (void)un;
	return c->stopping ? 1 : 0;
}

/* The thread's easy handle, reset, with the options every call shares. */
/* KUBECONFIG's inline CA, client certificate or key (PEM), when set. */
static void set_pem(CURL *h, CURLoption opt, char *pem)
{
	struct curl_blob blob;

	if (!pem)
		return;
	blob.data = pem;
	blob.len = strlen(pem);
	blob.flags = CURL_BLOB_COPY;
	curl_easy_setopt(h, opt, &blob);
}

static CURL *handle_for(struct k8s_client *c, CURL *own)
{
	CURL *h = own;

	if (!h) {
		if (!thread_handle)
			thread_handle = curl_easy_init();
		h = thread_handle;
		if (!h)
			return NULL;
		curl_easy_reset(h);
	}
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 30L);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 10L);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_USERAGENT, "orchard-controller");
	if (c->cfg->ca_file)
		curl_easy_setopt(h, CURLOPT_CAINFO, c->cfg->ca_file);
	set_pem(h, CURLOPT_CAINFO_BLOB, c->cfg->ca_pem);
	set_pem(h, CURLOPT_SSLCERT_BLOB, c->cfg->cert_pem);
	set_pem(h, CURLOPT_SSLKEY_BLOB, c->cfg->key_pem);
	if (c->cfg->cert_file)
		curl_easy_setopt(h, CURLOPT_SSLCERT, c->cfg->cert_file);
	if (c->cfg->key_file)
		curl_easy_setopt(h, CURLOPT_SSLKEY, c->cfg->key_file);
	curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(h, CURLOPT_XFERINFODATA, c);
	return h;
}

static struct curl_slist *headers(const char *token, int has_body, const char *ctype)
{
	struct curl_slist *l = NULL;
	char *auth;

	l = curl_slist_append(l, "Accept: application/json");
	l = curl_slist_append(l, "Expect:");
	if (has_body)
		l = curl_slist_append(l, ctype);
	if (token) {
		auth = xasprintf("Authorization: Bearer %s", token);
		l = curl_slist_append(l, auth);
		free(auth);
	}
	return l;
}

static void slot_take(struct k8s_client *c)
{
	pthread_mutex_lock(&c->lock);
	while (c->inflight >= c->cfg->max_inflight)
		pthread_cond_wait(&c->slot, &c->lock);
	c->inflight++;
	pthread_mutex_unlock(&c->lock);
}

static void slot_give(struct k8s_client *c)
{
	pthread_mutex_lock(&c->lock);
	c->inflight--;
	pthread_cond_signal(&c->slot);
	pthread_mutex_unlock(&c->lock);
}

/* 0 with out->status, or the curl error in *cc. */
static int attempt(struct k8s_client *c, struct k8s_response *out, double *retry_after,
		   CURLcode *cc, const char *method, const char *url, const char *body,
		   const char *token, int64_t timeout_ms)
{
	struct sink sink = { &out->body, 0, -1 };
	struct curl_slist *hdrs;
	CURL *h = handle_for(c, NULL);
	int err = 0;

	if (!h)
		return ORC_ERROR;
	orc_buf_release(&out->body);
	orc_buf_init(&out->body, MAX_BODY);
	hdrs = headers(token, body != NULL, "Content-Type: application/json");
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, &sink);
	if (body) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
	}
	slot_take(c);
	*cc = curl_easy_perform(h);
	slot_give(c);
	curl_slist_free_all(hdrs);
	*retry_after = sink.retry_after;
	if (sink.toobig)
		err = ORC_ETOOBIG;
	else if (*cc != CURLE_OK)
		err = ORC_EUNAVAIL;
	else
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &out->status);
	return err;
}

/* Sleep ms, in slices so that k8s_client_stop() cuts it short. */
static void sleep_ms(const struct k8s_client *c, int64_t ms)
{
	struct timespec ts;
	int64_t step;

	while (ms > 0 && !c->stopping) {
		step = ms < 100 ? ms : 100;
		ts.tv_sec = 0;
		ts.tv_nsec = (long)step * 1000000L;
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
		ms -= step;
	}
}

/* Exponential backoff with +-25% jitter, so retries of many callers spread. */
static int64_t backoff_ms(int n)
{
	int64_t ms = BACKOFF_FIRST_MS;
	unsigned char r;

	while (n-- > 0 && ms < BACKOFF_MAX_MS)
		ms *= 2;
	if (ms > BACKOFF_MAX_MS)
		ms = BACKOFF_MAX_MS;
	orc_random_bytes(&r, 1);
	return ms * 3 / 4 + ms * r / 510;
}

/* Errors a retry cannot fix: the TLS peer or our configuration is wrong. */
static int permanent(CURLcode cc)
{
	return cc == CURLE_PEER_FAILED_VERIFICATION || cc == CURLE_SSL_CACERT_BADFILE ||
	       cc == CURLE_SSL_CERTPROBLEM || cc == CURLE_URL_MALFORMAT ||
	       cc == CURLE_UNSUPPORTED_PROTOCOL;
}

int k8s_call(struct k8s_client *c, struct k8s_response *out, const char *method,
	     const char *path, const char *body, int64_t budget_ms)
{
	int64_t deadline, wait, left;
	char *url = xasprintf("%s%s", c->cfg->api_url, path), *token = NULL, why[160];
	int n = 0, reauth = 0, err;
	double retry_after;
	CURLcode cc = CURLE_OK;

	deadline = orc_mono_ms() + (budget_ms > 0 ? budget_ms : c->cfg->retry_budget_ms);
	for (;; n++) {
		free(token);
		token = token_get(c, reauth == 1);
		left = deadline - orc_mono_ms();
		err = attempt(c, out, &retry_after, &cc, method, url, body, token,
			      left < c->cfg->request_timeout_ms && left > 1000 ? left
									 : c->cfg->request_timeout_ms);
		if (c->stopping) {
			err = ORC_EUNAVAIL;
			goto done;
		}
		if (err == ORC_ETOOBIG || err == ORC_ERROR) {
			orc_log(ORC_LOG_WARN, "kubernetes answer too large or request failed", "method", method,
				"path", path, NULL);
			goto done;
		}
		if (err == 0 && out->status == 401 && !reauth && c->cfg->token_file) {
			reauth = 1;      /* the token may have rotated under us */
			continue;
		}
		if (reauth == 1)
			reauth = 2;
		if (err == 0 && out->status != 429 && out->status < 500)
			goto done;
		if (err == 0)
			snprintf(why, sizeof(why), "HTTP %ld", out->status);
		else
			snprintf(why, sizeof(why), "%s", curl_easy_strerror(cc));
		if (err < 0 && permanent(cc)) {
			orc_log(ORC_LOG_ERROR, "kubernetes request failed", "method", method, "path", path,
				"error", why, NULL);
			err = ORC_EUNAVAIL;
			goto done;
		}
		wait = retry_after >= 0 ? (int64_t)(retry_after * 1000) : backoff_ms(n);
		if (retry_after > RETRY_AFTER_MAX_S)
			wait = RETRY_AFTER_MAX_S * 1000;
		if (orc_mono_ms() + wait > deadline) {
			orc_log(ORC_LOG_WARN, "kubernetes request failed; giving up", "method", method,
				"path", path, "error", why, NULL);
			err = ORC_EUNAVAIL;
			goto done;
		}
		orc_log(ORC_LOG_DEBUG, "kubernetes request retried", "method", method, "path", path,
			"error", why, ORC_LOG_INT("wait_ms", wait), NULL);
		sleep_ms(c, wait);
	}
done:
	free(url);
	free(token);
	return err;
}

char *k8s_status_message(const struct k8s_response *r)
{
	json_object *o = NULL;
	const char *msg = NULL;
	char *out;

	if (r->body.len && orc_json_parse_object(&o, r->body.ptr, r->body.len, NULL, 0) == 0 &&
	    orc_json_get_str(o, "message", &msg, NULL, 0) == 0 && *msg)
		out = xasprintf("%.400s", msg);
	else
		out = xasprintf("HTTP %ld", r->status);
	json_object_put(o);
	return out;
}

/* ---- streams (watches) --------------------------------------------------------- */

struct line_sink {
	CURL *h;
	struct orc_buf line;
	struct orc_buf *err_body;
	int mode;                  /* 0: unknown yet, 1: lines (200), 2: error body */
	int stopped;
	k8s_line_fn fn;
	void *arg;
};

static size_t on_stream(char *ptr, size_t size, size_t nmemb, void *arg)
{
	struct line_sink *s = arg;
	size_t n = size * nmemb, i, start = 0;
	long status = 0;

	if (s->mode == 0) {
		curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &status);
		s->mode = status == 200 ? 1 : 2;
	}
	if (s->mode == 2) {
		orc_buf_add(s->err_body, ptr, n);   /* bounded; the rest is dropped */
		return n;
	}
	for (i = 0; i < n; i++) {
		if (ptr[i] != '\n')
			continue;
		if (orc_buf_add(&s->line, ptr + start, i - start) < 0)
			return 0;
		start = i + 1;
		if (s->line.len && s->fn(s->arg, s->line.ptr, s->line.len)) {
			s->stopped = 1;
			return 0;
		}
		orc_buf_reset(&s->line);
	}
	if (orc_buf_add(&s->line, ptr + start, n - start) < 0)
		return 0;  /* an event over MAX_LINE: break the stream */
	return n;
}

int k8s_stream(struct k8s_client *c, long *status_out, struct orc_buf *err_body,
	       const char *path, k8s_line_fn fn, void *arg, int64_t timeout_ms)
{
	struct line_sink sink;
	struct curl_slist *hdrs = NULL;
	char *url = xasprintf("%s%s", c->cfg->api_url, path), *token = token_get(c, 0);
	CURL *h = curl_easy_init();
	CURLcode cc;
	int err = 0;

	memset(&sink, 0, sizeof(sink));
	*status_out = 0;
	if (!h) {
		err = ORC_ERROR;
		goto done;
	}
	sink.h = h;
	orc_buf_init(&sink.line, MAX_LINE);
	sink.err_body = err_body;
	sink.fn = fn;
	sink.arg = arg;
	handle_for(c, h);
	hdrs = headers(token, 0, NULL);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_stream);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
	cc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status_out);
	if (cc != CURLE_OK && !sink.stopped && !c->stopping) {
		orc_log(ORC_LOG_INFO, "kubernetes watch broke", "path", path,
			"error", curl_easy_strerror(cc), NULL);
		err = ORC_EUNAVAIL;
	}
done:
	curl_slist_free_all(hdrs);
	if (h)
		curl_easy_cleanup(h);
	orc_buf_release(&sink.line);
	free(url);
	free(token);
	return err;
}

void k8s_client_thread_done(void)
{
	if (thread_handle) {
		curl_easy_cleanup(thread_handle);
		thread_handle = NULL;
	}
}
