package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/sqlite"
)

// setup opens a fresh, migrated store in its own directory and closes it after the test.
func setup(t *testing.T) (*sqlite.Store, *coordinator.Service, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	st, err := sqlite.Open(t.Context(), dir, sqlite.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st, coordinator.NewService(st, nil), dir
}

func config(participants ...string) coordinator.JobConfig {
	return coordinator.JobConfig{Participants: participants, CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 1, AutoCommit: true}
}

func TestRoundSurvivesCloseAndOpen(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, svc, dir := setup(t)
	if _, created, err := svc.PutJob(ctx, "orders", config("a", "b")); err != nil || !created {
		t.Fatal(created, err)
	}
	ra, err := svc.Register(ctx, "orders", "a")
	if err != nil {
		t.Fatal(err)
	}
	rb, _ := svc.Register(ctx, "orders", "b")
	cp, _, err := svc.Prepare(ctx, "orders", coordinator.PrepareRequest{IdempotencyKey: "k1", Fingerprint: "f"})
	if err != nil || cp.ID != 1 {
		t.Fatal(cp, err)
	}
	if _, err := svc.Vote(ctx, "orders", 1, "a", coordinator.Vote{Epoch: ra.Epoch, Kind: coordinator.VotePrepared, Committables: []byte(`[{"b":1, "a":2}, "é\u00e9"]`)}); err != nil {
		t.Fatal(err)
	}
	cp, err = svc.Vote(ctx, "orders", 1, "b", coordinator.Vote{Epoch: rb.Epoch, Kind: coordinator.VotePrepared})
	if err != nil || cp.Status != coordinator.StatusCommitting {
		t.Fatal(cp, err)
	}
	before, err := svc.GetCheckpoint(ctx, "orders", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(before.Participants[0].Committables); got != `[{"b":1,"a":2},"é\u00e9"]` {
		t.Fatalf("committables %s", got)
	}
	if got := string(before.Participants[1].Committables); got != `[]` {
		t.Fatalf("committables of a vote without any: %s", got)
	}
	st.Close()
	if _, err := svc.GetCheckpoint(ctx, "orders", 1, 0); !errors.Is(err, coordinator.ErrUnavailable) {
		t.Fatalf("closed store: %v, want unavailable", err)
	}

	st2, err := sqlite.Open(ctx, dir, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	svc = coordinator.NewService(st2, nil)
	after, err := svc.GetCheckpoint(ctx, "orders", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprintf("%+v", after) != fmt.Sprintf("%+v", before) {
		t.Fatalf("after reopening:\n%+v\nbefore:\n%+v", after, before)
	}
	if !after.CreatedAt.Equal(before.CreatedAt) || after.CreatedAt != before.CreatedAt {
		t.Fatalf("created_at %v != %v", after.CreatedAt, before.CreatedAt)
	}
	replay, replayed, err := svc.Prepare(ctx, "orders", coordinator.PrepareRequest{IdempotencyKey: "k1", Fingerprint: "f"})
	if err != nil || !replayed || replay.ID != 1 {
		t.Fatal(replay, replayed, err)
	}
	svc.Ack(ctx, "orders", 1, "a", ra.Epoch)
	cp, err = svc.Ack(ctx, "orders", 1, "b", rb.Epoch)
	if err != nil || cp.Status != coordinator.StatusCommitted {
		t.Fatal(cp, err)
	}
	job, err := svc.GetJob(ctx, "orders")
	if err != nil || job.Epochs["a"] != 1 || job.Seq != 1 || *job.LastCommitted != 1 {
		t.Fatalf("%+v %v", job, err)
	}
}

func TestSecondOwnerIsRefused(t *testing.T) {
	t.Parallel()
	st, _, dir := setup(t)
	_, err := sqlite.Open(t.Context(), dir, sqlite.Options{Migrate: true})
	var inUse *sqlite.InUseError
	if !errors.As(err, &inUse) || !errors.Is(err, sqlite.ErrInUse) {
		t.Fatalf("second Open: %v, want an InUseError", err)
	}
	pid := strconv.Itoa(os.Getpid())
	if inUse.PID != os.Getpid() || !strings.Contains(err.Error(), "process "+pid) {
		t.Fatalf("error %q does not name process %s", err, pid)
	}
	if err := sqlite.MigrateUp(dir); !errors.Is(err, sqlite.ErrInUse) {
		t.Fatalf("MigrateUp of an owned directory: %v", err)
	}
	// Reading the version needs no ownership.
	if v, dirty, err := sqlite.MigrationVersion(dir); err != nil || dirty || v != sqlite.SchemaVersion {
		t.Fatal(v, dirty, err)
	}
	st.Close()
	st2, err := sqlite.Open(t.Context(), dir, sqlite.Options{})
	if err != nil {
		t.Fatalf("Open after the owner closed: %v", err)
	}
	st2.Close()
}

func TestMigrations(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "a", "b")
	if v, dirty, err := sqlite.MigrationVersion(dir); err != nil || v != 0 || dirty {
		t.Fatal(v, dirty, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("MigrationVersion created the directory: %v", err)
	}
	if _, err := sqlite.Open(t.Context(), dir, sqlite.Options{}); !errors.Is(err, sqlite.ErrSchemaVersion) {
		t.Fatalf("Open of an unmigrated directory without Migrate: %v", err)
	}
	info, err := os.Stat(dir)
	if err != nil || info.Mode().Perm() != 0o700 {
		t.Fatalf("data directory: %v %v", info, err)
	}
	if err := sqlite.MigrateUp(dir); err != nil {
		t.Fatal(err)
	}
	if err := sqlite.MigrateUp(dir); err != nil {
		t.Fatalf("second MigrateUp: %v", err)
	}
	if v, dirty, err := sqlite.MigrationVersion(dir); err != nil || v != sqlite.SchemaVersion || dirty || v < 1 {
		t.Fatal(v, dirty, err)
	}
	st, err := sqlite.Open(t.Context(), dir, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Ready(t.Context()); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if err := st.Ready(t.Context()); !errors.Is(err, coordinator.ErrUnavailable) {
		t.Fatalf("Ready after Close: %v", err)
	}
	if err := sqlite.MigrateDown(dir); err != nil {
		t.Fatal(err)
	}
	if v, _, err := sqlite.MigrationVersion(dir); err != nil || v != 0 {
		t.Fatal(v, err)
	}
	// Down drops everything, golang-migrate's own table too.
	db, err := sql.Open("sqlite", filepath.Join(dir, sqlite.DatabaseFileName))
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	rows, err := db.Query("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	rows.Close()
	db.Close()
	if len(tables) != 0 {
		t.Fatalf("tables left after migrate down: %q", tables)
	}
	if err := sqlite.MigrateUp(dir); err != nil {
		t.Fatalf("up after down: %v", err)
	}
}

// Deleting a job and creating it again reuses neither checkpoint ids nor epochs, nor the
// global Seq.
func TestDeletedJobKeepsItsNumbers(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, svc, _ := setup(t)
	svc.PutJob(ctx, "j", config("a"))
	r, _ := svc.Register(ctx, "j", "a")
	cp, _, err := svc.Prepare(ctx, "j", coordinator.PrepareRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Abort(ctx, "j", cp.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if err := svc.DeleteJob(ctx, "j"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.GetJob(ctx, "j"); !errors.Is(err, coordinator.ErrNotFound) {
		t.Fatalf("deleted job: %v", err)
	}
	if _, created, err := svc.PutJob(ctx, "j", config("a")); err != nil || !created {
		t.Fatal(created, err)
	}
	r2, _ := svc.Register(ctx, "j", "a")
	cp2, _, err := svc.Prepare(ctx, "j", coordinator.PrepareRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if cp2.ID != 2 || cp2.Seq <= cp.Seq || r2.Epoch != r.Epoch+1 {
		t.Fatalf("after re-creation: id %d seq %d (was %d), epoch %d (was %d)", cp2.ID, cp2.Seq, cp.Seq, r2.Epoch, r.Epoch)
	}
}

func TestSubscribeWakesOnDecision(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, svc, _ := setup(t)
	svc.PutJob(ctx, "j", config("a"))
	r, _ := svc.Register(ctx, "j", "a")
	svc.Prepare(ctx, "j", coordinator.PrepareRequest{})
	done := make(chan *coordinator.Checkpoint)
	go func() {
		cp, err := svc.GetCheckpoint(context.Background(), "j", 1, 30*time.Second)
		if err != nil {
			t.Error(err)
		}
		done <- cp
	}()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	if _, err := svc.Vote(ctx, "j", 1, "a", coordinator.Vote{Epoch: r.Epoch, Kind: coordinator.VotePrepared}); err != nil {
		t.Fatal(err)
	}
	select {
	case cp := <-done:
		if cp.Status != coordinator.StatusCommitting {
			t.Fatalf("waiter saw %s", cp.Status)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("woken after %v", d)
	}
}

func TestViewRefusesWrites(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, svc, _ := setup(t)
	svc.PutJob(ctx, "j", config("a"))
	err := st.View(ctx, "j", func(tx coordinator.JobTx) error {
		return tx.Apply(ctx, &coordinator.Mutation{Epochs: []coordinator.EpochChange{{Participant: "a", Epoch: 7}}})
	})
	if err == nil {
		t.Fatal("write in View succeeded")
	}
	if err := st.Update(ctx, "nope", 0, func(coordinator.JobTx) error { return nil }); err != coordinator.ErrNotFound {
		t.Fatalf("Update of a missing job: %v, want ErrNotFound itself", err)
	}
	if err := st.View(ctx, "j", func(tx coordinator.JobTx) error {
		_, err := tx.Checkpoint(ctx, 9)
		return err
	}); err != coordinator.ErrNotFound {
		t.Fatalf("missing checkpoint: %v, want ErrNotFound itself", err)
	}
}
