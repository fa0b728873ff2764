ALTER TABLE checkpoint_participants RESET (fillfactor);
CREATE INDEX checkpoints_job_status ON checkpoints (job, status, id);
DROP INDEX checkpoints_job_preparing;
