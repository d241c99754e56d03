/*
 * API keys: "orch_<key_id>_<secret>". key_id is 12 lowercase hex
 * characters (6 random bytes), the public part a key is looked up by;
 * secret is 40 lowercase hex characters (20 random bytes) of which only an
 * argon2id hash is stored. One implementation of the format and of the
 * hashing parameters, shared by the api (verifying and creating keys) and
 * orchard-admin.
 */
#ifndef ORC_APIKEY_H
#define ORC_APIKEY_H

#include <stddef.h>

#define ORC_KEY_PREFIX "orch_"
#define ORC_KEY_ID_LEN 12
#define ORC_KEY_SECRET_LEN 40
#define ORC_KEY_LEN (sizeof(ORC_KEY_PREFIX) - 1 + ORC_KEY_ID_LEN + 1 + ORC_KEY_SECRET_LEN)
#define ORC_KEY_HASH_MAX 128
#define ORC_KEY_NAME_MAX 200        /* bytes of a key's descriptive name */
#define ORC_KEY_CREATE_TRIES 3      /* a key id collision (48 bits) is retried */

struct orc_key {
	char key_id[ORC_KEY_ID_LEN + 1];
	char secret[ORC_KEY_SECRET_LEN + 1];
	char hash[ORC_KEY_HASH_MAX];   /* argon2id encoded hash of secret */
	char full[ORC_KEY_LEN + 1];    /* what the client is given, once */
};

/* Split a well-formed key: 0, or ORC_EINVALID (nothing set). */
int orc_key_parse(char key_id[ORC_KEY_ID_LEN + 1], const char **secret, const char *key);

/* 1 if s is exactly a key id (12 lowercase hex characters). */
int orc_key_id_valid(const char *s);

/* A fresh random key and its hash: 0, or ORC_ERROR (argon2 failed). */
int orc_key_generate(struct orc_key *out);

/* 1 if s may be a key's name: UTF-8 without control characters, at most
 * ORC_KEY_NAME_MAX bytes. */
int orc_key_name_valid(const char *s);

/* Wipe a generated key's secret material. */
void orc_key_wipe(struct orc_key *k);

#endif
