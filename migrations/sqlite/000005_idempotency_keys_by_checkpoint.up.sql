-- As migrations/postgres/000007_idempotency_keys_by_checkpoint.up.sql.
CREATE INDEX idempotency_keys_checkpoint ON idempotency_keys (job, checkpoint_id);
