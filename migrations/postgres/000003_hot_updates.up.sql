-- Fewer index entries per round. A status change cannot be a HOT update (status is in
-- indexes), so every index of checkpoints gets an entry for it: the per-job index now
-- holds only preparing checkpoints (the preparing set), which a decision leaves, instead
-- of every checkpoint with its status. Per-job lookups of other statuses (the last
-- committed, lists filtered by status) walk the primary key from the newest down.
CREATE INDEX checkpoints_job_preparing ON checkpoints (job, id) WHERE status = 'preparing';
DROP INDEX checkpoints_job_status;

-- Room in each page for a vote's new row version next to the old one (a HOT update, no
-- index entry). Applies to pages written from now on.
ALTER TABLE checkpoint_participants SET (fillfactor = 80);
