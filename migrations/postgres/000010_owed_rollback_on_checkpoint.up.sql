-- What is owed is found from the checkpoints instead of from an index of unacked
-- participants. That index's predicate (acked_at IS NULL) named the column an ack sets, so
-- that no ack could be a HOT update: each one wrote a new index entry and a new row version
-- wherever it found room. The checkpoints' status already tells which of them owe
-- something (preparing: votes; committing: acks of the commit); an aborted checkpoint owes
-- rollbacks while a participant that voted prepared has not acked the abort, which
-- owes_rollback now records, kept by the statements that abort a checkpoint or ack one.
-- A checkpoint's status changes are never HOT updates anyway (status is in indexes).
ALTER TABLE checkpoints ADD COLUMN owes_rollback boolean NOT NULL DEFAULT false;

UPDATE checkpoints c SET owes_rollback = true
FROM (SELECT DISTINCT job, checkpoint_id FROM checkpoint_participants
      WHERE acked_at IS NULL AND vote = 'prepared') u
WHERE c.job = u.job AND c.id = u.checkpoint_id AND c.status = 'aborted';

-- The checkpoints on which something is owed, per job: pending lists and what the caches
-- must hold are read through it.
CREATE INDEX checkpoints_job_owed ON checkpoints (job, id)
    WHERE status IN ('preparing', 'committing') OR owes_rollback;

DROP INDEX checkpoint_participants_unacked;
