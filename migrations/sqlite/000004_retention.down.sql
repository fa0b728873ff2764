DROP INDEX checkpoints_job_final_completed;
ALTER TABLE jobs DROP COLUMN retention_ms;
