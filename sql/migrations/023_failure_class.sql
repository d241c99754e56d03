-- Typed failure attribution (issue 21, docs/architecture.md "Failure
-- classes"): every failed job and failed sandbox says in `failure` what
-- ended it, in words a trainer can mask on, next to the free-text error.
--
--   timeout       the job's own timeout killed it
--   oom_killed    the kernel's OOM killer (the sandbox's memory limit)
--   pids_limit    it failed after a fork was refused by the pids limit
--   killed        a signal nobody of ours sent
--   canceled      POST /jobs/{id}/cancel (or DELETE of a queued job)
--   sandbox_lost  the sandbox died under it
--   agent_error   the agent answered an error, or did not answer while
--                 its sandbox lived
--   infra_error   the api, database or driver (a runner died, a sandbox
--                 that never started)
--   NULL          none of these: it succeeded or just exited non-zero
--
-- The api classifies a job when it stores the result (api/job_run.c); the
-- controller's 'failed' transition classifies a sandbox through the
-- trigger below, which also marks the jobs that were running in it.

CREATE FUNCTION orchard_failure_ok(f text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT f IS NULL OR f IN ('timeout', 'oom_killed', 'pids_limit', 'killed', 'canceled',
                              'sandbox_lost', 'agent_error', 'infra_error')
$$;

ALTER TABLE jobs ADD COLUMN failure text CHECK (orchard_failure_ok(failure));
ALTER TABLE sandboxes ADD COLUMN failure text CHECK (orchard_failure_ok(failure));

-- What older rows say, as well as the text allows.
UPDATE jobs SET failure = CASE
        WHEN cancel_requested_at IS NOT NULL OR error = 'cancelled' THEN 'canceled'
        WHEN timed_out THEN 'timeout'
        WHEN error LIKE 'runner died%' THEN 'infra_error'
        WHEN error LIKE 'agent%' THEN 'agent_error'
        WHEN error LIKE 'the sandbox is not ready%' THEN 'sandbox_lost'
        WHEN signal IS NOT NULL THEN 'killed' END
    WHERE status = 'failed';
UPDATE sandboxes SET failure = CASE WHEN ready_at IS NOT NULL THEN 'sandbox_lost' ELSE 'infra_error' END
    WHERE state = 'failed';

-- A sandbox that becomes 'failed' says why: it was lost after it was
-- ready, it never started otherwise (a launch or driver failure, an image
-- that is not there; also a row the api writes failed at once). A writer
-- that knows better sets failure itself.
CREATE FUNCTION orchard_sandbox_failure() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'failed' AND NEW.failure IS NULL
       AND (TG_OP = 'INSERT' OR OLD.state IS DISTINCT FROM 'failed') THEN
        NEW.failure := CASE WHEN TG_OP = 'UPDATE' AND OLD.state = 'ready' THEN 'sandbox_lost'
                            ELSE 'infra_error' END;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER sandboxes_failure BEFORE INSERT OR UPDATE OF state ON sandboxes
    FOR EACH ROW EXECUTE FUNCTION orchard_sandbox_failure();

-- The jobs it takes along: open ones are marked now (the api keeps the
-- mark when it stores their end, api/job_run.c), and one the api has just
-- ended as an agent failure (the agent went away before the controller
-- noticed the sandbox had) is corrected.
CREATE FUNCTION orchard_sandbox_lost_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'failed' AND OLD.state = 'ready' THEN
        UPDATE jobs SET failure = 'sandbox_lost'
         WHERE sandbox_id = NEW.id
           AND (status IN ('queued', 'running')
                OR (status = 'failed' AND failure = 'agent_error'
                    AND completed_at > now() - interval '5 minutes'));
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER sandboxes_lost_jobs AFTER UPDATE OF state ON sandboxes
    FOR EACH ROW EXECUTE FUNCTION orchard_sandbox_lost_jobs();

CREATE INDEX jobs_failure_idx ON jobs (completed_at, failure) WHERE failure IS NOT NULL;

-- Dashboards (004): the class beside the reason, and counted by class.
CREATE OR REPLACE VIEW dash_failures AS
SELECT f.source, f.tenant_id, t.name AS tenant, f.sandbox_id, f.job_id, f.reason, f.failed_at,
       f.failure
FROM (SELECT 'sandbox'::text AS source,
             e.tenant_id,
             e.sandbox_id,
             NULL::text AS job_id,
             coalesce(nullif(e.data ->> 'message', ''), 'unknown') AS reason,
             e.created_at AS failed_at,
             coalesce(s.failure, CASE WHEN e.data ->> 'from' = 'ready' THEN 'sandbox_lost'
                                      ELSE 'infra_error' END) AS failure
      FROM events e
      LEFT JOIN sandboxes s ON s.id = e.sandbox_id
      WHERE e.kind = 'sandbox.failed'
      UNION ALL
      SELECT 'sandbox', s.tenant_id, s.id, NULL,
             coalesce(nullif(s.state_message, ''), 'unknown'),
             coalesce(s.ready_at, s.created_at),
             s.failure
      FROM sandboxes s
      WHERE s.state = 'failed'
        AND NOT EXISTS (SELECT 1 FROM events e
                        WHERE e.sandbox_id = s.id AND e.kind = 'sandbox.failed')
      UNION ALL
      SELECT 'job', j.tenant_id, j.sandbox_id, j.id,
             CASE WHEN j.error IS NOT NULL AND j.error <> '' THEN j.error
                  WHEN j.timed_out THEN 'timed out'
                  WHEN j.signal IS NOT NULL THEN 'killed by signal ' || j.signal
                  WHEN j.exit_code IS NOT NULL THEN 'exit code ' || j.exit_code
                  ELSE 'unknown' END,
             j.completed_at,
             j.failure
      FROM jobs j
      WHERE j.status = 'failed' AND j.completed_at IS NOT NULL) f
JOIN tenants t ON t.id = f.tenant_id;

CREATE OR REPLACE VIEW dash_failure_reasons AS
SELECT f.source,
       f.tenant_id,
       f.tenant,
       f.reason,
       (count(*) FILTER (WHERE f.failed_at > now() - interval '24 hours'))::integer AS last_24h,
       count(*)::integer AS total,
       max(f.failed_at) AS last_failed_at,
       f.failure
FROM dash_failures f
GROUP BY f.source, f.tenant_id, f.tenant, f.reason, f.failure;

-- Failures by class: what a trainer masks (everything but NULL, which is
-- a command that exited non-zero on its own).
CREATE VIEW dash_failure_classes AS
SELECT f.source,
       f.tenant_id,
       f.tenant,
       coalesce(f.failure, 'exit') AS failure,
       (count(*) FILTER (WHERE f.failed_at > now() - interval '24 hours'))::integer AS last_24h,
       count(*)::integer AS total,
       max(f.failed_at) AS last_failed_at
FROM dash_failures f
GROUP BY f.source, f.tenant_id, f.tenant, coalesce(f.failure, 'exit');

-- Trajectories (003, 005): each step's class, beside ok.
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
            ELSE true END AS ok,
       j.failure
FROM events e
LEFT JOIN jobs j ON j.id = e.job_id AND j.tenant_id = e.tenant_id
WHERE (e.kind = 'exec.accept' AND j.id IS NOT NULL)
   OR e.kind IN ('file.write', 'git.apply', 'git.reset', 'archive.upload');

-- GET /v1/stats (004): failure_reasons carry the class.
CREATE OR REPLACE FUNCTION dash_stats(p_tenant_id bigint DEFAULT NULL, p_hours integer DEFAULT 24,
                           p_days integer DEFAULT 7, p_top integer DEFAULT 10)
RETURNS json LANGUAGE sql STABLE AS $$
SELECT json_build_object(
    'tenant', (SELECT name FROM tenants WHERE id = p_tenant_id),
    'generated_at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
    'hours', p_hours,
    'days', p_days,
    'active_sandboxes', coalesce((
        SELECT json_agg(json_build_object(
                   'tenant', a.tenant, 'image', a.image, 'state', a.state,
                   'sandboxes', a.sandboxes, 'cpu_millis', a.cpu_millis,
                   'memory_bytes', a.memory_bytes)
               ORDER BY a.tenant, a.image, a.state)
        FROM dash_active_sandboxes a
        WHERE p_tenant_id IS NULL OR a.tenant_id = p_tenant_id), '[]'),
    'exec_latency_hourly', coalesce((
        SELECT json_agg(json_build_object(
                   'hour', to_char(l.hour AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                   'execs', l.execs, 'failed', l.failed,
                   'p50_seconds', round(l.p50_seconds::numeric, 3),
                   'p90_seconds', round(l.p90_seconds::numeric, 3),
                   'p99_seconds', round(l.p99_seconds::numeric, 3),
                   'max_seconds', round(l.max_seconds::numeric, 3))
               ORDER BY l.hour)
        FROM dash_exec_latency_hourly l
        WHERE l.hour > now() - make_interval(hours => p_hours)
          AND l.tenant_id IS NOT DISTINCT FROM p_tenant_id), '[]'),
    'failure_reasons', coalesce((
        SELECT json_agg(json_build_object(
                   'source', f.source, 'tenant', f.tenant, 'reason', f.reason,
                   'last_24h', f.last_24h, 'total', f.total,
                   'last_failed_at', to_char(f.last_failed_at AT TIME ZONE 'UTC',
                                             'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                   'failure', f.failure)
               ORDER BY f.last_24h DESC, f.total DESC, f.tenant, f.source, f.reason)
        FROM dash_failure_reasons f
        WHERE p_tenant_id IS NULL OR f.tenant_id = p_tenant_id), '[]'),
    'tenant_usage', coalesce((
        SELECT json_agg(json_build_object(
                   'tenant', u.tenant, 'day', to_char(u.day AT TIME ZONE 'UTC', 'YYYY-MM-DD'),
                   'sandbox_hours', round(u.sandbox_hours::numeric, 3),
                   'sandboxes_created', u.sandboxes_created,
                   'execs', u.execs, 'exec_seconds', round(u.exec_seconds::numeric, 3))
               ORDER BY u.day, u.tenant)
        FROM dash_tenant_usage u
        WHERE u.day > now() - make_interval(days => p_days)
          AND (p_tenant_id IS NULL OR u.tenant_id = p_tenant_id)), '[]'),
    'slowest_commands', coalesce((
        SELECT json_agg(json_build_object(
                   'job_id', c.job_id, 'sandbox_id', c.sandbox_id, 'tenant', c.tenant,
                   'command', left(c.command, 200),
                   'duration_seconds', round(c.duration_seconds::numeric, 3),
                   'status', c.status, 'exit_code', c.exit_code, 'timed_out', c.timed_out,
                   'completed_at', to_char(c.completed_at AT TIME ZONE 'UTC',
                                           'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
               ORDER BY c.duration_seconds DESC, c.job_id)
        FROM (SELECT * FROM dash_slowest_commands s
              WHERE s.completed_at > now() - make_interval(hours => p_hours)
                AND (p_tenant_id IS NULL OR s.tenant_id = p_tenant_id)
              ORDER BY s.duration_seconds DESC, s.job_id
              LIMIT p_top) c), '[]'))
$$;
