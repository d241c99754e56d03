-- A tar upload (PUT /sandboxes/{id}/archive) is one step of a trajectory,
-- like a file write: GET /sandboxes/{id}/trajectory exports its
-- 'archive.upload' event as a step line, so the views number it too
-- (docs/trajectory.md). Same columns as in 003; only the kinds change.

CREATE OR REPLACE VIEW trajectory_steps AS
SELECT e.sandbox_id,
       e.tenant_id,
       row_number() OVER (PARTITION BY e.sandbox_id ORDER BY e.id)::integer AS step,
       e.id AS event_id,
       CASE WHEN e.kind = 'exec.accept' THEN 'exec' ELSE e.kind END AS kind,
       e.job_id,
       CASE WHEN e.kind = 'exec.accept' THEN j.started_at ELSE e.created_at END AS started_at,
       CASE WHEN e.kind = 'exec.accept' THEN j.completed_at ELSE e.created_at END AS completed_at,
       CASE WHEN e.kind = 'exec.accept'
            THEN extract(epoch FROM j.completed_at - j.started_at)::float8 END AS duration_seconds,
       j.status,
       j.exit_code,
       j.timed_out,
       -- NULL while an exec is queued or running
       CASE WHEN e.kind = 'exec.accept'
            THEN CASE j.status WHEN 'succeeded' THEN true WHEN 'failed' THEN false END
            WHEN jsonb_typeof(e.data -> 'success') = 'boolean' THEN (e.data -> 'success')::boolean
            ELSE true END AS ok
FROM events e
LEFT JOIN jobs j ON j.id = e.job_id AND j.tenant_id = e.tenant_id
WHERE (e.kind = 'exec.accept' AND j.id IS NOT NULL)
   OR e.kind IN ('file.write', 'git.apply', 'git.reset', 'archive.upload');
