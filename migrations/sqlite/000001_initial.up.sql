-- The schema of store/sqlite, the embedded store. It mirrors migrations/postgres table for
-- table; the differences are SQLite's types:
--   - times are INTEGER unix microseconds, UTC (Postgres timestamptz has the same precision,
--     so a time compares equal after a round trip through either store);
--   - booleans are INTEGER 0 or 1; a job's participants are a JSON array of names in TEXT;
--   - checkpoints.seq is the table's rowid with AUTOINCREMENT, so, like an identity column,
--     it never hands out a number twice, not even after rows are deleted.
-- Foreign keys need PRAGMA foreign_keys = ON, which the store sets on every connection.

-- Jobs are never deleted physically: a deleted job keeps its row (deleted = 1) so that
-- its checkpoint ids (seq) and its participants' epochs are never reused.
CREATE TABLE jobs (
    name                       TEXT PRIMARY KEY,
    participants               TEXT NOT NULL CHECK (json_valid(participants) AND json_type(participants) = 'array'),
    checkpoint_timeout_ms      INTEGER NOT NULL,
    max_concurrent_checkpoints INTEGER NOT NULL,
    auto_commit                INTEGER NOT NULL CHECK (auto_commit IN (0, 1)),
    seq                        INTEGER NOT NULL DEFAULT 0,
    deleted                    INTEGER NOT NULL DEFAULT 0 CHECK (deleted IN (0, 1)),
    created_at                 INTEGER NOT NULL,
    updated_at                 INTEGER NOT NULL
) STRICT;

CREATE TABLE participant_epochs (
    job         TEXT NOT NULL REFERENCES jobs (name),
    participant TEXT NOT NULL,
    epoch       INTEGER NOT NULL CHECK (epoch > 0),
    PRIMARY KEY (job, participant)
) STRICT, WITHOUT ROWID;

CREATE TABLE checkpoints (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    job          TEXT NOT NULL REFERENCES jobs (name),
    id           INTEGER NOT NULL CHECK (id > 0),
    status       TEXT NOT NULL CHECK (status IN ('preparing', 'committing', 'committed', 'aborted')),
    auto_commit  INTEGER NOT NULL CHECK (auto_commit IN (0, 1)),
    created_at   INTEGER NOT NULL,
    deadline     INTEGER NOT NULL,
    decided_at   INTEGER,
    completed_at INTEGER,
    abort_reason TEXT,
    UNIQUE (job, id)
) STRICT;

-- The sweeper's query: preparing checkpoints by deadline.
CREATE INDEX checkpoints_preparing_deadline ON checkpoints (deadline) WHERE status = 'preparing';
-- Operators' list of open checkpoints, oldest first.
CREATE INDEX checkpoints_open_seq ON checkpoints (seq) WHERE status IN ('preparing', 'committing');
-- Per-job lookups by status (preparing set, last committed).
CREATE INDEX checkpoints_job_status ON checkpoints (job, status, id);

CREATE TABLE checkpoint_participants (
    job           TEXT NOT NULL,
    checkpoint_id INTEGER NOT NULL,
    position      INTEGER NOT NULL,
    participant   TEXT NOT NULL,
    epoch         INTEGER,
    vote          TEXT CHECK (vote IN ('prepared', 'abort')),
    reason        TEXT,
    -- The committables as sent, compacted JSON text, kept byte for byte.
    committables  TEXT,
    voted_at      INTEGER,
    acked_at      INTEGER,
    PRIMARY KEY (job, checkpoint_id, participant),
    FOREIGN KEY (job, checkpoint_id) REFERENCES checkpoints (job, id) ON DELETE CASCADE
) STRICT, WITHOUT ROWID;

-- What participants still owe: pending lists and the busy check of DELETE.
CREATE INDEX checkpoint_participants_unacked
    ON checkpoint_participants (job, participant, checkpoint_id) WHERE acked_at IS NULL;

CREATE TABLE idempotency_keys (
    job           TEXT NOT NULL,
    key           TEXT NOT NULL,
    fingerprint   TEXT NOT NULL,
    checkpoint_id INTEGER NOT NULL,
    PRIMARY KEY (job, key),
    FOREIGN KEY (job, checkpoint_id) REFERENCES checkpoints (job, id) ON DELETE CASCADE
) STRICT, WITHOUT ROWID;
