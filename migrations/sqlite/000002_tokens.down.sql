ALTER TABLE checkpoints DROP COLUMN decided_by;
DROP TABLE token_version;
DROP TABLE tokens;
