-- Access control, as in migrations/postgres/000004_tokens.up.sql: a token is kept as the
-- SHA-256 digest of its secret, never the secret; scopes are a JSON array of names.
CREATE TABLE tokens (
    name        TEXT PRIMARY KEY,
    digest      BLOB NOT NULL UNIQUE CHECK (length(digest) = 32),
    scopes      TEXT NOT NULL CHECK (json_valid(scopes) AND json_type(scopes) = 'array' AND json_array_length(scopes) > 0),
    job         TEXT NOT NULL,
    participant TEXT,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER
) STRICT;

CREATE TABLE token_version (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL
) STRICT;
INSERT INTO token_version (id, version) VALUES (1, 0);

ALTER TABLE checkpoints ADD COLUMN decided_by TEXT;
