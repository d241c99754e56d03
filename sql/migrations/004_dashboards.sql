-- Views for dashboards (docs/observability.md): Grafana's PostgreSQL data
-- source (docs/dashboards/orchard.json), `orchard-admin stats` and
-- GET /v1/stats read only these, so what an operator sees on a dashboard
-- and in a terminal is the same figure.
--
-- Conventions: times are timestamptz; hour and day buckets are cut in UTC
-- (independent of the session's TimeZone); durations are seconds as
-- float8; every view has tenant_id (for filtering) and tenant (the name).
-- An exec's duration is its run time, completed_at - started_at; jobs that
-- never started (failed while queued) have none.

-- Retention (lib/prune.c) finds old deleted sandboxes through this one.
CREATE INDEX sandboxes_deleted_idx ON sandboxes (deleted_at) WHERE state = 'deleted';

-- Time-bounded scans of finished execs (dashboards' time ranges).
CREATE INDEX jobs_completed_idx ON jobs (completed_at)
    WHERE kind = 'exec' AND completed_at IS NOT NULL AND started_at IS NOT NULL;
-- The hour bucket of dash_exec_latency_hourly, so a filter on "hour" is an
-- index range scan (the expression must match the view's exactly).
CREATE INDEX jobs_completed_hour_idx
    ON jobs ((date_trunc('hour', completed_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'))
    WHERE kind = 'exec' AND completed_at IS NOT NULL AND started_at IS NOT NULL;
-- ORDER BY duration_seconds DESC LIMIT n on dash_slowest_commands.
CREATE INDEX jobs_duration_idx
    ON jobs ((extract(epoch FROM completed_at - started_at)::float8))
    WHERE kind = 'exec' AND completed_at IS NOT NULL AND started_at IS NOT NULL;
CREATE INDEX jobs_failed_idx ON jobs (completed_at) WHERE status = 'failed';
CREATE INDEX events_sandbox_failed_idx ON events (created_at) WHERE kind = 'sandbox.failed';

-- Sandboxes that exist now (every state but 'deleted'), with what they hold.
CREATE VIEW dash_active_sandboxes AS
SELECT s.tenant_id,
       t.name AS tenant,
       s.image,
       s.state,
       count(*)::integer AS sandboxes,
       sum(s.cpu_millis)::bigint AS cpu_millis,
       sum(s.memory_bytes)::bigint AS memory_bytes,
       min(s.created_at) AS oldest_created_at
FROM sandboxes s
JOIN tenants t ON t.id = s.tenant_id
WHERE s.state <> 'deleted'
GROUP BY s.tenant_id, t.name, s.image, s.state;

-- Every finished exec's run time and hour bucket (a building block of
-- dash_exec_latency_hourly).
CREATE VIEW dash_exec_durations AS
SELECT date_trunc('hour', j.completed_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS hour,
       j.tenant_id,
       j.id AS job_id,
       j.status,
       extract(epoch FROM j.completed_at - j.started_at)::float8 AS seconds
FROM jobs j
WHERE j.kind = 'exec' AND j.completed_at IS NOT NULL AND j.started_at IS NOT NULL;

-- Exec run time percentiles per UTC hour (of completion), per tenant and,
-- in the rows whose tenant_id is NULL, over all tenants (percentiles do not
-- add up, so the total is computed, not summed). A UNION ALL rather than
-- GROUPING SETS, so that a filter on hour reaches jobs_completed_hour_idx.
CREATE VIEW dash_exec_latency_hourly AS
SELECT l.hour,
       l.tenant_id,
       t.name AS tenant,
       l.execs,
       l.failed,
       l.p50_seconds,
       l.p90_seconds,
       l.p99_seconds,
       l.max_seconds
FROM (SELECT d.hour, d.tenant_id,
             count(*)::integer AS execs,
             (count(*) FILTER (WHERE d.status = 'failed'))::integer AS failed,
             percentile_cont(0.5) WITHIN GROUP (ORDER BY d.seconds) AS p50_seconds,
             percentile_cont(0.9) WITHIN GROUP (ORDER BY d.seconds) AS p90_seconds,
             percentile_cont(0.99) WITHIN GROUP (ORDER BY d.seconds) AS p99_seconds,
             max(d.seconds) AS max_seconds
      FROM dash_exec_durations d
      GROUP BY d.hour, d.tenant_id
      UNION ALL
      SELECT d.hour, NULL::bigint,
             count(*)::integer,
             (count(*) FILTER (WHERE d.status = 'failed'))::integer,
             percentile_cont(0.5) WITHIN GROUP (ORDER BY d.seconds),
             percentile_cont(0.9) WITHIN GROUP (ORDER BY d.seconds),
             percentile_cont(0.99) WITHIN GROUP (ORDER BY d.seconds),
             max(d.seconds)
      FROM dash_exec_durations d
      GROUP BY d.hour) l
LEFT JOIN tenants t ON t.id = l.tenant_id;

-- One row per failure: a sandbox that went to 'failed' (its
-- 'sandbox.failed' event outlives a later delete; a failed row without one
-- counts from its own state_message) or a failed exec (its error, else
-- what ended it).
CREATE VIEW dash_failures AS
SELECT f.source, f.tenant_id, t.name AS tenant, f.sandbox_id, f.job_id, f.reason, f.failed_at
FROM (SELECT 'sandbox'::text AS source,
             e.tenant_id,
             e.sandbox_id,
             NULL::text AS job_id,
             coalesce(nullif(e.data ->> 'message', ''), 'unknown') AS reason,
             e.created_at AS failed_at
      FROM events e
      WHERE e.kind = 'sandbox.failed'
      UNION ALL
      SELECT 'sandbox', s.tenant_id, s.id, NULL,
             coalesce(nullif(s.state_message, ''), 'unknown'),
             coalesce(s.ready_at, s.created_at)
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
             j.completed_at
      FROM jobs j
      WHERE j.status = 'failed' AND j.completed_at IS NOT NULL) f
JOIN tenants t ON t.id = f.tenant_id;

-- Failures grouped by what was said: in the last 24 hours and in all that
-- retention kept.
CREATE VIEW dash_failure_reasons AS
SELECT f.source,
       f.tenant_id,
       f.tenant,
       f.reason,
       (count(*) FILTER (WHERE f.failed_at > now() - interval '24 hours'))::integer AS last_24h,
       count(*)::integer AS total,
       max(f.failed_at) AS last_failed_at
FROM dash_failures f
GROUP BY f.source, f.tenant_id, f.tenant, f.reason;

-- Per tenant and UTC day: sandbox-hours (each sandbox's life, created_at
-- to deleted_at or now, split over the days it spans, so a day's figure
-- does not grow after the day), sandboxes created, execs finished and
-- their run time.
CREATE VIEW dash_tenant_usage AS
WITH life AS (
    SELECT s.tenant_id, s.created_at AS t0, greatest(coalesce(s.deleted_at, now()), s.created_at) AS t1
    FROM sandboxes s
), sb AS (
    SELECT l.tenant_id,
           d.day,
           sum(extract(epoch FROM least(l.t1, d.day + interval '24 hours')
                                  - greatest(l.t0, d.day))::float8) / 3600 AS sandbox_hours,
           count(*) FILTER (WHERE l.t0 >= d.day) AS created
    FROM life l
    CROSS JOIN LATERAL generate_series(date_trunc('day', l.t0 AT TIME ZONE 'UTC') AT TIME ZONE 'UTC',
                                       l.t1, interval '24 hours') AS d(day)
    GROUP BY l.tenant_id, d.day
), ex AS (
    SELECT j.tenant_id,
           date_trunc('day', j.completed_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS day,
           count(*) AS execs,
           sum(extract(epoch FROM j.completed_at - j.started_at)::float8) AS exec_seconds
    FROM jobs j
    WHERE j.kind = 'exec' AND j.completed_at IS NOT NULL AND j.started_at IS NOT NULL
    GROUP BY 1, 2
)
SELECT coalesce(sb.tenant_id, ex.tenant_id) AS tenant_id,
       t.name AS tenant,
       coalesce(sb.day, ex.day) AS day,
       coalesce(sb.sandbox_hours, 0)::float8 AS sandbox_hours,
       coalesce(sb.created, 0)::integer AS sandboxes_created,
       coalesce(ex.execs, 0)::integer AS execs,
       coalesce(ex.exec_seconds, 0)::float8 AS exec_seconds
FROM sb
FULL JOIN ex ON ex.tenant_id = sb.tenant_id AND ex.day = sb.day
JOIN tenants t ON t.id = coalesce(sb.tenant_id, ex.tenant_id);

-- Every finished exec with its run time, for "ORDER BY duration_seconds
-- DESC LIMIT n" (jobs_duration_idx). command is the job's command as one
-- line: the string, or the argv joined with spaces.
CREATE VIEW dash_slowest_commands AS
SELECT j.id AS job_id,
       j.sandbox_id,
       j.tenant_id,
       t.name AS tenant,
       s.image,
       CASE jsonb_typeof(j.command)
            WHEN 'string' THEN j.command #>> '{}'
            WHEN 'array' THEN (SELECT string_agg(a, ' ') FROM jsonb_array_elements_text(j.command) AS a)
            ELSE j.command::text END AS command,
       extract(epoch FROM j.completed_at - j.started_at)::float8 AS duration_seconds,
       j.status,
       j.exit_code,
       j.timed_out,
       j.started_at,
       j.completed_at
FROM jobs j
JOIN sandboxes s ON s.id = j.sandbox_id
JOIN tenants t ON t.id = j.tenant_id
WHERE j.kind = 'exec' AND j.completed_at IS NOT NULL AND j.started_at IS NOT NULL;

-- The summaries of `orchard-admin stats`, `orchardctl stats` and
-- GET /v1/stats as one JSON document (its shape: docs/observability.md),
-- built here so every reader prints the same thing. p_tenant_id NULL: all
-- tenants. p_hours bounds latency, failures and slowest commands; p_days
-- the usage; p_top the slowest commands.
CREATE FUNCTION dash_stats(p_tenant_id bigint DEFAULT NULL, p_hours integer DEFAULT 24,
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
                                             'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
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
