/*
 * orchardctl trajectory export ID [-o FILE] [--no-content]
 * orchardctl trajectory export --all [-l K=V]... [--limit N] [-o FILE] [--no-content]
 *
 * Streams GET /v1/sandboxes/{id}/trajectory (or GET /v1/trajectories) to
 * stdout or FILE without holding it in memory. FILE is written beside
 * itself and renamed into place only when the export is complete: every
 * trajectory ended with its "end" line and the server reported no error.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <curl/curl.h>

#include "err.h"
#include "json.h"
#include "replay.h"
#include "strutil.h"
#include "transfer.h"
#include "xalloc.h"

#define ERROR_BODY_MAX ((size_t)1 << 20)
#define STALL_S 300L                 /* no byte for this long: give up */
#define LINE_HEAD 64                 /* bytes of a line kept to learn its type */

const char trajectory_usage[] =
	"usage: orchardctl trajectory SUBCOMMAND [ARGS]\n"
	"\n"
	"Recorded trajectories (docs/trajectory.md): export them as JSON lines,\n"
	"and replay them with `orchardctl replay`.\n";

const char trajectory_export_usage[] =
	"usage: orchardctl trajectory export ID [-o FILE] [--no-content]\n"
	"       orchardctl trajectory export --all [-l K=V]... [--limit N] [-o FILE]\n"
	"\n"
	"Write a sandbox's trajectory (deleted sandboxes too) as JSON lines: the\n"
	"sandbox's spec, every step with its inputs and outputs, the end state.\n"
	"With --all, the trajectories of every sandbox of yours that has the\n"
	"labels, oldest first, as one stream. Exits 125 if the export is incomplete.\n"
	"\n"
	"  -o, --output FILE  write to FILE (only once complete) instead of stdout\n"
	"  --no-content       leave out recorded file contents (replay then skips\n"
	"                     those file writes)\n"
	"  --all              every sandbox that matches the labels\n"
	"  -l, --label K=V    with --all: only sandboxes with this label (repeatable)\n"
	"  --limit N          with --all: at most N sandboxes (default 100, max 1000)\n";

enum { OPT_NO_CONTENT = CLI_OPT_FIRST_FREE, OPT_ALL, OPT_LIMIT };

const struct option trajectory_export_opts[] = {
	CLI_COMMON_OPTIONS,
	{ "output", required_argument, NULL, 'o' },
	{ "no-content", no_argument, NULL, OPT_NO_CONTENT },
	{ "all", no_argument, NULL, OPT_ALL },
	{ "label", required_argument, NULL, 'l' },
	{ "limit", required_argument, NULL, OPT_LIMIT },
	{ NULL, 0, NULL, 0 },
};

/* The transfer: lines go to out while the status is 2xx. */
struct export_stream {
	CURL *curl;
	FILE *out;
	long status;
	struct cli_response err;      /* the body of a non-2xx answer */
	char head[LINE_HEAD];         /* the start of the current line */
	size_t head_len;
	long headers, ends, errors;
	int write_failed;
};

/* Our server writes "type" first in every line ({"type":"end",...}). */
static void line_done(struct export_stream *s)
{
	static const char prefix[] = "{\"type\":\"";
	const char *t = s->head + sizeof(prefix) - 1;

	if (s->head_len > sizeof(prefix) - 1 && !memcmp(s->head, prefix, sizeof(prefix) - 1)) {
		if (!strncmp(t, "header\"", 7))
			s->headers++;
		else if (!strncmp(t, "end\"", 4))
			s->ends++;
		else if (!strncmp(t, "error\"", 6))
			s->errors++;
	}
	s->head_len = 0;
}

static size_t on_data(char *data, size_t size, size_t nmemb, void *arg)
{
	struct export_stream *s = arg;
	size_t n = size * nmemb, i;

	if (!s->status)
		curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &s->status);
	if (s->status < 200 || s->status > 299)
		return orc_buf_add(&s->err.body, data, n) < 0 ? 0 : n;
	if (fwrite(data, 1, n, s->out) != n) {
		s->write_failed = 1;
		return 0;
	}
	for (i = 0; i < n; i++) {
		if (data[i] == '\n')
			line_done(s);
		else if (s->head_len < sizeof(s->head) - 1)
			s->head[s->head_len++] = data[i];
	}
	return n;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *arg)
{
	struct export_stream *s = arg;
	size_t n = size * nmemb, len, i;

	if (n > 13 && !strncasecmp(data, "x-request-id:", 13)) {
		for (data += 13, len = n - 13; len && (*data == ' ' || *data == '\t'); data++, len--)
			;
		while (len && (data[len - 1] == '\r' || data[len - 1] == '\n' || data[len - 1] == ' '))
			len--;
		if (len >= sizeof(s->err.request_id))
			len = sizeof(s->err.request_id) - 1;
		for (i = 0; i < len; i++)
			s->err.request_id[i] = data[i] >= 0x20 && data[i] < 0x7f ? data[i] : '?';
		s->err.request_id[len] = '\0';
	}
	return n;
}

static int stream_get(const struct cli_config *cfg, const char *path, FILE *out, int single)
{
	struct export_stream s;
	struct curl_slist *hdrs = NULL;
	char errbuf[CURL_ERROR_SIZE] = "", *url, *h;
	size_t base_len = strlen(cfg->url);
	CURLcode rc;
	int err = 0;

	memset(&s, 0, sizeof(s));
	s.out = out;
	orc_buf_init(&s.err.body, ERROR_BODY_MAX);
	s.err.retry_after_s = -1;
	while (base_len && cfg->url[base_len - 1] == '/')
		base_len--;
	url = xasprintf("%.*s%s", (int)base_len, cfg->url, path);
	if (!(s.curl = curl_easy_init()))
		abort();
	hdrs = curl_slist_append(hdrs, "Accept: application/x-ndjson");
	if (cfg->api_key && *cfg->api_key) {
		h = xasprintf("X-API-Key: %s", cfg->api_key);
		hdrs = curl_slist_append(hdrs, h);
		free(h);
	}
	curl_easy_setopt(s.curl, CURLOPT_URL, url);
	curl_easy_setopt(s.curl, CURLOPT_HTTPGET, 1L);
	curl_easy_setopt(s.curl, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(s.curl, CURLOPT_USERAGENT, "orchardctl/" CLI_VERSION);
	curl_easy_setopt(s.curl, CURLOPT_CONNECTTIMEOUT, 10L);
	curl_easy_setopt(s.curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(s.curl, CURLOPT_LOW_SPEED_TIME, STALL_S);
	curl_easy_setopt(s.curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(s.curl, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(s.curl, CURLOPT_SSL_VERIFYPEER, 1L);
	curl_easy_setopt(s.curl, CURLOPT_SSL_VERIFYHOST, 2L);
	if (cfg->cacert && *cfg->cacert)
		curl_easy_setopt(s.curl, CURLOPT_CAINFO, cfg->cacert);
	curl_easy_setopt(s.curl, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(s.curl, CURLOPT_WRITEDATA, &s);
	curl_easy_setopt(s.curl, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(s.curl, CURLOPT_HEADERDATA, &s);
	curl_easy_setopt(s.curl, CURLOPT_ERRORBUFFER, errbuf);
	rc = curl_easy_perform(s.curl);
	if (!s.status)
		curl_easy_getinfo(s.curl, CURLINFO_RESPONSE_CODE, &s.status);
	cli_debug_request(s.curl, cfg, "GET", url, rc, 0, NULL);
	if (s.write_failed) {
		cli_error("writing the trajectory failed: %s", strerror(errno));
		err = ORC_ERROR;
	} else if (rc != CURLE_OK && !(s.status && (s.status < 200 || s.status > 299))) {
		cli_error("GET %s failed: %s", url, errbuf[0] ? errbuf : curl_easy_strerror(rc));
		err = rc == CURLE_OPERATION_TIMEDOUT ? ORC_ETIMEOUT : ORC_EUNAVAIL;
	} else if (s.status < 200 || s.status > 299) {
		s.err.status = s.status;
		if (s.err.body.len)
			orc_json_parse(&s.err.json, s.err.body.ptr, s.err.body.len, NULL, 0);
		cli_report_response(&s.err);
		err = s.status == 404 ? ORC_ENOTFOUND : ORC_ERROR;
	} else if (s.errors || s.headers != s.ends || (single && s.headers != 1)) {
		cli_error("the export is incomplete: %s", s.errors ? "the server reported an error (see "
			  "the \"error\" line)" : "the stream ended before its \"end\" line");
		err = ORC_ERROR;
	}
	curl_easy_cleanup(s.curl);
	curl_slist_free_all(hdrs);
	cli_response_release(&s.err);
	free(url);
	return err;
}

int cmd_trajectory_export(struct cli_config *cfg, int argc, char **argv)
{
	struct orc_buf path = ORC_BUF_INIT;
	const char *file = NULL;
	char *tmp = NULL, *esc;
	int opt, rc = CLI_USAGE, all = 0, content = 1, labels = 0, err, werr;
	int64_t limit = 0;
	FILE *out = stdout;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "o:l:", trajectory_export_opts, NULL)) != -1) {
		switch (opt) {
		case 'o': file = optarg; break;
		case OPT_NO_CONTENT: content = 0; break;
		case OPT_ALL: all = 1; break;
		case 'l':
			if (!strchr(optarg, '=') || optarg[0] == '=' || !orc_utf8_valid(optarg, strlen(optarg))) {
				rc = cli_usage_error(trajectory_export_usage, "trajectory export: --label wants "
						     "K=V, not \"%s\"", optarg);
				goto done;
			}
			cli_path_add_query(&path, "label", optarg);
			labels = 1;
			break;
		case OPT_LIMIT:
			if (orc_parse_i64(&limit, optarg, 1, 1000) < 0) {
				rc = cli_usage_error(trajectory_export_usage, "trajectory export: --limit wants "
						     "1 to 1000, not \"%s\"", optarg);
				goto done;
			}
			break;
		default:
			if (cli_common_option(cfg, opt, optarg) < 0) {
				rc = cli_bad_option(trajectory_export_usage);
				goto done;
			}
		}
	}
	if (all ? optind != argc : argc - optind != 1) {
		rc = cli_usage_error(trajectory_export_usage, "trajectory export: expected %s",
				     all ? "no ID with --all" : "one sandbox ID (or --all)");
		goto done;
	}
	if (!all && (labels || limit)) {
		rc = cli_usage_error(trajectory_export_usage, "trajectory export: --label and --limit "
				     "go with --all");
		goto done;
	}
	if ((rc = cli_config_check(cfg)) != 0)
		goto done;
	/* The query so far holds the labels; the path goes in front. */
	esc = all ? xstrdup("/v1/trajectories") : cli_path("/v1/sandboxes", argv[optind], "/trajectory");
	{
		struct orc_buf full = ORC_BUF_INIT;
		orc_buf_adds(&full, esc);
		orc_buf_adds(&full, orc_buf_cstr(&path));
		orc_buf_release(&path);
		path = full;
	}
	free(esc);
	if (limit) {
		char n[24];
		snprintf(n, sizeof(n), "%lld", (long long)limit);
		cli_path_add_query(&path, "limit", n);
	}
	if (content)
		cli_path_add_query(&path, "include", "content");
	if (file && strcmp(file, "-")) {
		tmp = xasprintf("%s.partial", file);
		if (!(out = fopen(tmp, "we"))) {
			cli_error("cannot create \"%s\": %s", tmp, strerror(errno));
			rc = CLI_FAIL;
			goto done;
		}
	}
	err = stream_get(cfg, orc_buf_cstr(&path), out, !all);
	werr = fflush(out) != 0;
	if (out != stdout && fclose(out) != 0)
		werr = 1;
	if (werr && !err) {
		cli_error("writing \"%s\" failed: %s", tmp ? tmp : "stdout", strerror(errno));
		err = ORC_ERROR;
	}
	rc = err < 0 ? CLI_FAIL : CLI_OK;
	if (tmp) {
		if (rc == CLI_OK && rename(tmp, file) < 0) {
			cli_error("cannot rename \"%s\" to \"%s\": %s", tmp, file, strerror(errno));
			rc = CLI_FAIL;
		}
		if (rc != CLI_OK)
			unlink(tmp);
	}
done:
	orc_buf_release(&path);
	free(tmp);
	return rc;
}
