-- Views over events and jobs for trajectories (docs/trajectory.md).
--
-- A step is what GET /sandboxes/{id}/trajectory numbers as "step": an
-- exec (its 'exec.accept' event joined with its job) or a recorded
-- 'file.write', 'git.apply' or 'git.reset' event, numbered from 1 in event
-- order. The numbering here and in the export must stay the same.

CREATE VIEW trajectory_steps AS
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
   OR e.kind IN ('file.write', 'git.apply', 'git.reset');

-- One row per sandbox (deleted ones included): how many turns, how long,
-- and where it first went wrong.
CREATE VIEW trajectory_summary AS
SELECT s.id AS sandbox_id,
       s.tenant_id,
       s.image,
       s.labels,
       s.state,
       s.created_at,
       s.deleted_at,
       count(st.step)::integer AS steps,
       (count(st.step) FILTER (WHERE st.kind = 'exec'))::integer AS exec_steps,
       (count(st.step) FILTER (WHERE st.ok = false))::integer AS failed_steps,
       min(st.step) FILTER (WHERE st.ok = false) AS first_failed_step,
       min(st.started_at) AS first_step_at,
       max(st.completed_at) AS last_step_at,
       -- wall clock from the start of the first step to the end of the last
       extract(epoch FROM max(st.completed_at) - min(st.started_at))::float8 AS duration_seconds,
       -- time spent running commands
       coalesce(sum(st.duration_seconds), 0)::float8 AS exec_seconds,
       extract(epoch FROM coalesce(s.deleted_at, now()) - s.created_at)::float8 AS lifetime_seconds
FROM sandboxes s
LEFT JOIN trajectory_steps st ON st.sandbox_id = s.id AND st.tenant_id = s.tenant_id
GROUP BY s.id;
