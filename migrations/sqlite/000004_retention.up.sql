-- As migrations/postgres/000006_retention.up.sql.
ALTER TABLE jobs ADD COLUMN retention_ms INTEGER NOT NULL DEFAULT 604800000;
CREATE INDEX checkpoints_job_final_completed ON checkpoints (job, completed_at) WHERE status IN ('committed', 'aborted');
