-- Deleting a tenant (DELETE /v1/tenants/{name}, docs/openapi.yaml): the row
-- stays, because its sandboxes, jobs, events and checkpoints keep pointing
-- at it until retention prunes them, and is marked deleted_at. A deleted
-- tenant is not listed, cannot be changed, gets no keys and no sandboxes,
-- and its name is not given out again.
ALTER TABLE tenants ADD COLUMN deleted_at timestamptz;

-- No sandbox for a deleted tenant, even one whose create raced the delete:
-- FOR KEY SHARE waits for the delete's FOR UPDATE and then reads the row
-- it committed.
CREATE FUNCTION orchard_sandbox_tenant_alive() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM tenants WHERE id = NEW.tenant_id AND deleted_at IS NULL FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'tenant % is deleted', NEW.tenant_id USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER sandboxes_tenant_alive BEFORE INSERT ON sandboxes
    FOR EACH ROW EXECUTE FUNCTION orchard_sandbox_tenant_alive();
