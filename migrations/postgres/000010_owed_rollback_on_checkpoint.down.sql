CREATE INDEX checkpoint_participants_unacked
    ON checkpoint_participants (job, participant, checkpoint_id) WHERE acked_at IS NULL;
DROP INDEX checkpoints_job_owed;
ALTER TABLE checkpoints DROP COLUMN owes_rollback;
