#ifndef WATCHDOG_H
#define WATCHDOG_H
/*
 * orchard-watchdog's parts (main.c has what it does and in which order).
 */

/* One line "orchard-watchdog: what[: strerror(err)]" on stderr, exit 127. */
void watchdog_die(const char *what, int err) __attribute__((noreturn));

/* ---- netns.c ----------------------------------------------------------
 *
 * The network of a `block_network: false` sandbox: a network namespace of
 * its own whose only way out is slirp4netns, a user-mode TCP/IP stack
 * that makes the sandbox's connections as ordinary sockets of the host.
 * Host loopback forwarding (10.0.2.2 -> the host's 127.0.0.1) is off, so
 * the sandbox reaches neither the host's loopback listeners nor its
 * abstract unix sockets (those are per network namespace), and lists none
 * of its sockets.
 *
 * The watchdog calls this before it drops privileges and starts
 * bubblewrap, which (without --unshare-net) inherits the namespace. As
 * root the namespace belongs to the host's user namespace, so nothing in
 * the sandbox can change its addresses, routes or firewall; unprivileged,
 * it comes with a user namespace of its own that maps the caller alone.
 *
 * slirp4netns is forked before the namespace is made (it must stay in the
 * host's), after the cgroups were joined (it is the sandbox's, counted in
 * its limits and killed with its cgroups), and ends when the watchdog
 * does: it watches a pipe whose other end only the watchdog holds.
 * Returns only when the network is up; any failure is fatal
 * (watchdog_die).
 */
void watchdog_netns_enter(char *slirp4netns);
#endif
