-- Every status change of a checkpoint, recorded in the transaction that made it, for the
-- event streams. One process writes, one transaction at a time, so tx (the row's id)
-- grows in the order the changes committed. rank orders one checkpoint's changes.
CREATE TABLE checkpoint_events (
    tx         INTEGER PRIMARY KEY AUTOINCREMENT,
    job        TEXT    NOT NULL,
    checkpoint INTEGER NOT NULL,
    rank       INTEGER NOT NULL,
    status     TEXT    NOT NULL,
    at         INTEGER NOT NULL
) STRICT;
CREATE INDEX checkpoint_events_by_job ON checkpoint_events (job, tx);

-- The position of the last status change retention deleted (see the PostgreSQL schema).
CREATE TABLE checkpoint_events_horizon (
    one        INTEGER PRIMARY KEY CHECK (one = 1),
    tx         INTEGER NOT NULL,
    job        TEXT    NOT NULL,
    checkpoint INTEGER NOT NULL,
    rank       INTEGER NOT NULL
) STRICT;
