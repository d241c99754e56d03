-- Jobs of one sandbox run concurrently by default, as in Orchard (issue 18);
-- a job accepted with "serial": true opts into strict order: it starts only
-- when every serial job of its sandbox accepted before it has ended, and no
-- other serial job of the sandbox runs beside it (api/exec.c, api/job_run.c,
-- docs/architecture.md "Job order"). Concurrent jobs wait for nothing, so a
-- long-running one (a dev server) never holds the serial ones back.
--
-- jobs.seq (007) keeps numbering every job in acceptance order, serial or
-- not; it is what the job record and the trajectory show.
--
-- max_output_bytes: the per-stream output cap the job was accepted with
-- (NULL: the server default). cwd_strict: a missing cwd fails the command
-- instead of falling back to / (Orchard's behaviour).

ALTER TABLE jobs ADD COLUMN serial boolean NOT NULL DEFAULT false;
ALTER TABLE jobs ADD COLUMN max_output_bytes bigint;
ALTER TABLE jobs ADD COLUMN cwd_strict boolean NOT NULL DEFAULT false;

-- Jobs still waiting when this runs were accepted under the old rule (every
-- job in order): they keep it.
UPDATE jobs SET serial = true WHERE status IN ('queued', 'running');

-- The serial claim's "is a serial job before me still open" probe.
CREATE INDEX jobs_sandbox_serial_open_idx ON jobs (sandbox_id, seq)
    WHERE serial AND status IN ('queued', 'running');
