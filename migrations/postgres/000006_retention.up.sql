-- Retention: how long a job keeps its final checkpoints that owe nothing (0: for ever).
-- A constant default adds the column without rewriting the table.
ALTER TABLE jobs ADD COLUMN retention_ms bigint NOT NULL DEFAULT 604800000;

-- What retention looks for, job by job, oldest completion first: final checkpoints only,
-- so that finding what expired walks the expired rows and no other history.
CREATE INDEX checkpoints_job_final_completed ON checkpoints (job, completed_at) WHERE status IN ('committed', 'aborted');
