-- Whether the sandbox gets the sandbox-tools bundle (docs/sandbox-tools.md):
-- `"tools": false` on create turns it off for that sandbox; the controller's
-- ORCHARD_SANDBOX_TOOLS=off turns it off for all.
ALTER TABLE sandboxes ADD COLUMN tools boolean NOT NULL DEFAULT true;
