-- CPU per exec (issue 23, bench/README.md "CPU per exec"): orchard_job is
-- sent only when a job ends (its status becomes succeeded or failed), not
-- on its insert and every other status change. Every waiter on the
-- channel waits for the end and nothing else: the api's job waits
-- (api/jobs.c: GET /jobs/{id}/wait, exec's wait, cancel's wait, replay)
-- and its output readers (api/job_output.c, which also wake on
-- orchard_job_output); nobody else LISTENs on it (the controller listens
-- on orchard_sandbox and orchard_checkpoint). A fast exec used to send
-- two (its insert as running, its end) and each woke every listening
-- connection.
--
-- The trigger's WHEN clauses keep plpgsql out of every other write of a
-- job row (a claim, a lease renewal, the insert): the function runs only
-- for a job that ends. orchard_lane is unchanged (when a queued or running
-- job ends).

DROP TRIGGER jobs_notify ON jobs;

CREATE OR REPLACE FUNCTION orchard_notify_job() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('orchard_job', NEW.id);
    IF TG_OP = 'UPDATE' AND OLD.status IN ('queued', 'running') THEN
        PERFORM pg_notify('orchard_lane', NEW.sandbox_id);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_notify_insert AFTER INSERT ON jobs FOR EACH ROW
    WHEN (NEW.status IN ('succeeded', 'failed'))
    EXECUTE FUNCTION orchard_notify_job();
CREATE TRIGGER jobs_notify_end AFTER UPDATE ON jobs FOR EACH ROW
    WHEN (NEW.status IN ('succeeded', 'failed') AND NEW.status IS DISTINCT FROM OLD.status)
    EXECUTE FUNCTION orchard_notify_job();
