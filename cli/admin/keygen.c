/*
 * API key material. A key is "orch_<key_id>_<secret>": key_id is 12
 * lowercase hex characters (6 random bytes) that the API looks the key up
 * by; secret is 40 lowercase hex characters (20 random bytes) of which only
 * an argon2id hash is stored. The parameters are fixed here and must match
 * what the API's verifier accepts (it reads them from the encoded hash).
 */
#include <argon2.h>
#include <string.h>

#include "admin.h"
#include "err.h"
#include "strutil.h"

#define KEY_T_COST 2
#define KEY_M_COST 19456   /* KiB */
#define KEY_PARALLELISM 1
#define KEY_SALT_BYTES 16
#define KEY_HASH_BYTES 32

int admin_key_generate(char *key_id, char *secret, char *hash, size_t hashlen)
{
	unsigned char salt[KEY_SALT_BYTES];
	char kid[2 * ADMIN_KEY_ID_BYTES + 1], sec[2 * ADMIN_KEY_SECRET_BYTES + 1];
	size_t need;
	int rc;

	need = argon2_encodedlen(KEY_T_COST, KEY_M_COST, KEY_PARALLELISM, KEY_SALT_BYTES,
				 KEY_HASH_BYTES, Argon2_id);
	if (need > hashlen) {
		admin_error("argon2 encoded hash needs %zu bytes", need);
		return ORC_ERROR;
	}
	orc_random_hex(kid, ADMIN_KEY_ID_BYTES);
	orc_random_hex(sec, ADMIN_KEY_SECRET_BYTES);
	orc_random_bytes(salt, sizeof(salt));
	rc = argon2id_hash_encoded(KEY_T_COST, KEY_M_COST, KEY_PARALLELISM, sec, strlen(sec),
				   salt, sizeof(salt), KEY_HASH_BYTES, hash, hashlen);
	explicit_bzero(salt, sizeof(salt));
	if (rc != ARGON2_OK) {
		explicit_bzero(sec, sizeof(sec));
		admin_error("argon2id hashing failed: %s", argon2_error_message(rc));
		return ORC_ERROR;
	}
	memcpy(key_id, kid, sizeof(kid));
	memcpy(secret, sec, sizeof(sec));
	explicit_bzero(sec, sizeof(sec));
	return 0;
}
