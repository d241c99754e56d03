-- Per-sandbox disk limits (issue 19, item 3; docs/controller.md, "Disk").
-- disk is the request's text ("2Gi"), disk_bytes its value; NULL on rows
-- made before this migration (no limit). The local driver enforces
-- disk_bytes with a btrfs qgroup on the sandbox's subvolume.
ALTER TABLE sandboxes ADD COLUMN disk text,
                      ADD COLUMN disk_bytes bigint CHECK (disk_bytes > 0);

-- A checkpoint keeps its sandbox's limit, so that its forks do too. Both
-- writers of checkpoints (api/checkpoints.c and orchard_step_checkpoint()
-- of 022) leave it to this trigger.
ALTER TABLE checkpoints ADD COLUMN disk text,
                        ADD COLUMN disk_bytes bigint CHECK (disk_bytes > 0);

CREATE FUNCTION orchard_checkpoint_disk() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    SELECT s.disk, s.disk_bytes INTO NEW.disk, NEW.disk_bytes
      FROM sandboxes s WHERE s.id = NEW.sandbox_id AND s.tenant_id = NEW.tenant_id;
    RETURN NEW;
END $$;

CREATE TRIGGER checkpoints_disk BEFORE INSERT ON checkpoints FOR EACH ROW
    WHEN (NEW.disk_bytes IS NULL) EXECUTE FUNCTION orchard_checkpoint_disk();
