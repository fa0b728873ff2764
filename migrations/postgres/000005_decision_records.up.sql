-- Why a checkpoint was decided, and who acked each participant's part (the participant, or
-- the operator who settled it). Nullable columns: no row is rewritten.
ALTER TABLE checkpoints ADD COLUMN decision_cause text;
ALTER TABLE checkpoint_participants ADD COLUMN acked_by text;

-- Actions taken by request rather than by the protocol: jobs created, updated and deleted;
-- checkpoints committed, aborted or completed by request; tokens created and revoked. Read
-- newest first, by job or not.
CREATE TABLE audit (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL,
    action     text NOT NULL,
    job        text,
    checkpoint bigint,
    token      text,
    subject    text,
    reason     text,
    request_id text
);
CREATE INDEX audit_job ON audit (job, id);
