-- Jobs of one sandbox start in the order they were accepted and never
-- overlap, whichever api replica accepted or runs them (api/lanes.c,
-- api/job_run.c, docs/architecture.md "Job order").
--
-- sandboxes.job_seq counts the jobs accepted for the sandbox. The statement
-- that accepts a job increments it, which holds the sandbox row's lock until
-- that statement commits, and stores the new value in jobs.seq. So seq order
-- is commit order: once a job is visible, every job of its sandbox with a
-- smaller seq is visible too. A job is claimed (queued -> running) only when
-- no other job of its sandbox is running and none with a smaller seq is
-- queued; a claim that sees the job before it finished cannot succeed.
--
-- orchard_lane (payload: sandbox id) is notified whenever a job of the
-- sandbox ends, whoever ended it (its runner, a cancel, the reaper of a dead
-- runner's jobs, a runner giving up on it), so the replicas holding the next
-- jobs try them at once instead of at their periodic re-check.

ALTER TABLE sandboxes ADD COLUMN job_seq bigint NOT NULL DEFAULT 0;
-- NULL only for rows written outside the api (they are not ordered).
ALTER TABLE jobs ADD COLUMN seq bigint;

UPDATE jobs j SET seq = n.seq
  FROM (SELECT id, row_number() OVER (PARTITION BY sandbox_id ORDER BY created_at, id) AS seq
          FROM jobs) n
 WHERE j.id = n.id;
UPDATE sandboxes s SET job_seq = m.seq
  FROM (SELECT sandbox_id, max(seq) AS seq FROM jobs GROUP BY sandbox_id) m
 WHERE s.id = m.sandbox_id;

-- The claim's "is anything before me still open" probe.
CREATE INDEX jobs_sandbox_open_idx ON jobs (sandbox_id, seq)
    WHERE status IN ('queued', 'running');

CREATE OR REPLACE FUNCTION orchard_notify_job() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.status IS DISTINCT FROM OLD.status THEN
        PERFORM pg_notify('orchard_job', NEW.id);
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.status IN ('succeeded', 'failed')
       AND OLD.status IN ('queued', 'running') THEN
        PERFORM pg_notify('orchard_lane', NEW.sandbox_id);
    END IF;
    RETURN NULL;
END $$;
