-- Jobs are never deleted physically: a deleted job keeps its row (deleted = true) so that
-- its checkpoint ids (seq) and its participants' epochs are never reused.
CREATE TABLE jobs (
    name                       text PRIMARY KEY,
    participants               text[] NOT NULL,
    checkpoint_timeout_ms      bigint NOT NULL,
    max_concurrent_checkpoints integer NOT NULL,
    auto_commit                boolean NOT NULL,
    seq                        bigint NOT NULL DEFAULT 0,
    deleted                    boolean NOT NULL DEFAULT false,
    created_at                 timestamptz NOT NULL,
    updated_at                 timestamptz NOT NULL
);

CREATE TABLE participant_epochs (
    job         text NOT NULL REFERENCES jobs (name),
    participant text NOT NULL,
    epoch       bigint NOT NULL CHECK (epoch > 0),
    PRIMARY KEY (job, participant)
);

CREATE TABLE checkpoints (
    job          text NOT NULL REFERENCES jobs (name),
    id           bigint NOT NULL CHECK (id > 0),
    seq          bigint GENERATED ALWAYS AS IDENTITY,
    status       text NOT NULL CHECK (status IN ('preparing', 'committing', 'committed', 'aborted')),
    auto_commit  boolean NOT NULL,
    created_at   timestamptz NOT NULL,
    deadline     timestamptz NOT NULL,
    decided_at   timestamptz,
    completed_at timestamptz,
    abort_reason text,
    PRIMARY KEY (job, id)
);

CREATE UNIQUE INDEX checkpoints_seq ON checkpoints (seq);
-- The sweeper's query: preparing checkpoints by deadline.
CREATE INDEX checkpoints_preparing_deadline ON checkpoints (deadline) WHERE status = 'preparing';
-- Operators' list of open checkpoints, oldest first.
CREATE INDEX checkpoints_open_seq ON checkpoints (seq) WHERE status IN ('preparing', 'committing');
-- Per-job lookups by status (preparing set, last committed).
CREATE INDEX checkpoints_job_status ON checkpoints (job, status, id);

CREATE TABLE checkpoint_participants (
    job           text NOT NULL,
    checkpoint_id bigint NOT NULL,
    position      integer NOT NULL,
    participant   text NOT NULL,
    epoch         bigint,
    vote          text CHECK (vote IN ('prepared', 'abort')),
    reason        text,
    -- The committables as sent, compacted JSON text: json/jsonb would not keep them byte
    -- for byte (jsonb reorders keys).
    committables  text,
    voted_at      timestamptz,
    acked_at      timestamptz,
    PRIMARY KEY (job, checkpoint_id, participant),
    FOREIGN KEY (job, checkpoint_id) REFERENCES checkpoints (job, id) ON DELETE CASCADE
);

-- What participants still owe: pending lists and the busy check of DELETE.
CREATE INDEX checkpoint_participants_unacked
    ON checkpoint_participants (job, participant, checkpoint_id) WHERE acked_at IS NULL;

CREATE TABLE idempotency_keys (
    job           text NOT NULL,
    key           text NOT NULL,
    fingerprint   text NOT NULL,
    checkpoint_id bigint NOT NULL,
    PRIMARY KEY (job, key),
    FOREIGN KEY (job, checkpoint_id) REFERENCES checkpoints (job, id) ON DELETE CASCADE
);
