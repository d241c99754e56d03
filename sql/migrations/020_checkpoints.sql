-- Checkpoints, forks and pause/resume of sandboxes (issue 20,
-- docs/checkpoints.md).
--
-- A checkpoint is an immutable copy of a sandbox's writable state and of
-- its spec. The api writes the desired row ('pending'); the controller
-- freezes the sandbox, copies its state, and marks it 'ready' (or
-- 'failed'); a delete is 'deleting' until the controller has removed the
-- copy ('deleted'). Only 'ready' rows are usable; a row that never left
-- 'pending' (a crash mid-checkpoint) is finished or failed by the next
-- reconcile, and its partial copy removed.

CREATE TABLE checkpoints (
    id              text PRIMARY KEY CHECK (id ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'),
    tenant_id       bigint NOT NULL REFERENCES tenants(id),
    sandbox_id      text NOT NULL,
    driver          text NOT NULL DEFAULT 'local',
    name            text,
    labels          jsonb NOT NULL DEFAULT '{}',
    state           text NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'ready', 'failed', 'deleting', 'deleted')),
    state_message   text,
    bytes           bigint,
    -- The source sandbox's spec, so forks need not read a row that may be gone.
    image           text NOT NULL,
    cpu             text NOT NULL,
    memory          text NOT NULL,
    cpu_millis      integer NOT NULL,
    memory_bytes    bigint NOT NULL,
    block_network   boolean NOT NULL,
    env             jsonb NOT NULL DEFAULT '{}',
    workdir         text,
    sandbox_labels  jsonb NOT NULL DEFAULT '{}',
    -- 'manual' (POST .../checkpoints), 'fork' (made by POST .../fork);
    -- step: the number of events of the sandbox when it was taken.
    kind            text NOT NULL DEFAULT 'manual' CHECK (kind IN ('manual', 'fork', 'step')),
    step            bigint,
    created_by_key  bigint,
    request_id      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    ready_at        timestamptz,
    expires_at      timestamptz,
    deleted_at      timestamptz
);
CREATE INDEX checkpoints_tenant_idx ON checkpoints (tenant_id, created_at, id);
CREATE INDEX checkpoints_sandbox_idx ON checkpoints (sandbox_id);
CREATE INDEX checkpoints_open_idx ON checkpoints (state) WHERE state IN ('pending', 'deleting');

-- Lineage: the checkpoint a sandbox was forked from.
ALTER TABLE sandboxes ADD COLUMN forked_from text;
-- Pause: what the user asked for (pause_desired) and what the controller
-- has done (paused); the api waits for them to agree.
ALTER TABLE sandboxes ADD COLUMN pause_desired boolean NOT NULL DEFAULT false;
ALTER TABLE sandboxes ADD COLUMN paused boolean NOT NULL DEFAULT false;

ALTER TABLE tenants ADD COLUMN max_checkpoints integer
    CHECK (max_checkpoints IS NULL OR max_checkpoints >= 0);
ALTER TABLE tenants ADD COLUMN max_checkpoint_bytes bigint
    CHECK (max_checkpoint_bytes IS NULL OR max_checkpoint_bytes >= 0);

-- The controller and the api's waiters LISTEN on orchard_checkpoint
-- (payload: the checkpoint id).
CREATE FUNCTION orchard_notify_checkpoint() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.state IS DISTINCT FROM OLD.state THEN
        PERFORM pg_notify('orchard_checkpoint', NEW.id);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER checkpoints_notify AFTER INSERT OR UPDATE ON checkpoints
    FOR EACH ROW EXECUTE FUNCTION orchard_notify_checkpoint();

-- A pause or resume request, and its completion, wake the controller and
-- the waiters of the sandbox like a state change.
CREATE OR REPLACE FUNCTION orchard_notify_sandbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.state IS DISTINCT FROM OLD.state
       OR NEW.pause_desired IS DISTINCT FROM OLD.pause_desired
       OR NEW.paused IS DISTINCT FROM OLD.paused THEN
        PERFORM pg_notify('orchard_sandbox', NEW.id);
    END IF;
    RETURN NULL;
END $$;
