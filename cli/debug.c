/*
 * -v, --debug or ORCHARD_DEBUG=1: one line on stderr per HTTP request,
 *
 *   orchardctl: debug: GET https://127.0.0.1:8443/v1/sandboxes -> 200
 *       (request 5f0c1e2d9a, key orch_0123456789ab_****; 12 ms: connect 1,
 *       tls 4, first byte 11)
 *
 * (on one line). It never shows the API key's secret, only its public id
 * the way `config view` masks it, and never headers or bodies.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transfer.h"

static int debug_on = -1;        /* -1: ORCHARD_DEBUG not looked at yet */

void cli_debug_enable(void)
{
	debug_on = 1;
}

int cli_debug_enabled(void)
{
	const char *env;

	if (debug_on < 0) {
		env = getenv("ORCHARD_DEBUG");
		debug_on = env && *env && strcmp(env, "0") != 0;
	}
	return debug_on;
}

static long ms_of(CURL *curl, CURLINFO what)
{
	curl_off_t us = 0;

	if (curl_easy_getinfo(curl, what, &us) != CURLE_OK || us < 0)
		return -1;
	return (long)(us / 1000);
}

void cli_debug_request(CURL *curl, const struct cli_config *cfg, const char *method, const char *url, int rc,
		       long status, const char *request_id)
{
	char key[64] = "none";

	if (!cli_debug_enabled())
		return;
	if (cfg->api_key && *cfg->api_key)
		cli_mask_key(key, sizeof(key), cfg->api_key);
	if (!status)
		curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
	cli_spinner_clear_line();
	if (rc != CURLE_OK)
		fprintf(stderr, "orchardctl: debug: %s %s -> failed: %s", method, url,
			curl_easy_strerror((CURLcode)rc));
	else
		fprintf(stderr, "orchardctl: debug: %s %s -> %ld", method, url, status);
	fprintf(stderr, " (request %s, key %s; %ld ms: connect %ld, tls %ld, first byte %ld)\n",
		request_id && *request_id ? request_id : "-", key, ms_of(curl, CURLINFO_TOTAL_TIME_T),
		ms_of(curl, CURLINFO_CONNECT_TIME_T), ms_of(curl, CURLINFO_APPCONNECT_TIME_T),
		ms_of(curl, CURLINFO_STARTTRANSFER_TIME_T));
}
