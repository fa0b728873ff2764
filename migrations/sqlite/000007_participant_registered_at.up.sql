-- When each participant last registered (microseconds since the epoch), for
-- GET /v1/jobs/{job}/participants; null for registrations made before this column existed.
ALTER TABLE participant_epochs ADD COLUMN registered_at INTEGER;
