DROP FUNCTION session_request_ids(uuid, integer);
