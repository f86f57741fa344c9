-- The request ids of a session's newest runs, for an actor that opens the session
-- (SessionOpen): knowing them all, it tells a repeated chat.send from a new one without
-- a statement, and lets only a start the database cannot refuse call the model before
-- the start is stored. VOLATILE for the reason of session_position_max (000010): called
-- after the lease's lock, it must see the runs the previous holder stored meanwhile.
CREATE FUNCTION session_request_ids(session_id uuid, most integer) RETURNS text[]
    LANGUAGE sql VOLATILE
    AS $$
        SELECT COALESCE(array_agg(r.request_id), '{}')
        FROM (SELECT request_id FROM runs WHERE runs.session_id = $1 ORDER BY started_at DESC, id DESC LIMIT $2) r
    $$;
