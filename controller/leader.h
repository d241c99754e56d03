#ifndef CTL_LEADER_H
#define CTL_LEADER_H
#include <libpq-fe.h>
/*
 * Leader election: the leader is whoever holds a session-level PostgreSQL
 * advisory lock (CTL_LEADER_LOCK) on one dedicated connection. The lock
 * lives exactly as long as that connection, so a leader that dies or loses
 * its connection frees it for a standby at once. Requires a direct
 * connection (no transaction-pooling proxy in between).
 */

/* "orchard" + 0x01 as a 64-bit number: fixed, shared by every controller. */
#define CTL_LEADER_LOCK 0x6f72636861726401LL

/*
 * Block until this process holds the lock, trying once a second and
 * logging that it is standby meanwhile. *out is the lock connection, to be
 * kept open (and watched) for as long as we act. ORC_ETIMEOUT when
 * ctl_stopping was set before the lock was won.
 */
int ctl_leader_acquire(PGconn **out, const char *conninfo);

/*
 * Is the lock still ours? Reads what the server sent on the connection
 * (call it when its socket is readable) and, with ping, makes a round
 * trip. 0 while healthy, ORC_EUNAVAIL once the connection is gone — and
 * with it the lock: the caller must stop acting.
 */
int ctl_leader_check(PGconn *c, int ping);
#endif
