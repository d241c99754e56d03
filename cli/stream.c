/*
 * Requests whose body or answer is a byte stream (raw files, tar
 * archives): the body is read from a descriptor as curl sends it, and a
 * 2xx answer is written to a descriptor as it arrives, so neither is ever
 * held whole. Error answers (JSON) are buffered as cli_http does, so they
 * are reported the same way. There is no overall timeout: a transfer that
 * moves nothing for STALL_S is given up instead.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "io.h"
#include "json.h"
#include "strutil.h"
#include "transfer.h"
#include "xalloc.h"

#define STALL_S 300L
#define ERROR_BODY_MAX ((size_t)1 << 20)
#define BUFFER_SIZE (512L * 1024)

struct stream_ctx {
	struct cli_stream *s;
	struct cli_response *r;
	CURL *curl;
	int in_errno;
	int in_aborted;
};

void cli_stream_init(struct cli_stream *s)
{
	memset(s, 0, sizeof(*s));
	s->in_fd = -1;
	s->in_size = -1;
	s->out_fd = -1;
	s->file_size = -1;
}

static size_t on_read(char *buf, size_t size, size_t nitems, void *arg)
{
	struct stream_ctx *c = arg;
	ssize_t n;

	do
		n = read(c->s->in_fd, buf, size * nitems);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		c->in_errno = errno;
		return CURL_READFUNC_ABORT;
	}
	if (n == 0 && c->s->in_end && c->s->in_end(c->s->in_arg) < 0) {
		c->in_aborted = 1;
		return CURL_READFUNC_ABORT;
	}
	c->s->sent += n;
	return (size_t)n;
}

static size_t on_write(char *data, size_t size, size_t nmemb, void *arg)
{
	struct stream_ctx *c = arg;
	size_t n = size * nmemb;
	long status = 0;

	curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &status);
	if (status >= 200 && status <= 299 && c->s->out_fn) {
		if (c->s->out_fn(c->s->out_arg, data, n) < 0) {
			c->s->out_errno = EIO;
			return 0;
		}
		c->s->received += (int64_t)n;
		return n;
	}
	if (status >= 200 && status <= 299 && c->s->out_fd >= 0) {
		if (orc_write_all(c->s->out_fd, data, n) < 0) {
			c->s->out_errno = errno;
			return 0;
		}
		c->s->received += (int64_t)n;
		return n;
	}
	if (orc_buf_add(&c->r->body, data, n) < 0) {
		c->r->too_big = 1;
		return 0;
	}
	return n;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *arg)
{
	struct stream_ctx *c = arg;
	size_t n = size * nmemb, len;
	const char *v;
	char text[32];
	int64_t num;

	if ((v = cli_header_value(data, n, "x-file-size:", &len)) != NULL ||
	    (c->s->file_size < 0 && (v = cli_header_value(data, n, "content-length:", &len)) != NULL)) {
		if (len < sizeof(text)) {
			memcpy(text, v, len);
			text[len] = '\0';
			if (orc_parse_i64(&num, text, 0, INT64_MAX) == 0)
				c->s->file_size = num;
		}
	} else if ((v = cli_header_value(data, n, "x-file-mode:", &len)) != NULL) {
		if (len > 0 && len < 8) {
			memcpy(text, v, len);
			text[len] = '\0';
			if (orc_parse_i64(&num, text, 0, 07777) == 0 && strspn(text, "01234567") == len)
				c->s->file_mode = (unsigned)strtol(text, NULL, 8);
		}
	}
	return cli_on_header(data, size, nmemb, c->r);
}

static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
	struct stream_ctx *c = arg;

	(void)dltotal;
	if (c->s->in_fd >= 0)
		cli_progress_update(c->s->progress, ulnow, ultotal > 0 ? ultotal : -1);
	else
		cli_progress_update(c->s->progress, dlnow, c->s->file_size);
	return 0;
}

static CURLcode perform(struct stream_ctx *c, const struct cli_config *cfg, const struct cli_request *req,
			const char *url, char *errbuf)
{
	struct curl_slist *hdrs = NULL;
	struct cli_request r = *req;
	CURLcode rc;

	r.timeout_s = -1;
	if (!(c->curl = cli_curl_open(&hdrs, cfg, &r, url, errbuf)))
		return CURLE_FAILED_INIT;
	if (c->s->in_fd >= 0) {
		hdrs = curl_slist_append(hdrs, "Content-Type: application/octet-stream");
		curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, hdrs);
		curl_easy_setopt(c->curl, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(c->curl, CURLOPT_UPLOAD_BUFFERSIZE, BUFFER_SIZE);
		curl_easy_setopt(c->curl, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(c->curl, CURLOPT_READDATA, c);
		if (c->s->in_size >= 0)
			curl_easy_setopt(c->curl, CURLOPT_INFILESIZE_LARGE, (curl_off_t)c->s->in_size);
	} else if (req->body) {   /* a JSON request whose answer streams (exec) */
		curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, req->body);
		curl_easy_setopt(c->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(req->body));
	}
	curl_easy_setopt(c->curl, CURLOPT_BUFFERSIZE, BUFFER_SIZE);
	curl_easy_setopt(c->curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(c->curl, CURLOPT_LOW_SPEED_TIME, c->s->stall_s > 0 ? c->s->stall_s : STALL_S);
	curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, c);
	curl_easy_setopt(c->curl, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c->curl, CURLOPT_HEADERDATA, c);
	if (c->s->progress) {
		curl_easy_setopt(c->curl, CURLOPT_XFERINFOFUNCTION, on_progress);
		curl_easy_setopt(c->curl, CURLOPT_XFERINFODATA, c);
		curl_easy_setopt(c->curl, CURLOPT_NOPROGRESS, 0L);
	}
	rc = curl_easy_perform(c->curl);
	if (rc == CURLE_OK)
		curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &c->r->status);
	cli_debug_request(c->curl, cfg, req->method ? req->method : "GET", url, rc, 0, c->r->request_id);
	curl_easy_cleanup(c->curl);
	c->curl = NULL;
	curl_slist_free_all(hdrs);
	return rc;
}

int cli_http_stream(struct cli_response *out, const struct cli_config *cfg, const struct cli_request *req,
		    struct cli_stream *s)
{
	char errbuf[CURL_ERROR_SIZE];
	struct cli_response r = CLI_RESPONSE_INIT;
	struct stream_ctx c;
	char *url = cli_url(cfg, req->path);
	int attempt, err = 0;
	CURLcode rc = CURLE_OK;

	for (attempt = 1;; attempt++) {
		cli_response_release(&r);
		orc_buf_init(&r.body, ERROR_BODY_MAX);
		memset(&c, 0, sizeof(c));
		c.s = s;
		c.r = &r;
		s->sent = s->received = 0;
		s->file_size = -1;
		s->file_mode = 0;
		if (attempt > 1 && s->in_fd >= 0 && s->in_rewind && lseek(s->in_fd, 0, SEEK_SET) < 0)
			break;
		rc = perform(&c, cfg, req, url, errbuf);
		if (attempt >= CLI_HTTP_ATTEMPTS || s->received > 0 || c.in_errno || c.in_aborted ||
		    (s->in_fd >= 0 && !s->in_rewind && s->sent > 0) ||
		    !cli_retry_pause(&r, rc, errbuf, attempt, NULL))
			break;
	}
	if (rc != CURLE_OK) {
		if (c.in_aborted || (rc == CURLE_WRITE_ERROR && s->out_errno)) {
			err = ORC_ERROR;
		} else if (c.in_errno) {
			cli_error("reading what to send failed: %s", strerror(c.in_errno));
			err = ORC_ERROR;
		} else if (rc == CURLE_WRITE_ERROR && r.too_big) {
			cli_error("error answer to %s %s is larger than %zu bytes", req->method, url, ERROR_BODY_MAX);
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
