-- As migrations/postgres/000011_last_checkpoint_kept.up.sql.
ALTER TABLE jobs ADD COLUMN created_seq INTEGER NOT NULL DEFAULT 0;
UPDATE jobs SET created_seq = seq
WHERE NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.job = jobs.name);
