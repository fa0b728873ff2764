package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/writehealth"
)

// TestReadyReportsAFullDisk fills the database (max_page_count on the writer's one
// connection: the file may not grow) and checks that a vote that needs room fails with
// unavailable and changes nothing, that Ready then reports the store as unable to write,
// saying why and naming no file, and that reads still work.
func TestReadyReportsAFullDisk(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "data")
	st, err := Open(ctx, dir, Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	svc := coordinator.NewService(st, nil)
	cfg := coordinator.JobConfig{Participants: []string{"a"}, CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 1, AutoCommit: true}
	if _, _, err := svc.PutJob(ctx, "j", cfg); err != nil {
		t.Fatal(err)
	}
	r, err := svc.Register(ctx, "j", "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.Prepare(ctx, "j", coordinator.PrepareRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := st.Ready(ctx); err != nil {
		t.Fatalf("Ready before the disk filled: %v", err)
	}

	var pages int64
	if err := st.writer.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if _, err := st.writer.ExecContext(ctx, fmt.Sprintf("PRAGMA max_page_count = %d", pages)); err != nil {
		t.Fatal(err)
	}
	big := []byte(`["` + strings.Repeat("x", 1<<20) + `"]`)
	_, err = svc.Vote(ctx, "j", 1, "a", coordinator.Vote{Epoch: r.Epoch, Kind: coordinator.VotePrepared, Committables: big})
	if !errors.Is(err, coordinator.ErrUnavailable) {
		t.Fatalf("a vote on a full disk: %v, want unavailable", err)
	}
	err = st.Ready(ctx)
	var e *coordinator.Error
	if !errors.As(err, &e) || e.Code != coordinator.CodeUnavailable {
		t.Fatalf("Ready after a write failed on a full disk: %v, want unavailable", err)
	}
	if !strings.Contains(e.Message, "cannot be written") || !strings.Contains(e.Message, "disk is full") || strings.Contains(e.Message, dir) {
		t.Fatalf("Ready's message %q: want why, and no path", e.Message)
	}
	cp, err := svc.GetCheckpoint(ctx, "j", 1, 0)
	if err != nil || cp.Status != coordinator.StatusPreparing || cp.Participants[0].Vote != "" {
		t.Fatalf("after the failed vote (reads still work): %+v %v", cp, err)
	}

	// Room again: writes succeed at once; Ready follows within writehealth.Hold
	// (TestWriteHealthHold).
	if _, err := st.writer.ExecContext(ctx, "PRAGMA max_page_count = 1073741823"); err != nil {
		t.Fatal(err)
	}
	if cp, err := svc.Vote(ctx, "j", 1, "a", coordinator.Vote{Epoch: r.Epoch, Kind: coordinator.VotePrepared, Committables: big}); err != nil || cp.Status != coordinator.StatusCommitting {
		t.Fatalf("the vote once there is room: %+v %v", cp, err)
	}
}

// TestWriteHealthHold: a storage failure is reported for writehealth.Hold after the last
// one, and nothing else is a storage failure.
func TestWriteHealthHold(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	h := writehealth.Record{Classify: storageFailure, Now: func() time.Time { return now }}
	for _, err := range []error{nil, coordinator.ErrNotFound, coordinator.ErrFenced, context.Canceled,
		coordinator.Unavailable(errClosed), errors.New("constraint failed")} {
		h.Note(err)
		if got := h.Check(); got != nil {
			t.Fatalf("after %v: %v", err, got)
		}
	}
	h.Note(coordinator.Unavailable(fmt.Errorf("commit: %w", syscall.ENOSPC)))
	now = now.Add(writehealth.Hold / 2)
	if err := h.Check(); !errors.Is(err, coordinator.ErrUnavailable) || !strings.Contains(err.Error(), "disk is full") {
		t.Fatalf("within the hold: %v", err)
	}
	h.Note(fmt.Errorf("write: %w", syscall.EROFS)) // renews it
	now = now.Add(writehealth.Hold - time.Second)
	if err := h.Check(); !errors.Is(err, coordinator.ErrUnavailable) || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("within the renewed hold: %v", err)
	}
	now = now.Add(time.Second)
	if err := h.Check(); err != nil {
		t.Fatalf("after the hold: %v", err)
	}
	if err := h.Check(); err != nil {
		t.Fatalf("after the hold, again: %v", err)
	}
}
