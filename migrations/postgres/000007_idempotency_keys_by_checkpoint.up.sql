-- Deleting a checkpoint deletes its Idempotency-Key (ON DELETE CASCADE): this index finds it
-- at once, instead of among every key of the job.
CREATE INDEX idempotency_keys_checkpoint ON idempotency_keys (job, checkpoint_id);
