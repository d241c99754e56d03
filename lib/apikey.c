/*
 * API key format and argon2id hashing (apikey.h). The parameters are fixed
 * here; verification reads them from the encoded hash, so changing them
 * later keeps old keys valid.
 */
#include <argon2.h>
#include <stdio.h>
#include <string.h>

#include "apikey.h"
#include "err.h"
#include "strutil.h"

#define KEY_T_COST 2
#define KEY_M_COST 19456   /* KiB */
#define KEY_PARALLELISM 1
#define KEY_SALT_BYTES 16
#define KEY_HASH_BYTES 32

int orc_key_id_valid(const char *s)
{
	return strlen(s) == ORC_KEY_ID_LEN && orc_is_lower_hex(s, ORC_KEY_ID_LEN);
}

int orc_key_parse(char key_id[ORC_KEY_ID_LEN + 1], const char **secret, const char *key)
{
	const char *p = key + sizeof(ORC_KEY_PREFIX) - 1;

	if (strlen(key) != ORC_KEY_LEN || strncmp(key, ORC_KEY_PREFIX, sizeof(ORC_KEY_PREFIX) - 1) ||
	    !orc_is_lower_hex(p, ORC_KEY_ID_LEN) || p[ORC_KEY_ID_LEN] != '_' ||
	    !orc_is_lower_hex(p + ORC_KEY_ID_LEN + 1, ORC_KEY_SECRET_LEN))
		return ORC_EINVALID;
	memcpy(key_id, p, ORC_KEY_ID_LEN);
	key_id[ORC_KEY_ID_LEN] = '\0';
	*secret = p + ORC_KEY_ID_LEN + 1;
	return 0;
}

int orc_key_generate(struct orc_key *out)
{
	unsigned char salt[KEY_SALT_BYTES];
	struct orc_key k;
	int rc;

	if (argon2_encodedlen(KEY_T_COST, KEY_M_COST, KEY_PARALLELISM, KEY_SALT_BYTES,
			      KEY_HASH_BYTES, Argon2_id) > sizeof(k.hash))
		return ORC_ERROR;
	orc_random_hex(k.key_id, ORC_KEY_ID_LEN / 2);
	orc_random_hex(k.secret, ORC_KEY_SECRET_LEN / 2);
	orc_random_bytes(salt, sizeof(salt));
	rc = argon2id_hash_encoded(KEY_T_COST, KEY_M_COST, KEY_PARALLELISM, k.secret, ORC_KEY_SECRET_LEN,
				   salt, sizeof(salt), KEY_HASH_BYTES, k.hash, sizeof(k.hash));
	explicit_bzero(salt, sizeof(salt));
	if (rc != ARGON2_OK) {
		orc_key_wipe(&k);
		return ORC_ERROR;
	}
	snprintf(k.full, sizeof(k.full), ORC_KEY_PREFIX "%s_%s", k.key_id, k.secret);
	memcpy(out, &k, sizeof(k));
	orc_key_wipe(&k);
	return 0;
}

void orc_key_wipe(struct orc_key *k)
{
	explicit_bzero(k->secret, sizeof(k->secret));
	explicit_bzero(k->full, sizeof(k->full));
}

int orc_key_name_valid(const char *s)
{
	size_t i, n = strlen(s);

	if (n > ORC_KEY_NAME_MAX || !orc_utf8_valid(s, n))
		return 0;
	for (i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return 0;
	return 1;
}
