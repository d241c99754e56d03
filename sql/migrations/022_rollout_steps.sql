-- Rollout trees (issue 21, docs/checkpoints.md): checkpoints located by
-- trajectory step, so a sandbox can be forked "as it was after step t",
-- also after it was deleted.
--
-- A trajectory's steps are its events of the kinds below, numbered from 1
-- in event order (docs/trajectory.md); this function is the one copy of
-- that list on the database side.
CREATE FUNCTION orchard_step_kind(kind text) RETURNS boolean
    IMMUTABLE LANGUAGE sql AS $$
    SELECT kind IN ('exec.accept', 'file.write', 'git.apply', 'git.reset', 'archive.upload')
$$;

-- traj_step: how many steps the sandbox's trajectory had when the
-- checkpoint was written (0: before the first step). Set on insert.
ALTER TABLE checkpoints ADD COLUMN traj_step bigint;

UPDATE checkpoints c SET traj_step = (
    SELECT count(*) FROM (SELECT e.kind FROM events e WHERE e.sandbox_id = c.sandbox_id
                          AND e.tenant_id = c.tenant_id ORDER BY e.id LIMIT c.step) x
    WHERE orchard_step_kind(x.kind));

CREATE FUNCTION orchard_checkpoint_traj_step() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.traj_step IS NULL THEN
        SELECT count(*) INTO NEW.traj_step FROM events e
         WHERE e.sandbox_id = NEW.sandbox_id AND e.tenant_id = NEW.tenant_id
           AND orchard_step_kind(e.kind);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER checkpoints_traj_step BEFORE INSERT ON checkpoints
    FOR EACH ROW EXECUTE FUNCTION orchard_checkpoint_traj_step();

CREATE INDEX checkpoints_sandbox_step_idx ON checkpoints (sandbox_id, traj_step);

-- Per-step checkpoints. A sandbox whose policy is 'every_step' gets a
-- checkpoint (kind 'step') after every state-changing step: written here,
-- in the transaction that records the step's end (exec.finish for an exec,
-- the event itself for the others), and taken by the controller like any
-- pending checkpoint. NULL policy: the tenant's default, else 'none'.
-- checkpoint_keep / checkpoint_ttl_seconds: retention of the sandbox's
-- step checkpoints (the api writes its configured defaults on create).
ALTER TABLE sandboxes ADD COLUMN checkpoints text
    CHECK (checkpoints IS NULL OR checkpoints IN ('none', 'every_step'));
ALTER TABLE sandboxes ADD COLUMN checkpoint_keep integer
    CHECK (checkpoint_keep IS NULL OR checkpoint_keep >= 1);
ALTER TABLE sandboxes ADD COLUMN checkpoint_ttl_seconds integer
    CHECK (checkpoint_ttl_seconds IS NULL OR checkpoint_ttl_seconds >= 1);
ALTER TABLE tenants ADD COLUMN default_checkpoints text
    CHECK (default_checkpoints IS NULL OR default_checkpoints IN ('none', 'every_step'));

-- The step event a step checkpoint belongs to (an exec's exec.accept), so
-- the trajectory line of the step can name it.
ALTER TABLE checkpoints ADD COLUMN step_event_id bigint;
CREATE INDEX checkpoints_step_event_idx ON checkpoints (step_event_id)
    WHERE step_event_id IS NOT NULL;

CREATE FUNCTION orchard_step_checkpoint() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    s record;
    ev bigint;
BEGIN
    SELECT sb.*, COALESCE(sb.checkpoints, t.default_checkpoints, 'none') AS mode,
           COALESCE(sb.checkpoint_keep, 100) AS keep, t.max_checkpoints AS tmax,
           t.max_checkpoint_bytes AS tbytes INTO s
      FROM sandboxes sb JOIN tenants t ON t.id = sb.tenant_id
     WHERE sb.id = NEW.sandbox_id AND sb.tenant_id = NEW.tenant_id;
    IF NOT FOUND OR s.mode <> 'every_step' OR s.state <> 'ready' THEN
        RETURN NULL;
    END IF;
    IF NEW.kind = 'exec.finish' THEN
        SELECT e.id INTO ev FROM events e WHERE e.sandbox_id = NEW.sandbox_id
           AND e.job_id = NEW.job_id AND e.kind = 'exec.accept' ORDER BY e.id LIMIT 1;
        IF ev IS NULL THEN
            RETURN NULL;
        END IF;
    ELSE
        ev := NEW.id;
    END IF;
    -- Retention first: keep - 1 older ones stay, beside the new one.
    UPDATE checkpoints SET state = 'deleting', state_message = 'expired', deleted_at = now()
     WHERE sandbox_id = NEW.sandbox_id AND kind = 'step' AND state = 'ready'
       AND id NOT IN (SELECT c.id FROM checkpoints c WHERE c.sandbox_id = NEW.sandbox_id
                       AND c.kind = 'step' AND c.state IN ('pending', 'ready')
                       ORDER BY c.traj_step DESC, c.created_at DESC LIMIT s.keep - 1);
    -- The tenant's quotas: no step checkpoint rather than a failed step.
    IF (s.tmax IS NOT NULL AND (SELECT count(*) FROM checkpoints c WHERE c.tenant_id = s.tenant_id
                                AND c.state IN ('pending', 'ready')) >= s.tmax)
       OR (s.tbytes IS NOT NULL AND (SELECT COALESCE(sum(c.bytes), 0) FROM checkpoints c
                                     WHERE c.tenant_id = s.tenant_id
                                     AND c.state IN ('pending', 'ready')) >= s.tbytes) THEN
        RETURN NULL;
    END IF;
    INSERT INTO checkpoints (id, tenant_id, sandbox_id, driver, image, cpu, memory, cpu_millis,
                             memory_bytes, block_network, env, workdir, sandbox_labels, kind,
                             step, traj_step, step_event_id, expires_at)
    VALUES ('ck' || substr(md5(random()::text || clock_timestamp()::text), 1, 12), s.tenant_id,
            s.id, s.driver, s.image, s.cpu, s.memory, s.cpu_millis, s.memory_bytes,
            s.block_network, s.env, s.workdir, s.labels, 'step',
            (SELECT count(*) FROM events e WHERE e.sandbox_id = s.id AND e.tenant_id = s.tenant_id),
            (SELECT count(*) FROM events e WHERE e.sandbox_id = s.id AND e.tenant_id = s.tenant_id
              AND e.id <= ev AND orchard_step_kind(e.kind)),
            ev, now() + make_interval(secs => s.checkpoint_ttl_seconds));
    RETURN NULL;
END $$;
CREATE TRIGGER events_step_checkpoint AFTER INSERT ON events FOR EACH ROW
    WHEN (NEW.kind IN ('exec.finish', 'file.write', 'git.apply', 'git.reset', 'archive.upload'))
    EXECUTE FUNCTION orchard_step_checkpoint();
CREATE INDEX checkpoints_step_pending_idx ON checkpoints (sandbox_id)
    WHERE state = 'pending' AND kind = 'step';
