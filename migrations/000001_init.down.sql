DROP TABLE messages;
DROP TABLE runs;
DROP TABLE sessions;
