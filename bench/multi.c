/*
 * A closed loop of GETs at a fixed concurrency on one thread (libcurl
 * multi): `conc` requests are always in flight, each on its own kept-alive
 * TLS connection. Bounded by a count and a deadline.
 */
#include "bench.h"

#include <sys/resource.h>

#include "xalloc.h"

#include "multi.h"

static size_t discard(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	(void)ptr;
	(void)userdata;
	return size * nmemb;
}

static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

int bench_multi_get(struct bench_multi_result *out, struct bench_op *op,
		    const struct bench_cfg *cfg, const char *path, long expect,
		    long n, long warmup, long conc, double max_s)
{
	CURLM *m = curl_multi_init();
	CURL **h = xcalloc((size_t)conc, sizeof(*h));
	double *start = xcalloc((size_t)conc, sizeof(*start));
	struct curl_slist *hdrs = NULL;
	char *url = xasprintf("%s%s", cfg->url, path), *key = xasprintf("X-API-Key: %s", cfg->api_key);
	long issued = 0, finished = 0, i, total = n + warmup;
	double deadline = bench_now_ms() + max_s * 1e3, t_measure = 0, cpu0 = 0;
	int running = 0, err = -1;

	if (!m)
		goto done;
	hdrs = curl_slist_append(hdrs, key);
	for (i = 0; i < conc; i++) {
		h[i] = curl_easy_init();
		if (!h[i])
			goto done;
		curl_easy_setopt(h[i], CURLOPT_URL, url);
		curl_easy_setopt(h[i], CURLOPT_HTTPHEADER, hdrs);
		curl_easy_setopt(h[i], CURLOPT_WRITEFUNCTION, discard);
		curl_easy_setopt(h[i], CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(h[i], CURLOPT_TIMEOUT_MS, 30000L);
		curl_easy_setopt(h[i], CURLOPT_PROTOCOLS_STR, "https,http");
		curl_easy_setopt(h[i], CURLOPT_PRIVATE, (void *)(intptr_t)i);
		if (cfg->cacert)
			curl_easy_setopt(h[i], CURLOPT_CAINFO, cfg->cacert);
	}
	curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, conc * 2);
	if (!warmup) {
		t_measure = bench_now_ms();
		cpu0 = cpu_s();
	}
	for (i = 0; i < conc && issued < total; i++, issued++) {
		start[i] = bench_now_ms();
		curl_multi_add_handle(m, h[i]);
	}
	do {
		CURLMsg *msg;
		int left;

		curl_multi_perform(m, &running);
		while ((msg = curl_multi_info_read(m, &left))) {
			CURL *e = msg->easy_handle;
			void *priv = NULL;
			long st = 0, idx;
			double now = bench_now_ms();

			if (msg->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(e, CURLINFO_PRIVATE, &priv);
			idx = (long)(intptr_t)priv;
			curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &st);
			finished++;
			if (finished > warmup) {
				if (msg->data.result != CURLE_OK)
					bench_op_fail(op, "%s", curl_easy_strerror(msg->data.result));
				else if (st != expect)
					bench_op_fail(op, "HTTP %ld (expected %ld)", st, expect);
				else
					bench_op_ok(op, now - start[idx]);
			}
			if (finished == warmup) {
				t_measure = bench_now_ms();
				cpu0 = cpu_s();
			}
			curl_multi_remove_handle(m, e);
			if (issued < total && now < deadline) {
				issued++;
				start[idx] = bench_now_ms();
				curl_multi_add_handle(m, e);
				running = 1;
			}
		}
		if (running)
			curl_multi_poll(m, NULL, 0, 100, NULL);
	} while (running || finished < issued);
	op->busy_s = (bench_now_ms() - t_measure) / 1e3;
	out->wall_s = op->busy_s;
	out->client_cpu_s = cpu_s() - cpu0;
	err = 0;
done:
	for (i = 0; i < conc; i++)
		if (h[i])
			curl_easy_cleanup(h[i]);
	if (m)
		curl_multi_cleanup(m);
	curl_slist_free_all(hdrs);
	free(h);
	free(start);
	free(url);
	free(key);
	return err;
}
