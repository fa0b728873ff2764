// Package migrations holds the schema of each store as SQL files, embedded in the binary and
// applied with golang-migrate.
package migrations

import "embed"

// Postgres is the schema of store/postgres.
//
//go:embed postgres/*.sql
var Postgres embed.FS

// SQLite is the schema of store/sqlite, the embedded store.
//
//go:embed sqlite/*.sql
var SQLite embed.FS
