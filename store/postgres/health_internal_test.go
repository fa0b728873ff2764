package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/writehealth"
)

// TestStorageFailures: which database errors mean the store cannot write, and how they
// are answered (unavailable, so 503 and a retry, not a 500).
func TestStorageFailures(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err     error
		storage bool
	}{
		{&pgconn.PgError{Code: "53100"}, true}, // disk_full
		{&pgconn.PgError{Code: "58030"}, true}, // io_error
		{&pgconn.PgError{Code: "25006"}, true}, // read_only_sql_transaction
		{fmt.Errorf("commit: %w", &pgconn.PgError{Code: "53100"}), true},
		{coordinator.Unavailable(&pgconn.PgError{Code: "25006"}), true},
		{&pgconn.PgError{Code: "23505"}, false}, // unique_violation
		{&pgconn.PgError{Code: "40001"}, false}, // serialization_failure
		{&pgconn.PgError{Code: "57P01"}, false}, // admin_shutdown: unreachable, not storage
		{coordinator.ErrFenced, false},
		{coordinator.ErrNotFound, false},
		{context.Canceled, false},
		{errors.New("something else"), false},
		{nil, false},
	} {
		if _, got := storageFailure(c.err); got != c.storage {
			t.Errorf("storageFailure(%v) = %v, want %v", c.err, got, c.storage)
		}
		if c.storage && !errors.Is(translate(c.err), coordinator.ErrUnavailable) {
			t.Errorf("translate(%v) = %v, want unavailable", c.err, translate(c.err))
		}
	}
}

// TestWriteHealthHold: a storage failure is reported for writehealth.Hold after the last
// one; successes and other errors change nothing.
func TestWriteHealthHold(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	h := writehealth.Record{Classify: storageFailure, Now: func() time.Time { return now }}
	for _, err := range []error{nil, coordinator.ErrNotFound, &pgconn.PgError{Code: "23505"}, context.Canceled} {
		h.Note(err)
		if got := h.Check(); got != nil {
			t.Fatalf("after %v: %v", err, got)
		}
	}
	h.Note(coordinator.Unavailable(fmt.Errorf("commit: %w", &pgconn.PgError{Code: "53100", Message: "could not extend file"})))
	now = now.Add(writehealth.Hold / 2)
	err := h.Check()
	if !errors.Is(err, coordinator.ErrUnavailable) || !strings.Contains(err.Error(), "disk is full") {
		t.Fatalf("within the hold: %v", err)
	}
	h.Note(nil) // a write that succeeded may have written nothing: it proves nothing
	h.Note(&pgconn.PgError{Code: "25006"})
	now = now.Add(writehealth.Hold - time.Second)
	if err := h.Check(); !errors.Is(err, coordinator.ErrUnavailable) || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("within the renewed hold: %v", err)
	}
	now = now.Add(time.Second)
	if err := h.Check(); err != nil {
		t.Fatalf("after the hold: %v", err)
	}
}
