-- As migrations/postgres/000005_decision_records.up.sql: why a checkpoint was decided, who
-- acked each participant's part, and the audit of actions taken by request.
ALTER TABLE checkpoints ADD COLUMN decision_cause TEXT;
ALTER TABLE checkpoint_participants ADD COLUMN acked_by TEXT;

CREATE TABLE audit (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    at         INTEGER NOT NULL,
    action     TEXT NOT NULL,
    job        TEXT,
    checkpoint INTEGER,
    token      TEXT,
    subject    TEXT,
    reason     TEXT,
    request_id TEXT
) STRICT;
CREATE INDEX audit_job ON audit (job, id);
