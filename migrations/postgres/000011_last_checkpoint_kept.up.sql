-- A job's last_checkpoint is the highest id issued since it was created, whatever
-- retention deleted: jobs.seq (the highest id ever issued under the name) once a
-- checkpoint was opened since the job was created, which created_seq (seq when it was
-- created, or created again after a deletion) tells.
ALTER TABLE jobs ADD COLUMN created_seq bigint NOT NULL DEFAULT 0;

-- A job with no checkpoint showed none before: it keeps showing none until it opens one.
UPDATE jobs j SET created_seq = j.seq
WHERE NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.job = j.name);
