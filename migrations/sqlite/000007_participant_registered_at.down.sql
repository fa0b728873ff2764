ALTER TABLE participant_epochs DROP COLUMN registered_at;
