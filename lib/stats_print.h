#ifndef ORC_STATS_PRINT_H
#define ORC_STATS_PRINT_H
#include <stdio.h>
#include <json-c/json.h>
/*
 * The dashboard summaries (GET /v1/stats, dash_stats() in
 * sql/migrations/004_dashboards.sql) as text tables: one titled section per
 * array of the document, each an array of flat objects whose columns are
 * the first object's keys (so fields the server adds show up without a
 * new client). Cells lose control characters and are cut at 60
 * characters. Shared by orchardctl stats and orchard-admin stats.
 * headers: 0 drops each table's header row (--no-headers).
 */
void orc_stats_print(FILE *f, json_object *doc, int headers);
#endif
