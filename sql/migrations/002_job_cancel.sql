-- Job cancellation (POST /jobs/{id}/cancel): when a running job is asked to
-- stop, the api records the request here before it asks the agent to kill
-- the command, so the stored result says "cancelled" rather than only
-- "killed by signal 9".
ALTER TABLE jobs ADD COLUMN cancel_requested_at timestamptz;
