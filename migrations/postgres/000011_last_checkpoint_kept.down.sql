ALTER TABLE jobs DROP COLUMN created_seq;
