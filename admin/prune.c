/*
 * orchard-admin prune: retention by hand (lib/prune.h), the same pruning
 * the controller is meant to run periodically.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>

#include "admin.h"
#include "err.h"
#include "prune.h"
#include "strutil.h"

const char prune_usage[] =
	"usage: orchard-admin prune [--days N] [--batch N] [--dry-run]\n"
	"\n"
	"Delete the events, jobs and rows of sandboxes deleted more than N days\n"
	"ago, in batches of at most --batch rows, each its own short transaction\n"
	"(rows another transaction holds are skipped, for the next run). Live\n"
	"sandboxes and their jobs and events are never touched. Also deletes the\n"
	"bodies of Idempotency-Keys older than $ORCHARD_IDEMPOTENCY_RETENTION_HOURS\n"
	"(else 24), and moves the output pieces of jobs that ended without their\n"
	"runner (more than 10 minutes ago) into the jobs' rows.\n"
	"\n"
	"  --days N    retention in days, 1 to 36500 (default $ORCHARD_RETENTION_DAYS,\n"
	"              else 30)\n"
	"  --batch N   rows per transaction, 1 to 10000 (default\n"
	"              $ORCHARD_RETENTION_BATCH, else 500)\n"
	"  --dry-run   only count what would be deleted\n"
	"\n"
	"Example:\n"
	"  orchard-admin prune --days 14 --dry-run\n";

int cmd_prune(struct admin_ctx *ctx, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "days", required_argument, NULL, 'd' },
		{ "batch", required_argument, NULL, 'b' },
		{ "dry-run", no_argument, NULL, 'n' },
		{ NULL, 0, NULL, 0 },
	};
	struct orc_prune_opts o = ORC_PRUNE_OPTS_INIT;
	struct orc_prune_result r;
	int64_t v;
	int opt, err;

	if (orc_prune_opts_from_env(&o) < 0) {
		admin_error("ORCHARD_RETENTION_DAYS wants 1 to %d, ORCHARD_RETENTION_BATCH 1 to %d and"
			    " ORCHARD_IDEMPOTENCY_RETENTION_HOURS 1 to %d", ORC_PRUNE_MAX_DAYS,
			    ORC_PRUNE_MAX_BATCH, ORC_PRUNE_MAX_KEY_HOURS);
		return ADMIN_FAIL;
	}
	optind = 0;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'd':
			if (orc_parse_i64(&v, optarg, 1, ORC_PRUNE_MAX_DAYS) < 0)
				return admin_usage_error(prune_usage, "prune: --days wants 1 to %d, not \"%s\"",
							 ORC_PRUNE_MAX_DAYS, optarg);
			o.days = (int)v;
			break;
		case 'b':
			if (orc_parse_i64(&v, optarg, 1, ORC_PRUNE_MAX_BATCH) < 0)
				return admin_usage_error(prune_usage, "prune: --batch wants 1 to %d, not \"%s\"",
							 ORC_PRUNE_MAX_BATCH, optarg);
			o.batch = (int)v;
			break;
		case 'n':
			o.dry_run = 1;
			break;
		default:
			return admin_bad_option(prune_usage);
		}
	}
	if (optind < argc)
		return admin_usage_error(prune_usage, "prune: unexpected argument \"%s\"", argv[optind]);
	if (admin_connect(ctx) < 0)
		return ADMIN_FAIL;
	if ((err = orc_prune(&r, ctx->conn, &o)) < 0) {
		admin_error("prune failed (%s); what was deleted before stays deleted, run it again",
			    orc_err_name(err));
		return ADMIN_FAIL;
	}
	if (o.dry_run)
		printf("would prune %" PRId64 " sandboxes, %" PRId64 " jobs, %" PRId64 " events"
		       " (sandboxes deleted more than %d days ago), %" PRId64 " idempotency keys"
		       " (older than %d hours), %" PRId64 " output pieces of ended jobs\n", r.sandboxes,
		       r.jobs, r.events, o.days, r.idempotency_keys, o.key_hours, r.job_output);
	else
		printf("pruned %" PRId64 " sandboxes, %" PRId64 " jobs, %" PRId64 " events in %" PRId64
		       " batches of at most %d rows (sandboxes deleted more than %d days ago), %" PRId64
		       " idempotency keys (older than %d hours), %" PRId64 " output pieces of ended jobs\n",
		       r.sandboxes, r.jobs, r.events, r.batches, o.batch, o.days, r.idempotency_keys,
		       o.key_hours, r.job_output);
	return ADMIN_OK;
}
