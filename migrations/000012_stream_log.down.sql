DROP TABLE stream_log;
