#ifndef ORC_CMDLINE_H
#define ORC_CMDLINE_H
/*
 * Command-line conventions shared by orchardctl and orchard-admin.
 */

/* 1 when --help or -h comes among argv[1..argc) before a "--", else 0:
 * `CMD ... --help` shows CMD's usage wherever the flag stands. */
int orc_wants_help(int argc, char **argv);
#endif
