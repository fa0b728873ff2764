ALTER TABLE checkpoint_participants ADD CONSTRAINT checkpoint_participants_job_checkpoint_id_fkey
    FOREIGN KEY (job, checkpoint_id) REFERENCES checkpoints (job, id) ON DELETE CASCADE;
ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_job_checkpoint_id_fkey
    FOREIGN KEY (job, checkpoint_id) REFERENCES checkpoints (job, id) ON DELETE CASCADE;
