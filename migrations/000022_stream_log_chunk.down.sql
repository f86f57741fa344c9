DROP TYPE stream_log_chunk;
