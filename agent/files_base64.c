#include "files.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base64.h"
#include "err.h"
#include "fsutil.h"
#include "json.h"
#include "xalloc.h"

/* Orchard's JSON file transfer: POST and GET /files/base64. */

/*
 * Decode standard base64 (padding optional, no whitespace) into out, which
 * has room for 3 * ceil(n / 4) bytes; *outlen is the decoded size.
 */
int agent_b64_decode(unsigned char *out, size_t *outlen, const char *s, size_t n)
{
	size_t i, o = 0, pad = 0;
	unsigned acc = 0;
	int v, bits = 0;

	while (pad < 2 && n > 0 && s[n - 1] == '=') {
		n--;
		pad++;
	}
	if (n % 4 == 1 || (pad && (n + pad) % 4))
		return ORC_EINVALID;
	for (i = 0; i < n; i++) {
		if ((v = orc_base64_value((unsigned char)s[i])) < 0)
			return ORC_EINVALID;
		acc = (acc << 6 | (unsigned)v) & 0xffffff;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[o++] = (unsigned char)(acc >> bits);
		}
	}
	/* The leftover bits of a short final group must be zero (canonical). */
	if (bits && (acc & ((1u << bits) - 1)))
		return ORC_EINVALID;
	*outlen = o;
	return 0;
}

void agent_handle_files_b64_post(struct agent_reply *reply, const struct agent_request *req)
{
	struct agent_file_writer w = AGENT_FILE_WRITER_INIT;
	json_object *body = NULL, *o, *content = NULL;
	const char *mode_s = NULL, *s;
	unsigned char *data = NULL;
	char *path = NULL, msg[512];
	size_t n, len = 0;
	mode_t mode = 0;
	int err;

	if (agent_body_object(&body, reply, req) < 0)
		return;
	if (agent_field_path(&path, reply, body, "path", NULL) < 0)
		goto done;
	if (!json_object_object_get_ex(body, "content", &content) ||
	    !json_object_is_type(content, json_type_string)) {
		agent_reply_error(reply, 400, "field 'content' is required and must be a base64 string");
		goto done;
	}
	if ((err = orc_json_get_str(body, "mode", &mode_s, msg, sizeof(msg))) < 0) {
		agent_reply_error(reply, 400, msg);
		goto done;
	}
	if (mode_s && agent_parse_mode(&mode, mode_s) < 0) {
		agent_reply_error(reply, 400, "field 'mode' must be octal, at most 07777");
		goto done;
	}
	s = json_object_get_string(content);
	n = (size_t)json_object_get_string_len(content);
	if (n / 4 * 3 > AGENT_B64_MAX + 3) {
		agent_reply_error(reply, 413, "field 'content' decodes to more than 64 MiB");
		goto done;
	}
	data = xmalloc(n / 4 * 3 + 3);
	if (agent_b64_decode(data, &len, s, n) < 0) {
		agent_reply_error(reply, 400, "field 'content' is not valid base64");
		goto done;
	}
	if (len > AGENT_B64_MAX) {
		agent_reply_error(reply, 413, "field 'content' decodes to more than 64 MiB");
		goto done;
	}
	if ((err = agent_file_writer_open(&w, path, mode_s ? (int)mode : -1, msg, sizeof(msg))) < 0 ||
	    (err = agent_file_writer_write(&w, data, len, msg, sizeof(msg))) < 0 ||
	    (err = agent_file_writer_commit(&w, msg, sizeof(msg))) < 0) {
		agent_reply_err(reply, err, msg);
		goto done;
	}
	o = json_object_new_object();
	json_object_object_add(o, "success", json_object_new_boolean(1));
	json_object_object_add(o, "path", json_object_new_string(path));
	json_object_object_add(o, "size", json_object_new_int64((int64_t)len));
	agent_reply_json(reply, 200, o);
	json_object_put(o);
done:
	agent_file_writer_release(&w);
	free(data);
	free(path);
	json_object_put(body);
}

void agent_handle_files_b64_get(struct agent_reply *reply, const struct agent_request *req)
{
	struct stat st;
	unsigned char *data = NULL;
	char *path = NULL, msg[512];
	size_t got = 0;
	ssize_t n;
	int fd = -1, err;

	if (agent_arg_path(&path, reply, req, "path", NULL) < 0)
		return;
	if ((err = agent_open_regular(&fd, &st, path, msg, sizeof(msg))) < 0) {
		agent_reply_err(reply, err, msg);
		goto done;
	}
	if ((uint64_t)st.st_size > AGENT_B64_MAX) {
		agent_reply_error(reply, 413, "file is larger than 64 MiB: use GET /files");
		goto done;
	}
	/* Read to EOF, but never past the cap, even if the file grows meanwhile. */
	data = xmalloc((size_t)st.st_size + 1);
	while (got <= (size_t)st.st_size) {
		n = read(fd, data + got, (size_t)st.st_size + 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			snprintf(msg, sizeof(msg), "read() \"%s\" failed: %s", path, strerror(errno));
			agent_reply_error(reply, 500, msg);
			goto done;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	if (got > (size_t)st.st_size)
		got = (size_t)st.st_size; /* grew while read: the size stat saw */
	reply->status = 200;
	orc_buf_reset(&reply->body);
	orc_buf_adds(&reply->body, "{\"path\":");
	orc_json_quote(&reply->body, path);
	orc_buf_adds(&reply->body, ",\"content\":\"");
	orc_base64_encode(&reply->body, data, got);
	orc_buf_addf(&reply->body, "\",\"size\":%zu}", got);
done:
	if (fd >= 0)
		close(fd);
	free(data);
	free(path);
}
