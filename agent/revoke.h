#ifndef AGENT_REVOKE_H
#define AGENT_REVOKE_H
/*
 * Revoked API keys (docs/agent-protocol.md, "POST /keys/revoke").
 *
 * nginx proxies the PTY WebSocket and raw downloads straight to the agent
 * and names the key that /_auth_agent accepted in X-Orchard-Key (the
 * numeric api_keys.id, not a secret). When that key is revoked the api
 * tells every agent of the key's tenant; the agent then ends the PTY
 * sessions and downloads that key opened and refuses it from then on.
 * Key ids are never reused, so the set only grows; it is bounded, and
 * the oldest entries go first (by then their streams have long ended).
 */
#define AGENT_KEY_MAX 23              /* decimal digits of an int64 */
#define AGENT_REVOKED_MAX 1024

struct agent_reply;
struct agent_request;
/* POST /keys/revoke?key=ID */
void agent_handle_keys_revoke(struct agent_reply *reply, const struct agent_request *req);

/* 1 when key is a well-formed key id (1..23 digits). */
int agent_key_valid(const char *key);
/* 1 when key (NULL or "" is never) has been revoked. */
int agent_key_revoked(const char *key);
#endif
