/*
 * Requests to the Orchard API with libcurl: one easy handle per request,
 * X-API-Key, JSON bodies, bounded responses, a connect timeout and an
 * overall timeout on every call, TLS verified against ORCHARD_CACERT when
 * given (else the system CAs). Requests safe to repeat are retried after a
 * connection failure or a 503, a bounded number of times with backoff.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <curl/curl.h>

#include "cli.h"
#include "err.h"
#include "json.h"
#include "strutil.h"
#include "transfer.h"
#include "xalloc.h"

#define CLI_CONNECT_TIMEOUT_S 10L
#define CLI_DEFAULT_TIMEOUT_S 60L
/* Exec results carry up to two capped streams, JSON-escaped. */
#define CLI_RESPONSE_MAX ((size_t)256 << 20)
#define RETRY_AFTER_MAX_S 30

void cli_response_parse(struct cli_response *r)
{
	json_object *j = NULL;

	if (r->body.len && orc_json_parse(&j, r->body.ptr, r->body.len, NULL, 0) == 0)
		r->json = j;
}

void cli_response_release(struct cli_response *r)
{
	orc_buf_release(&r->body);
	if (r->json)
		json_object_put(r->json);
	r->json = NULL;
	r->status = 0;
	r->request_id[0] = '\0';
	r->retry_after_s = -1;
	r->too_big = 0;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
	struct cli_response *r = arg;
	size_t n = size * nmemb;

	if (orc_buf_add(&r->body, data, n) < 0) {
		r->too_big = 1;
		return 0;  /* aborts the transfer: CURLE_WRITE_ERROR */
	}
	return n;
}

/* A header's value with surrounding blanks trimmed, or NULL when it is not name. */
const char *cli_header_value(const char *data, size_t n, const char *name, size_t *len)
{
	size_t nl = strlen(name);
	const char *v;

	if (n <= nl || strncasecmp(data, name, nl))
		return NULL;
	v = data + nl;
	*len = n - nl;
	while (*len && (*v == ' ' || *v == '\t')) {
		v++;
		(*len)--;
	}
	while (*len && isspace((unsigned char)v[*len - 1]))
		(*len)--;
	return v;
}

/* Retry-After: delta-seconds or an HTTP date; -1 when neither. */
static long parse_retry_after(const char *v, size_t len)
{
	char text[64];
	int64_t secs;
	time_t when;

	if (len == 0 || len >= sizeof(text))
		return -1;
	memcpy(text, v, len);
	text[len] = '\0';
	if (orc_parse_i64(&secs, text, 0, 86400) == 0)
		return (long)secs;
	if ((when = curl_getdate(text, NULL)) < 0)
		return -1;
	return when > time(NULL) ? (long)(when - time(NULL)) : 0;
}

size_t cli_on_header(char *data, size_t size, size_t nmemb, void *arg)
{
	struct cli_response *r = arg;
	size_t n = size * nmemb, i, len;
	const char *v;

	if ((v = cli_header_value(data, n, "x-request-id:", &len)) != NULL) {
		if (len >= sizeof(r->request_id))
			len = sizeof(r->request_id) - 1;
		for (i = 0; i < len; i++)
			r->request_id[i] = isprint((unsigned char)v[i]) ? v[i] : '?';
		r->request_id[len] = '\0';
	} else if ((v = cli_header_value(data, n, "retry-after:", &len)) != NULL) {
		r->retry_after_s = parse_retry_after(v, len);
	}
	return n;
}

/* The progress callback: the caller's tick, at most four times a second. */
struct ticker {
	const struct cli_request *req;
	int64_t last_ms;
};

static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
	struct ticker *t = arg;
	int64_t now = orc_mono_ms();

	(void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
	if (now - t->last_ms >= 250) {
		t->last_ms = now;
		t->req->tick(t->req->tick_arg);
	}
	return 0;
}

char *cli_path(const char *prefix, const char *id, const char *suffix)
{
	char *esc = curl_easy_escape(NULL, id, 0), *path;

	if (!esc)
		abort();
	path = xasprintf("%s/%s%s", prefix, esc, suffix ? suffix : "");
	curl_free(esc);
	return path;
}

void cli_path_add_query(struct orc_buf *path, const char *key, const char *value)
{
	char *esc = curl_easy_escape(NULL, value, 0);

	if (!esc)
		abort();
	orc_buf_addf(path, "%c%s=%s", path->ptr && strchr(path->ptr, '?') ? '&' : '?', key, esc);
	curl_free(esc);
}

void cli_new_idempotency_key(char *out)
{
	orc_random_hex(out, 16);
}

int cli_route_missing(const struct cli_response *r)
{
	json_object *v;

	if (r->status == 405 || r->status == 501)
		return 1;
	if (r->status != 404)
		return 0;
	/* Ours says "no route for GET /x"; a proxy's own 404 is not JSON. */
	if (!r->json || !json_object_is_type(r->json, json_type_object))
		return 1;
	return json_object_object_get_ex(r->json, "detail", &v) && json_object_is_type(v, json_type_string) &&
	       !strncmp(json_object_get_string(v), "no route", 8);
}

/* Failures worth a retry: nothing, or nothing complete, came back. */
static int is_connection_failure(CURLcode rc)
{
	return rc == CURLE_COULDNT_CONNECT || rc == CURLE_SEND_ERROR || rc == CURLE_RECV_ERROR ||
	       rc == CURLE_GOT_NOTHING || rc == CURLE_PARTIAL_FILE;
}

CURL *cli_curl_open(struct curl_slist **hdrs_out, const struct cli_config *cfg, const struct cli_request *req,
		    const char *url, char *errbuf)
{
	struct curl_slist *hdrs = NULL;
	char *h;
	CURL *curl;

	if (!(curl = curl_easy_init()))
		return NULL;
	hdrs = curl_slist_append(hdrs, "Accept: application/json");
	if (req->body)
		hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
	if (cfg->api_key && *cfg->api_key) {
		h = xasprintf("X-API-Key: %s", cfg->api_key);
		hdrs = curl_slist_append(hdrs, h);
		free(h);
	}
	if (req->idempotency_key) {
		h = xasprintf("Idempotency-Key: %s", req->idempotency_key);
		hdrs = curl_slist_append(hdrs, h);
		free(h);
	}
	/* No "Expect: 100-continue" round trip for large bodies. */
	hdrs = curl_slist_append(hdrs, "Expect:");

	curl_easy_setopt(curl, CURLOPT_URL, url);
	if (req->method) {
		curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, req->method);
		if (!strcmp(req->method, "GET"))
			curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
	}
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(curl, CURLOPT_USERAGENT, "orchardctl/" CLI_VERSION);
	curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, CLI_CONNECT_TIMEOUT_S);
	if (req->timeout_s >= 0)
		curl_easy_setopt(curl, CURLOPT_TIMEOUT, req->timeout_s > 0 ? req->timeout_s : CLI_DEFAULT_TIMEOUT_S);
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);
	curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);
	if (cfg->cacert && *cfg->cacert)
		curl_easy_setopt(curl, CURLOPT_CAINFO, cfg->cacert);
	curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
	errbuf[0] = '\0';
	*hdrs_out = hdrs;
	return curl;
}

char *cli_url(const struct cli_config *cfg, const char *path)
{
	size_t base_len = strlen(cfg->url);

	while (base_len && cfg->url[base_len - 1] == '/')
		base_len--;
	return xasprintf("%.*s%s", (int)base_len, cfg->url, path);
}

int cli_curl_failed(const struct cli_config *cfg, const char *method, const char *url, int rc,
		    const char *errbuf)
{
	const char *why = errbuf && errbuf[0] ? errbuf : curl_easy_strerror((CURLcode)rc);

	switch ((CURLcode)rc) {
	case CURLE_OPERATION_TIMEDOUT:
		cli_error("%s %s timed out: %s", method, url, why);
		return ORC_ETIMEOUT;
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_CONNECT_ERROR:
		cli_error("TLS with %s failed: %s (set ORCHARD_CACERT or --cacert to the CA that "
			  "signed the server's certificate)", cfg->url, why);
		return ORC_EUNAVAIL;
	default:
		cli_error("cannot reach the server at %s: %s", cfg->url, why);
		return ORC_EUNAVAIL;
	}
}

static CURLcode perform(struct cli_response *out, const struct cli_config *cfg,
			const struct cli_request *req, const char *url, char *errbuf)
{
	struct ticker ticker = { req, 0 };
	struct curl_slist *hdrs = NULL;
	CURLcode rc;
	CURL *curl;

	if (!(curl = cli_curl_open(&hdrs, cfg, req, url, errbuf)))
		return CURLE_FAILED_INIT;
	if (req->body) {
		curl_easy_setopt(curl, CURLOPT_POSTFIELDS, req->body);
		curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(req->body));
	}
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, out);
	curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, cli_on_header);
	curl_easy_setopt(curl, CURLOPT_HEADERDATA, out);
	if (req->tick) {
		ticker.last_ms = orc_mono_ms();
		curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, on_progress);
		curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &ticker);
		curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
	}

	rc = curl_easy_perform(curl);
	if (rc == CURLE_OK)
		curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &out->status);
	cli_debug_request(curl, cfg, req->method ? req->method : "GET", url, rc, 0, out->request_id);
	curl_easy_cleanup(curl);
	curl_slist_free_all(hdrs);
	return rc;
}

/* Before attempt n+1 (n >= 1): Retry-After when the server gave one (at most
 * RETRY_AFTER_MAX_S), else 0.5 s, 1 s, 2 s... (at most 8 s) plus up to 50 % jitter. */
static int64_t retry_delay_ms(const struct cli_response *r, int n)
{
	unsigned char jitter;
	int64_t ms;

	if (r->status == 503 && r->retry_after_s >= 0)
		return (r->retry_after_s < RETRY_AFTER_MAX_S ? r->retry_after_s : RETRY_AFTER_MAX_S) * 1000;
	ms = (int64_t)500 << (n - 1 < 4 ? n - 1 : 4);
	if (ms > 8000)
		ms = 8000;
	orc_random_bytes(&jitter, 1);
	return ms + ms * jitter / 510;
}

/* Sleep, keeping the caller's progress display alive. */
static void retry_sleep(const struct cli_request *req, int64_t ms)
{
	int64_t end = orc_mono_ms() + ms, left;
	struct timespec ts;

	while ((left = end - orc_mono_ms()) > 0) {
		if (left > 250)
			left = 250;
		ts.tv_sec = (time_t)(left / 1000);
		ts.tv_nsec = (long)(left % 1000) * 1000000L;
		nanosleep(&ts, NULL);
		if (req && req->tick)
			req->tick(req->tick_arg);
	}
}

int cli_retry_pause(const struct cli_response *r, int rc, const char *errbuf, int attempt,
		    const struct cli_request *req)
{
	int64_t delay;

	if (rc == CURLE_OK ? r->status != 503 : !is_connection_failure((CURLcode)rc))
		return 0;
	delay = retry_delay_ms(r, attempt);
	if (cli_stderr_is_tty())
		fprintf(stderr, "\r\033[Korchardctl: %s; retrying in %.1fs (attempt %d of %d)\n",
			rc == CURLE_OK ? "the server is busy (HTTP 503)" :
			errbuf[0] ? errbuf : curl_easy_strerror((CURLcode)rc),
			(double)delay / 1000, attempt + 1, CLI_HTTP_ATTEMPTS);
	retry_sleep(req, delay);
	return 1;
}

int cli_http(struct cli_response *out, const struct cli_config *cfg, const struct cli_request *req)
{
	char errbuf[CURL_ERROR_SIZE];
	struct cli_response r = CLI_RESPONSE_INIT;
	char *url = NULL;
	int attempt, retryable, err = 0;
	CURLcode rc = CURLE_OK;

	url = cli_url(cfg, req->path);
	retryable = strcmp(req->method, "POST") != 0 || req->idempotency_key != NULL;

	for (attempt = 1;; attempt++) {
		cli_response_release(&r);
		orc_buf_init(&r.body, CLI_RESPONSE_MAX);
		rc = perform(&r, cfg, req, url, errbuf);
		if (!retryable || attempt >= CLI_HTTP_ATTEMPTS ||
		    !cli_retry_pause(&r, rc, errbuf, attempt, req))
			break;
	}
	if (rc != CURLE_OK) {
		if (rc == CURLE_WRITE_ERROR && r.too_big) {
			cli_error("response to %s %s is larger than %zu bytes", req->method, url,
				  CLI_RESPONSE_MAX);
			err = ORC_ETOOBIG;
		} else {
			err = cli_curl_failed(cfg, req->method, url, rc, errbuf);
		}
		goto done;
	}
	cli_response_parse(&r);
	*out = r;
	memset(&r, 0, sizeof(r));
done:
	cli_response_release(&r);
	free(url);
	return err;
}

int cli_call(json_object **out, const struct cli_config *cfg, const struct cli_request *req)
{
	struct cli_response r = CLI_RESPONSE_INIT;
	int err;

	if ((err = cli_http(&r, cfg, req)) < 0)
		return err;
	if (r.status < 200 || r.status > 299) {
		cli_report_response(&r);
		err = r.status == 404 ? ORC_ENOTFOUND : ORC_ERROR;
		goto done;
	}
	if (!r.json) {
		cli_error("unexpected response from %s %s: not JSON (HTTP %ld%s%s)",
			  req->method, req->path, r.status, r.request_id[0] ? ", request " : "",
			  r.request_id);
		err = ORC_ERROR;
		goto done;
	}
	*out = r.json;
	r.json = NULL;
done:
	cli_response_release(&r);
	return err;
}
