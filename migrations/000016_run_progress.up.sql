-- A long run's progress as its agent or a tool last reported it ("3 of 7 pages"):
-- progress_of 0 is none. Stored write-behind with the run (coalesced, and at its end or
-- suspension), so a continued run keeps its last progress and the conversation list
-- shows it.
ALTER TABLE runs ADD COLUMN progress_step integer NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN progress_of integer NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN progress_label text NOT NULL DEFAULT '';
