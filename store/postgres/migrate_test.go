package postgres_test

import (
	"context"
	"io/fs"
	neturl "net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/migrations"
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

// Upgrading a database that has an aborted checkpoint whose prepared vote is not acked
// yet: the migration that moves what is owed onto the checkpoints marks it, so that its
// participant is still told to roll back; aborted checkpoints with every prepared vote
// acked, and committed ones, owe nothing.
func TestMigrationKeepsRollbacksOwed(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.URL(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var downs []string
	for _, name := range []string{"000013_checkpoint_events", "000012_participant_registered_at", "000011_last_checkpoint_kept", "000010_owed_rollback_on_checkpoint"} {
		down, err := fs.ReadFile(migrations.Postgres, "postgres/"+name+".down.sql")
		if err != nil {
			t.Fatal(err)
		}
		downs = append(downs, string(down))
	}
	for _, stmt := range []string{
		downs[0], downs[1], downs[2], downs[3],
		"UPDATE schema_migrations SET version = 9, dirty = false",
		`INSERT INTO jobs (name, participants, checkpoint_timeout_ms, max_concurrent_checkpoints, auto_commit, created_at, updated_at, seq)
		 VALUES ('j', '{pa,pb}', 60000, 1, true, now(), now(), 3)`,
		// A job created again after a deletion, with no checkpoint since: it shows none.
		`INSERT INTO jobs (name, participants, checkpoint_timeout_ms, max_concurrent_checkpoints, auto_commit, created_at, updated_at, seq)
		 VALUES ('k', '{pa}', 60000, 1, true, now(), now(), 5)`,
		`INSERT INTO participant_epochs (job, participant, epoch) VALUES ('j', 'pa', 1), ('j', 'pb', 1)`,
		// 1: aborted, pa's prepared vote unacked; 2: aborted, pa's acked; 3: committed.
		`INSERT INTO checkpoints (job, id, status, auto_commit, created_at, deadline, decided_at, completed_at)
		 SELECT 'j', g, CASE WHEN g < 3 THEN 'aborted' ELSE 'committed' END, true, now(), now(), now(), now()
		 FROM generate_series(1, 3) AS g`,
		`INSERT INTO checkpoint_participants (job, checkpoint_id, position, participant, epoch, vote, committables, voted_at, acked_at) VALUES
		 ('j', 1, 1, 'pa', 1, 'prepared', '["t1"]', now(), NULL), ('j', 1, 2, 'pb', 1, 'abort', NULL, now(), NULL),
		 ('j', 2, 1, 'pa', 1, 'prepared', '["t2"]', now(), now()), ('j', 2, 2, 'pb', 1, 'abort', NULL, now(), NULL),
		 ('j', 3, 1, 'pa', 1, 'prepared', '["t3"]', now(), now()), ('j', 3, 2, 'pb', 1, 'prepared', '["u3"]', now(), now())`,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if err := postgres.MigrateUp(url); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, "SELECT id, owes_rollback FROM checkpoints WHERE job = 'j' ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	owes, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (bool, error) {
		var id int64
		var owes bool
		err := row.Scan(&id, &owes)
		return owes, err
	})
	if err != nil || len(owes) != 3 || !owes[0] || owes[1] || owes[2] {
		t.Fatalf("owes_rollback of checkpoints 1, 2, 3 after the migration: %v, %v; want true, false, false", owes, err)
	}
	st, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p, err := coordinator.NewService(st, nil).Pending(ctx, "j", "pa", 0, 0)
	if err != nil || len(p.Items) != 1 || p.Items[0].Checkpoint != 1 || p.Items[0].Action != coordinator.ActionAbort {
		t.Fatalf("pending of pa after the upgrade: %+v, %v; want the abort of checkpoint 1", p, err)
	}
	// The last checkpoint, now kept by the job: 3 for j, none for k (as before the upgrade).
	j, err := st.GetJob(ctx, "j")
	if err != nil || j.LastCheckpoint == nil || *j.LastCheckpoint != 3 {
		t.Fatalf("job j after the upgrade: %+v, %v; want last checkpoint 3", j, err)
	}
	k, err := st.GetJob(ctx, "k")
	if err != nil || k.LastCheckpoint != nil || k.Seq != 5 {
		t.Fatalf("job k after the upgrade: %+v, %v; want no last checkpoint, seq 5", k, err)
	}
}

// A database URL whose search_path names a schema that does not exist: the error says which
// schema to create, not golang-migrate's "CURRENT_SCHEMA() is NULL".
func TestMissingSchemaSaysWhichToCreate(t *testing.T) {
	t.Parallel()
	base := pgtest.URL(t)
	u, err := neturl.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", "coord")
	u.RawQuery = q.Encode()
	err = postgres.MigrateUp(u.String())
	if err == nil || !strings.Contains(err.Error(), `CREATE SCHEMA "coord"`) || strings.Contains(err.Error(), "CURRENT_SCHEMA") {
		t.Fatalf("migrations on a search_path whose schema is missing: %v; want the schema to create", err)
	}
	conn, err := pgx.Connect(context.Background(), base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `CREATE SCHEMA coord`); err != nil {
		t.Fatal(err)
	}
	if err := postgres.MigrateUp(u.String()); err != nil {
		t.Fatalf("migrations once the schema exists: %v", err)
	}
}

// migrate down drops everything it made, golang-migrate's schema_migrations too, and
// nothing else of the database.
func TestMigrateDownLeavesNothing(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "CREATE TABLE theirs (x int)"); err != nil {
		t.Fatal(err)
	}
	if err := postgres.MigrateDown(url); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(context.Background(), "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(tables) != 1 || tables[0] != "theirs" {
		t.Fatalf("tables left after migrate down: %q, %v; want only the one the test made", tables, err)
	}
	if err := postgres.MigrateUp(url); err != nil {
		t.Fatalf("up after down: %v", err)
	}
}
