package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/twophase/coordinator/store/pgtest"
	"github.com/twophase/coordinator/store/postgres"
)

// MigrationVersion only reads: on a database never migrated it answers 0 and creates
// nothing (golang-migrate's own Version creates its table); on a migrated one it answers
// the schema's version.
func TestMigrationVersionChangesNothing(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	if v, dirty, err := postgres.MigrationVersion(url); err != nil || dirty || v != postgres.SchemaVersion {
		t.Fatalf("MigrationVersion of a migrated database = %d, %v, %v; want %d", v, dirty, err, postgres.SchemaVersion)
	}
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), "CREATE SCHEMA never_migrated"); err != nil {
		t.Fatal(err)
	}
	fresh := url + "&search_path=never_migrated"
	if v, dirty, err := postgres.MigrationVersion(fresh); err != nil || dirty || v != 0 {
		t.Fatalf("MigrationVersion of a schema never migrated = %d, %v, %v; want 0", v, dirty, err)
	}
	var tables int
	if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_tables WHERE schemaname = 'never_migrated'").Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Fatalf("MigrationVersion created %d table(s) in a schema never migrated", tables)
	}
}
