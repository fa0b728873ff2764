package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twophase/coordinator/coordinator"
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

// A schema of its own: with search_path in the database URL, the migrations and every
// statement of the store use that schema, and leave public alone.
func TestSchemaFromSearchPath(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, stmt := range []string{"DROP SCHEMA public CASCADE", "CREATE SCHEMA public", "CREATE SCHEMA coordinator"} {
		if _, err := conn.Exec(t.Context(), stmt); err != nil {
			t.Fatal(err)
		}
	}
	own := url + "&search_path=coordinator"
	if err := postgres.MigrateUp(own); err != nil {
		t.Fatal(err)
	}
	st, err := postgres.Open(t.Context(), own, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	svc := coordinator.NewService(st, nil)
	epochs := setUpJob(t, svc, time.Minute)
	cp, _, err := svc.Prepare(t.Context(), "j", coordinator.PrepareRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for p, e := range epochs {
		if _, err := svc.Vote(t.Context(), "j", cp.ID, p, coordinator.Vote{Epoch: e, Kind: coordinator.VotePrepared}); err != nil {
			t.Fatal(err)
		}
	}
	tables := func(schema string) int {
		var n int
		if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_tables WHERE schemaname = $1", schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := tables("public"); n != 0 {
		t.Errorf("%d table(s) in public, want none", n)
	}
	var committing int
	if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM coordinator.checkpoints WHERE status = 'committing'").Scan(&committing); err != nil || committing != 1 {
		t.Fatalf("coordinator.checkpoints: %d committing, %v; want the round's one", committing, err)
	}
	if v, _, err := postgres.MigrationVersion(own); err != nil || v != postgres.SchemaVersion {
		t.Fatalf("MigrationVersion in the schema = %d, %v", v, err)
	}
}
