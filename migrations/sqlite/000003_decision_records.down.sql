DROP TABLE audit;
ALTER TABLE checkpoint_participants DROP COLUMN acked_by;
ALTER TABLE checkpoints DROP COLUMN decision_cause;
