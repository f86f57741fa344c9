-- The state an agent reported during a run (AG-UI's STATE_SNAPSHOT and STATE_DELTA), as
-- it stood last: NULL when the run reported none. The session's latest state is its
-- newest run's that has one, and is given back to the agent on its next request, on any
-- node, after any restart. Stored write-behind with the run, like its progress.
ALTER TABLE runs ADD COLUMN agent_state jsonb;
