-- Orchard schema: tenants, API keys, sandboxes, jobs, events (DESIGN.md §5).
-- Applied once by `orchard-admin migrate` inside one transaction.

CREATE TABLE tenants (
    id              bigserial PRIMARY KEY,
    name            text NOT NULL UNIQUE
                    CHECK (name ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'),
    max_sandboxes   integer CHECK (max_sandboxes IS NULL OR max_sandboxes >= 0),
    max_cpu_millis  integer CHECK (max_cpu_millis IS NULL OR max_cpu_millis > 0),
    max_memory_bytes bigint CHECK (max_memory_bytes IS NULL OR max_memory_bytes > 0),
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
    id              bigserial PRIMARY KEY,
    tenant_id       bigint NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    key_id          text NOT NULL UNIQUE,          -- the public middle part of the key
    secret_hash     text NOT NULL,                 -- argon2id encoded hash of the secret
    role            text NOT NULL DEFAULT 'user' CHECK (role IN ('user', 'admin')),
    name            text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    last_used_at    timestamptz,
    revoked_at      timestamptz
);

CREATE TABLE sandboxes (
    id              text PRIMARY KEY CHECK (id ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'),
    tenant_id       bigint NOT NULL REFERENCES tenants(id),
    image           text NOT NULL,
    driver          text NOT NULL DEFAULT 'local',
    -- pending -> ready | failed; deleting -> deleted (desired deletion, then done)
    state           text NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'ready', 'failed', 'deleting', 'deleted')),
    state_message   text,
    cpu             text NOT NULL,
    memory          text NOT NULL,
    cpu_millis      integer NOT NULL,
    memory_bytes    bigint NOT NULL,
    block_network   boolean NOT NULL DEFAULT true,
    labels          jsonb NOT NULL DEFAULT '{}',
    env             jsonb NOT NULL DEFAULT '{}',
    workdir         text,
    timeout_seconds integer NOT NULL DEFAULT 3600,
    ttl_seconds     integer,
    idle_timeout_seconds integer,
    agent_address   text,
    agent_token     text NOT NULL,
    driver_handle   text,
    created_by_key  bigint REFERENCES api_keys(id),
    idempotency_key text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    ready_at        timestamptz,
    deleted_at      timestamptz,
    last_heartbeat_at timestamptz,
    last_activity_at timestamptz,
    UNIQUE (tenant_id, idempotency_key)
);
CREATE INDEX sandboxes_tenant_idx ON sandboxes (tenant_id, created_at, id);
CREATE INDEX sandboxes_live_idx ON sandboxes (state) WHERE state <> 'deleted';

CREATE TABLE jobs (
    id              text PRIMARY KEY,
    sandbox_id      text NOT NULL REFERENCES sandboxes(id),
    tenant_id       bigint NOT NULL REFERENCES tenants(id),
    kind            text NOT NULL DEFAULT 'exec',
    command         jsonb NOT NULL,                -- a string or an argv array
    cwd             text,
    env             jsonb NOT NULL DEFAULT '{}',
    login_shell     boolean NOT NULL DEFAULT false,
    stdin           bytea,
    timeout_seconds integer NOT NULL DEFAULT 300,
    status          text NOT NULL DEFAULT 'queued'
                    CHECK (status IN ('queued', 'running', 'succeeded', 'failed')),
    exit_code       integer,
    signal          integer,
    stdout          bytea,
    stderr          bytea,
    stdout_bytes    bigint,
    stderr_bytes    bigint,
    stdout_truncated boolean NOT NULL DEFAULT false,
    stderr_truncated boolean NOT NULL DEFAULT false,
    timed_out       boolean NOT NULL DEFAULT false,
    error           text,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    started_at      timestamptz,
    completed_at    timestamptz,
    runner          text,
    lease_until     timestamptz,
    created_by_key  bigint REFERENCES api_keys(id),
    idempotency_key text,
    UNIQUE (tenant_id, idempotency_key)
);
CREATE INDEX jobs_sandbox_idx ON jobs (sandbox_id, created_at, id);
CREATE INDEX jobs_open_idx ON jobs (status) WHERE status IN ('queued', 'running');

-- Append-only log per sandbox: the source of trajectories, audit and dashboards.
CREATE TABLE events (
    id              bigserial PRIMARY KEY,
    sandbox_id      text NOT NULL,
    tenant_id       bigint NOT NULL,
    job_id          text,
    kind            text NOT NULL,
    data            jsonb NOT NULL DEFAULT '{}',
    api_key_id      bigint,
    request_id      text,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX events_sandbox_idx ON events (sandbox_id, id);

-- Waiters LISTEN on these channels; the payload is the row id.
CREATE FUNCTION orchard_notify_sandbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.state IS DISTINCT FROM OLD.state THEN
        PERFORM pg_notify('orchard_sandbox', NEW.id);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER sandboxes_notify AFTER INSERT OR UPDATE ON sandboxes
    FOR EACH ROW EXECUTE FUNCTION orchard_notify_sandbox();

CREATE FUNCTION orchard_notify_job() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.status IS DISTINCT FROM OLD.status THEN
        PERFORM pg_notify('orchard_job', NEW.id);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_notify AFTER INSERT OR UPDATE ON jobs
    FOR EACH ROW EXECUTE FUNCTION orchard_notify_job();

-- The API caches verified keys; a revoked key is dropped from every
-- replica's cache at once through this channel (payload: key_id).
CREATE FUNCTION orchard_notify_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.revoked_at IS DISTINCT FROM OLD.revoked_at THEN
        PERFORM pg_notify('orchard_key', NEW.key_id);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER api_keys_notify AFTER UPDATE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION orchard_notify_key();
