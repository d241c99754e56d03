-- Batch create and tenant quotas beyond max_sandboxes (issue 22,
-- docs/controller.md "Batch create" and "Quotas").
--
-- sandbox_batches: one row per POST /v1/sandboxes/batch, written in the
-- transaction that inserts its sandboxes (sandboxes.batch_id), so a batch
-- is all or nothing. idempotency_key is unique per tenant: a retried batch
-- finds its row and answers the same sandboxes, creating nothing.
--
-- tenants quotas (NULL: unlimited), checked in the creating transaction
-- under the tenant's row lock (api/quota.c):
--   max_total_cpu_millis    cpu of the tenant's live sandboxes together
--   max_total_memory_bytes  memory of the tenant's live sandboxes together
--   max_queued              sandboxes waiting for admission at once
--   max_creates_per_minute  sandboxes created in any 60 seconds

CREATE TABLE sandbox_batches (
    id              text PRIMARY KEY,
    tenant_id       bigint NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    count           integer NOT NULL CHECK (count > 0),
    idempotency_key text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, idempotency_key)
);

ALTER TABLE sandboxes ADD COLUMN batch_id text REFERENCES sandbox_batches(id) ON DELETE SET NULL;
CREATE INDEX sandboxes_batch_idx ON sandboxes (batch_id) WHERE batch_id IS NOT NULL;

ALTER TABLE tenants ADD COLUMN max_total_cpu_millis bigint
    CHECK (max_total_cpu_millis IS NULL OR max_total_cpu_millis > 0);
ALTER TABLE tenants ADD COLUMN max_total_memory_bytes bigint
    CHECK (max_total_memory_bytes IS NULL OR max_total_memory_bytes > 0);
ALTER TABLE tenants ADD COLUMN max_queued integer
    CHECK (max_queued IS NULL OR max_queued >= 0);
ALTER TABLE tenants ADD COLUMN max_creates_per_minute integer
    CHECK (max_creates_per_minute IS NULL OR max_creates_per_minute >= 0);
