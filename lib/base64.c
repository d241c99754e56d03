#include "base64.h"

#include "err.h"

static const char alphabet[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int orc_base64_encode(struct orc_buf *out, const void *data, size_t n)
{
	const unsigned char *p = data;
	char q[4];
	size_t i;
	int err;

	for (i = 0; i + 3 <= n; i += 3) {
		q[0] = alphabet[p[i] >> 2];
		q[1] = alphabet[((p[i] & 3) << 4) | (p[i + 1] >> 4)];
		q[2] = alphabet[((p[i + 1] & 15) << 2) | (p[i + 2] >> 6)];
		q[3] = alphabet[p[i + 2] & 63];
		if ((err = orc_buf_add(out, q, 4)) < 0)
			return err;
	}
	if (i < n) {
		q[0] = alphabet[p[i] >> 2];
		if (i + 1 < n) {
			q[1] = alphabet[((p[i] & 3) << 4) | (p[i + 1] >> 4)];
			q[2] = alphabet[(p[i + 1] & 15) << 2];
		} else {
			q[1] = alphabet[(p[i] & 3) << 4];
			q[2] = '=';
		}
		q[3] = '=';
		if ((err = orc_buf_add(out, q, 4)) < 0)
			return err;
	}
	return 0;
}

int orc_base64_value(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

int orc_base64_decode(struct orc_buf *out, const char *s, size_t n)
{
	unsigned char b[3];
	int v[4], pad, k, err;
	size_t i;

	if (n % 4)
		return ORC_EINVALID;
	for (i = 0; i < n; i += 4) {
		pad = 0;
		for (k = 0; k < 4; k++) {
			if (s[i + k] == '=' && i + 4 == n && k >= 2) {
				v[k] = 0;
				pad++;
				continue;
			}
			if (pad || (v[k] = orc_base64_value((unsigned char)s[i + k])) < 0)
				return ORC_EINVALID;
		}
		if (pad == 1 && s[i + 2] == '=')
			return ORC_EINVALID; /* "x==y" is not padding */
		b[0] = (unsigned char)(v[0] << 2 | v[1] >> 4);
		b[1] = (unsigned char)((v[1] & 15) << 4 | v[2] >> 2);
		b[2] = (unsigned char)((v[2] & 3) << 6 | v[3]);
		if ((err = orc_buf_add(out, b, (size_t)(3 - pad))) < 0)
			return err;
	}
	return 0;
}
