package coordinatorclient

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// Trigger plays the checkpoint coordinator's clock (Flink's CheckpointCoordinator timer):
// it opens one checkpoint of a job every Interval. Each attempt carries an Idempotency-Key,
// so a request retried after a lost answer opens no second checkpoint. A tick that finds
// max_concurrent_checkpoints preparing is skipped.
//
// Set the exported fields, then call Run once.
type Trigger struct {
	// Coordinator sends the requests (and retries transient failures). Required.
	Coordinator *Coordinator
	// Job is the job whose checkpoints are opened. Required.
	Job string
	// Interval between two openings. 0 means 200ms.
	Interval time.Duration
	// Timeout is each checkpoint's timeout; 0 means the job's checkpoint_timeout_ms.
	Timeout time.Duration
	// KeyPrefix starts every Idempotency-Key; the n-th checkpoint opened gets
	// "<KeyPrefix>-<n>". It must differ between Trigger instances of a job, or a new
	// instance is answered with its predecessor's checkpoints. Empty means random.
	KeyPrefix string
	// OnOpen, if set, is called with each checkpoint opened.
	OnOpen func(*Checkpoint)
	// Logger receives skipped ticks and errors. nil means no logging.
	Logger *slog.Logger

	opened, skipped atomic.Int64
}

// Opened is how many checkpoints this Trigger opened so far.
func (t *Trigger) Opened() int64 { return t.opened.Load() }

// Skipped is how many ticks found too many checkpoints preparing (or failed) and opened
// none.
func (t *Trigger) Skipped() int64 { return t.skipped.Load() }

// tickBound is the least a tick may take to open its checkpoint, retries included.
const tickBound = 30 * time.Second

// Run opens checkpoints until ctx ends, and then returns nil. It returns early only on a
// refusal that no later tick can cure: the job does not exist (ErrNotFound), an
// idempotency conflict, or invalid input. Transient failures are retried within the tick
// (bounded by Interval, at least tickBound), then the tick is given up and the next uses
// the same key.
func (t *Trigger) Run(ctx context.Context) error {
	if t.Coordinator == nil || t.Job == "" {
		return errors.New("coordinatorclient: Trigger needs a Coordinator and a Job")
	}
	interval := t.Interval
	if interval <= 0 {
		interval = 200 * time.Millisecond
	}
	prefix := t.KeyPrefix
	if prefix == "" {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		prefix = "trigger-" + hex.EncodeToString(b)
	}
	log := t.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	n := int64(1)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		key := fmt.Sprintf("%s-%d", prefix, n)
		// A slow open is waited for rather than cut: cutting it closes its connection and
		// sends it again, which adds load to a coordinator that is slow already. Ticks
		// that pass meanwhile are dropped (time.Ticker).
		tctx, cancel := context.WithTimeout(ctx, max(interval, tickBound))
		cp, err := t.Coordinator.OpenCheckpoint(tctx, t.Job, key, t.Timeout)
		cancel()
		switch {
		case err == nil:
			n++
			t.opened.Add(1)
			if t.OnOpen != nil {
				t.OnOpen(cp)
			}
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrTooManyCheckpoints):
			t.skipped.Add(1)
			log.Debug("tick skipped: too many checkpoints preparing", "job", t.Job)
		default:
			var apiErr *APIError
			if errors.As(err, &apiErr) && !apiErr.transient() {
				return fmt.Errorf("trigger %s: %w", t.Job, err)
			}
			t.skipped.Add(1)
			log.Warn("tick failed", "job", t.Job, "error", err)
		}
	}
}
