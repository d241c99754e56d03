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
