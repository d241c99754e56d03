/*
 * Requests to the Orchard API with libcurl: one easy handle per request,
 * X-API-Key, JSON bodies, bounded responses, a connect timeout and an
 * overall timeout on every call, TLS verified against ORCHARD_CACERT when
 * given (else the system CAs).
 */
#include <ctype.h>
#include <string.h>
#include <curl/curl.h>

#include "cli.h"
#include "err.h"
#include "json.h"
#include "strutil.h"
#include "xalloc.h"

#define CLI_CONNECT_TIMEOUT_S 10L
#define CLI_DEFAULT_TIMEOUT_S 60L
/* Exec results carry up to two capped streams, JSON-escaped. */
#define CLI_RESPONSE_MAX ((size_t)256 << 20)

void cli_response_release(struct cli_response *r)
{
	orc_buf_release(&r->body);
	if (r->json)
		json_object_put(r->json);
	r->json = NULL;
	r->status = 0;
	r->request_id[0] = '\0';
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

static size_t on_header(char *data, size_t size, size_t nmemb, void *arg)
{
	static const char name[] = "x-request-id:";
	struct cli_response *r = arg;
	size_t n = size * nmemb, i, len;
	const char *v;

	if (n > sizeof(name) - 1 && !strncasecmp(data, name, sizeof(name) - 1)) {
		v = data + sizeof(name) - 1;
		len = n - (sizeof(name) - 1);
		while (len && (*v == ' ' || *v == '\t')) {
			v++;
			len--;
		}
		while (len && isspace((unsigned char)v[len - 1]))
			len--;
		if (len >= sizeof(r->request_id))
			len = sizeof(r->request_id) - 1;
		for (i = 0; i < len; i++)
			r->request_id[i] = isprint((unsigned char)v[i]) ? v[i] : '?';
		r->request_id[len] = '\0';
	}
	return n;
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

void cli_new_idempotency_key(char *out)
{
	orc_random_hex(out, 16);
}

/* Failures worth one retry: nothing, or nothing complete, came back. */
static int is_connection_failure(CURLcode rc)
{
	return rc == CURLE_COULDNT_CONNECT || rc == CURLE_SEND_ERROR || rc == CURLE_RECV_ERROR ||
	       rc == CURLE_GOT_NOTHING || rc == CURLE_PARTIAL_FILE;
}

static CURLcode perform(struct cli_response *out, const struct cli_config *cfg,
			const struct cli_request *req, const char *url, char *errbuf)
{
	struct curl_slist *hdrs = NULL;
	char *h;
	CURLcode rc;
	CURL *curl;

	if (!(curl = curl_easy_init()))
		return CURLE_FAILED_INIT;
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
	curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, req->method);
	if (!strcmp(req->method, "GET"))
		curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
	if (req->body) {
		curl_easy_setopt(curl, CURLOPT_POSTFIELDS, req->body);
		curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(req->body));
	}
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(curl, CURLOPT_USERAGENT, "orchardctl/" CLI_VERSION);
	curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, CLI_CONNECT_TIMEOUT_S);
	curl_easy_setopt(curl, CURLOPT_TIMEOUT, req->timeout_s > 0 ? req->timeout_s : CLI_DEFAULT_TIMEOUT_S);
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);
	curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);
	if (cfg->cacert && *cfg->cacert)
		curl_easy_setopt(curl, CURLOPT_CAINFO, cfg->cacert);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, out);
	curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(curl, CURLOPT_HEADERDATA, out);
	curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
	errbuf[0] = '\0';

	rc = curl_easy_perform(curl);
	if (rc == CURLE_OK)
		curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &out->status);
	curl_easy_cleanup(curl);
	curl_slist_free_all(hdrs);
	return rc;
}

int cli_http(struct cli_response *out, const struct cli_config *cfg, const struct cli_request *req)
{
	char errbuf[CURL_ERROR_SIZE];
	struct cli_response r = CLI_RESPONSE_INIT;
	size_t base_len;
	char *url = NULL;
	int attempt, retryable, err = 0;
	CURLcode rc = CURLE_OK;

	base_len = strlen(cfg->url);
	while (base_len && cfg->url[base_len - 1] == '/')
		base_len--;
	url = xasprintf("%.*s%s", (int)base_len, cfg->url, req->path);
	retryable = strcmp(req->method, "POST") != 0 || req->idempotency_key != NULL;

	for (attempt = 0; attempt < 2; attempt++) {
		cli_response_release(&r);
		orc_buf_init(&r.body, CLI_RESPONSE_MAX);
		rc = perform(&r, cfg, req, url, errbuf);
		if (rc == CURLE_OK || !retryable || !is_connection_failure(rc))
			break;
	}
	if (rc != CURLE_OK) {
		const char *why = errbuf[0] ? errbuf : curl_easy_strerror(rc);

		if (rc == CURLE_OPERATION_TIMEDOUT) {
			cli_error("%s %s timed out: %s", req->method, url, why);
			err = ORC_ETIMEOUT;
		} else if (rc == CURLE_WRITE_ERROR && r.too_big) {
			cli_error("response to %s %s is larger than %zu bytes", req->method, url,
				  CLI_RESPONSE_MAX);
			err = ORC_ETOOBIG;
		} else if (rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CACERT_BADFILE ||
			   rc == CURLE_SSL_CONNECT_ERROR) {
			cli_error("TLS with %s failed: %s (set ORCHARD_CACERT or --cacert to the CA that "
				  "signed the server's certificate)", cfg->url, why);
			err = ORC_EUNAVAIL;
		} else {
			cli_error("cannot reach the server at %s: %s", cfg->url, why);
			err = ORC_EUNAVAIL;
		}
		goto done;
	}
	if (r.body.len) {
		json_object *j = NULL;
		if (orc_json_parse(&j, r.body.ptr, r.body.len, NULL, 0) == 0)
			r.json = j;
	}
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
