#include "ws_accept.h"

#include <string.h>

#include "base64.h"
#include "buf.h"
#include "sha1.h"

void orc_ws_accept(char out[ORC_WS_ACCEPT_LEN + 1], const char *key)
{
	struct orc_buf in = ORC_BUF_INIT, b64 = ORC_BUF_INIT;
	unsigned char digest[ORC_SHA1_LEN];

	/* Unbounded buffers: they only fail by aborting (xalloc). */
	orc_buf_adds(&in, key);
	orc_buf_adds(&in, ORC_WS_GUID);
	orc_sha1(digest, in.ptr, in.len);
	orc_base64_encode(&b64, digest, sizeof(digest));
	memcpy(out, b64.ptr, ORC_WS_ACCEPT_LEN);
	out[ORC_WS_ACCEPT_LEN] = '\0';
	orc_buf_release(&in);
	orc_buf_release(&b64);
}
