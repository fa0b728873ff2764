package postgres_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/pgtest"
	"github.com/twophase/coordinator/store/postgres"
)

// TestReadyReportsReadOnlyDatabase opens a store on a database whose transactions are
// read-only by default, as a standby's are: Ready reports that it cannot be written, and
// writes (a job's configuration, an update through the group commit) are refused with
// unavailable (503), not as internal errors.
func TestReadyReportsReadOnlyDatabase(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dbURL := pgtest.URL(t)
	cfg := coordinator.JobConfig{Participants: []string{"a"}, CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 1, AutoCommit: true}
	writable, err := postgres.Open(ctx, dbURL, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := coordinator.NewService(writable, nil).PutJob(ctx, "j", cfg); err != nil {
		t.Fatal(err)
	}
	writable.Close()
	pgtest.SetReadOnlyByDefault(t, dbURL, true)
	st, err := postgres.Open(ctx, dbURL, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	err = st.Ready(ctx)
	var e *coordinator.Error
	if !errors.As(err, &e) || e.Code != coordinator.CodeUnavailable || !strings.Contains(e.Message, "cannot be written") ||
		!strings.Contains(e.Message, "read-only") {
		t.Fatalf("Ready on a read-only database: %v, want unavailable saying it cannot be written", err)
	}
	svc := coordinator.NewService(st, nil)
	if _, _, err := svc.PutJob(ctx, "j", cfg); !errors.Is(err, coordinator.ErrUnavailable) {
		t.Fatalf("a job's configuration on a read-only database: %v, want unavailable", err)
	}
	if _, err := svc.Register(ctx, "j", "a"); !errors.Is(err, coordinator.ErrUnavailable) {
		t.Fatalf("a registration on a read-only database: %v, want unavailable", err)
	}
	if job, err := svc.GetJob(ctx, "j"); err != nil || job.Epochs["a"] != 0 {
		t.Fatalf("reads still work, and nothing changed: %+v %v", job, err)
	}

	// Writable again: Ready says so at once on new sessions.
	pgtest.SetReadOnlyByDefault(t, dbURL, false)
	st2, err := postgres.Open(ctx, dbURL, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	if err := st2.Ready(ctx); err != nil {
		t.Fatalf("Ready on a writable database: %v", err)
	}
}
