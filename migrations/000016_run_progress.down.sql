ALTER TABLE runs DROP COLUMN progress_label;
ALTER TABLE runs DROP COLUMN progress_of;
ALTER TABLE runs DROP COLUMN progress_step;
