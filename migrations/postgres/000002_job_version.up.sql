-- Every update of a job bumps its version while it takes the job's row lock, so that the
-- statement taking the lock can tell whether what it read of the job's checkpoints and
-- epochs is current (nobody changed them between its snapshot and its lock), and read
-- them in the same statement.
ALTER TABLE jobs ADD COLUMN version bigint NOT NULL DEFAULT 0;
