#ifndef CLI_STATS_H
#define CLI_STATS_H
#include <getopt.h>

#include "cli.h"
/*
 * orchardctl stats (cmd_stats.c): the dashboard summaries from GET
 * /v1/stats (docs/observability.md), the document orchard-admin stats
 * prints from the database.
 */
int cmd_stats(struct cli_config *cfg, int argc, char **argv);
extern const char stats_usage[];
extern const struct option stats_opts[];
#endif
