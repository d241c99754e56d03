-- Backpressure on exec (issue 22, docs/architecture.md "Exec limits"):
-- per-sandbox and per-tenant limits on execs running at once, with the
-- execs beyond them queued in the database and a 429 only when a queue
-- bound is hit (api/exec_limit.c).
--
-- tenants quotas; NULL: the server's default (ORCHARD_EXEC_MAX_* and
-- ORCHARD_EXEC_QUEUE_*, docs/configuration.md), which is "no limit" unless
-- set:
--   max_execs_per_sandbox         execs running at once in one sandbox
--   max_execs                     execs running at once in all the tenant's sandboxes
--   max_queued_execs_per_sandbox  execs waiting for a slot in one sandbox
--   max_queued_execs              execs waiting for a slot in all of them
--
-- jobs.queue_order: set (from jobs_queue_order_seq, under the tenant's
-- exec lock) on every job accepted while a limit applies to its tenant.
-- Such a job is claimed only under that lock, when a slot is free and no
-- job accepted before it (in its sandbox, or in a sandbox of the tenant
-- with a free slot) is still waiting: submission order, no starvation. A
-- queued one whose runner died is adopted by a live api process and run,
-- never failed (api/lease.c): it had not started, so running it once is
-- the promise the 200 "queued" made.

ALTER TABLE tenants ADD COLUMN max_execs_per_sandbox integer
    CHECK (max_execs_per_sandbox IS NULL OR max_execs_per_sandbox > 0);
ALTER TABLE tenants ADD COLUMN max_execs integer
    CHECK (max_execs IS NULL OR max_execs > 0);
ALTER TABLE tenants ADD COLUMN max_queued_execs_per_sandbox integer
    CHECK (max_queued_execs_per_sandbox IS NULL OR max_queued_execs_per_sandbox >= 0);
ALTER TABLE tenants ADD COLUMN max_queued_execs integer
    CHECK (max_queued_execs IS NULL OR max_queued_execs >= 0);

CREATE SEQUENCE jobs_queue_order_seq;
ALTER TABLE jobs ADD COLUMN queue_order bigint;

-- The limit checks count a tenant's open jobs.
CREATE INDEX jobs_tenant_open_idx ON jobs (tenant_id, status)
    WHERE status IN ('queued', 'running');
