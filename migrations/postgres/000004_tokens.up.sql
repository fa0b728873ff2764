-- Access control. A token is kept as the SHA-256 digest of its secret, never the secret.
-- Every coordinator on the database keeps the tokens in memory and reads them again when
-- token_version.version has grown, which every change of tokens does in its transaction.
CREATE TABLE tokens (
    name        text PRIMARY KEY,
    digest      bytea NOT NULL UNIQUE CHECK (length(digest) = 32),
    scopes      text[] NOT NULL CHECK (cardinality(scopes) > 0),
    job         text NOT NULL,
    participant text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz
);

CREATE TABLE token_version (
    id      int PRIMARY KEY CHECK (id = 1),
    version bigint NOT NULL
);
INSERT INTO token_version (id, version) VALUES (1, 0);

-- The name of the token whose request decided the checkpoint (NULL: none did, as for a
-- deadline or without authentication). Adding a nullable column rewrites no rows.
ALTER TABLE checkpoints ADD COLUMN decided_by text;
