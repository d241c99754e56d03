-- Admission control (issue 22, docs/controller.md "Admission"): a created
-- sandbox is queued until the controller admits it into the capacity its
-- driver reports; only admitted rows are launched.
--
-- sandboxes.admitted_at: when the controller admitted the row (NULL: still
-- queued). Written by one UPDATE guarded by `admitted_at IS NULL`, so a
-- controller killed at any point admits nothing twice; usage is always
-- summed from the admitted rows, never kept in memory.
-- queue_position / queue_reason: written by the controller on queued rows
-- (1 is served next), cleared on admission.
-- tenants.weight: the tenant's share in the weighted fair share.
-- driver_capacity: what each driver last reported (the controller writes it
-- on every sweep); the api refuses sizes larger than the largest node with
-- a 422 at create.

ALTER TABLE sandboxes ADD COLUMN admitted_at timestamptz;
ALTER TABLE sandboxes ADD COLUMN queue_position integer;
ALTER TABLE sandboxes ADD COLUMN queue_reason text;

-- Rows from before admission existed were admitted when created.
UPDATE sandboxes SET admitted_at = created_at;

CREATE INDEX sandboxes_queued_idx ON sandboxes (driver, created_at, id)
    WHERE state = 'pending' AND admitted_at IS NULL;

ALTER TABLE tenants ADD COLUMN weight integer NOT NULL DEFAULT 1
    CHECK (weight BETWEEN 1 AND 1000);

CREATE TABLE driver_capacity (
    driver              text PRIMARY KEY,
    nodes               integer NOT NULL,
    cpu_millis          bigint NOT NULL,   -- schedulable, after reserve and overcommit
    memory_bytes        bigint NOT NULL,
    node_cpu_millis     bigint NOT NULL,   -- the largest single node
    node_memory_bytes   bigint NOT NULL,
    updated_at          timestamptz NOT NULL DEFAULT now()
);
