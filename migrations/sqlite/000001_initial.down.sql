DROP TABLE idempotency_keys;
DROP TABLE checkpoint_participants;
DROP TABLE checkpoints;
DROP TABLE participant_epochs;
DROP TABLE jobs;
