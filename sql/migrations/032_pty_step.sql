-- PTY sessions of every_step sandboxes get a step checkpoint when they end
-- (issue 21, docs/checkpoints.md). nginx's post_action after a PTY
-- connection has the api record 'pty.close' (data: open_event_id; api/pty_end.c);
-- the trigger of 022 now fires for it too, so orchard_step_checkpoint()
-- writes the pending checkpoint with step_event_id = the pty.close event,
-- whose trajectory line then carries checkpoint_id. PTY sessions are not
-- steps (orchard_step_kind): the checkpoint's traj_step is the number of
-- steps before it, and a fork at step t prefers the step's own checkpoint
-- (api/checkpoint_step.c).
DROP TRIGGER events_step_checkpoint ON events;
CREATE TRIGGER events_step_checkpoint AFTER INSERT ON events FOR EACH ROW
    WHEN (NEW.kind IN ('exec.finish', 'file.write', 'git.apply', 'git.reset', 'archive.upload',
                       'pty.close'))
    EXECUTE FUNCTION orchard_step_checkpoint();
