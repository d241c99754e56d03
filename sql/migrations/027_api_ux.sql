-- A running job's output as it is produced (issue 25, docs/api.md
-- "Attaching to a job's output"), so that readers can attach to it from
-- any byte offset of each stream, on any replica, and reconnect after a
-- dropped connection or an api restart without missing anything.
--
-- The runner appends each piece of kept output (at most the job's
-- max_output_bytes per stream, as jobs.stdout/stderr) at its byte offset
-- and notifies orchard_job_output. Storing the result moves the output
-- into jobs.stdout/stderr and deletes these rows in the same statement; a
-- job whose runner died keeps its rows, and readers serve them.

CREATE TABLE job_output (
    job_id  text NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    stream  text NOT NULL CHECK (stream IN ('stdout', 'stderr')),
    off     bigint NOT NULL CHECK (off >= 0),
    seq     bigint GENERATED ALWAYS AS IDENTITY,
    data    bytea NOT NULL,
    PRIMARY KEY (job_id, stream, off)
);
CREATE INDEX job_output_seq ON job_output (job_id, seq);

-- Idempotency-Key, bound to the body first sent with it (issue 25): a
-- request that reuses a key with another body is refused (422) instead of
-- quietly answering the first result. One row per tenant, scope
-- ('sandbox', 'exec', 'fork': the routes' own key spaces) and key; the
-- hash is SHA-256 of the request body's bytes.
CREATE TABLE idempotency_keys (
    tenant_id   bigint NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    scope       text NOT NULL,
    key         text NOT NULL,
    body_sha256 bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, scope, key)
);
