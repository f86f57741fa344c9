-- A chunk of the stream log as a node sends it (store.StreamLogSync): one array of these
-- in the binary format is one parameter, where five arrays of columns were five. The
-- client then builds the statement's message in one allocation instead of regrowing it
-- for each parameter, which was the largest allocation left per streamed token at
-- thousands of streaming sessions.
CREATE TYPE stream_log_chunk AS (
    message_id uuid,
    start_offset integer,
    text text,
    session_id uuid,
    fence bigint -- the session's lease token the chunk was streamed under; 0: none
);
