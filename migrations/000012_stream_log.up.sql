-- The stream log: a bounded recovery record of the text a run is streaming right now
-- (the open assistant segment's text, a running tool's output), which the transcript
-- rows get only when the segment closes. Each node writes the new text of all its
-- sessions in one statement per CHATD_STREAM_SYNC interval, as chunks that follow each
-- other by byte offset, and deletes a message's chunks once its final text is stored.
-- After a crash the process (or node) that takes the run up continues it from here:
-- at most one interval of text is lost, not the whole segment.
--
-- No foreign key: a chunk may come before its message's row is stored (rows are written
-- behind the stream), and the table is written at every interval. Chunks that outlive
-- their message (a session deleted, a row never stored) are collected by logged_at.
CREATE TABLE stream_log (
    message_id uuid NOT NULL,
    start_offset integer NOT NULL, -- in bytes of the message's text
    text text NOT NULL,
    logged_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (message_id, start_offset)
);
