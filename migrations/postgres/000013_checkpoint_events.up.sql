-- Every status change of a checkpoint, recorded in the transaction that made it, for the
-- event streams: tx is that transaction's id (64 bits), so that a reader can tell which
-- changes no transaction still running can precede (tx below the oldest transaction of the
-- database still running). rank orders one checkpoint's changes within a transaction.
CREATE TABLE checkpoint_events (
	tx         bigint      NOT NULL DEFAULT (pg_current_xact_id()::text::bigint),
	job        text        NOT NULL,
	checkpoint bigint      NOT NULL,
	rank       smallint    NOT NULL,
	status     text        NOT NULL,
	at         timestamptz NOT NULL,
	PRIMARY KEY (tx, job, checkpoint, rank)
);
-- No index by job: a job's stream reads from the process's ring, and the store only to
-- catch up after a reconnect, through the primary key from its position on. Each index is
-- paid by every status change.

-- The position of the last status change retention deleted: a stream asking for a
-- position before it is told to start again (reset).
CREATE TABLE checkpoint_events_horizon (
	one        boolean  PRIMARY KEY DEFAULT true CHECK (one),
	tx         bigint   NOT NULL,
	job        text     NOT NULL,
	checkpoint bigint   NOT NULL,
	rank       smallint NOT NULL
);
