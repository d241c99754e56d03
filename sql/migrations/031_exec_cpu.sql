-- Pruning Idempotency-Key bodies by age (lib/prune.c, issue 23): the
-- controller's retention deletes rows older than
-- ORCHARD_IDEMPOTENCY_RETENTION_HOURS every 10 minutes; without an index
-- each run would read the whole table.
--
-- (Measured and not taken, bench/README.md "CPU per exec": writing the
-- failure CHECK of 023 out instead of calling orchard_failure_ok(), which
-- PostgreSQL inlines again in every statement that writes jobs or
-- sandboxes. The profile shows it, the per-exec CPU figure did not move.)

CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
