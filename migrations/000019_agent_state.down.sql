ALTER TABLE runs DROP COLUMN agent_state;
