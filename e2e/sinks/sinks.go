// Package sinks holds real participants of the coordinator's protocol, built on the
// participant library (coordinatorclient.Runner): a PostgreSQL sink that writes through
// PREPARE TRANSACTION / COMMIT PREPARED, and a file sink that renames fsynced temp files
// into place. A Python participant using only the standard library lives in python/.
//
// A sink gets its events from an Input, which hands out, for each checkpoint, the events
// received since the previous checkpoint's barrier up to this one's (Flink's barrier
// alignment). The end-to-end pipeline (e2e/pipeline) feeds it from a source over a
// socket; tests feed it directly.
package sinks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// Event is one record of the pipeline: a sequence number from 1 and a payload derived
// from it, so that a sink's content can be checked for loss, duplicates and corruption.
type Event struct {
	Seq     int64  `json:"seq"`
	Payload string `json:"payload"`
}

// MakeEvent returns the deterministic event number seq.
func MakeEvent(seq int64) Event {
	sum := sha256.Sum256(fmt.Appendf(nil, "event-%d", seq))
	return Event{Seq: seq, Payload: hex.EncodeToString(sum[:8])}
}

// Valid reports whether e is the event MakeEvent(e.Seq).
func (e Event) Valid() bool { return e == MakeEvent(e.Seq) }

// Input hands a sink the events of a checkpoint: those that arrived after the events
// handed out for earlier checkpoints, up to the checkpoint's barrier. It blocks until the
// barrier arrived or ctx ends.
type Input interface {
	Take(ctx context.Context, checkpoint int64) ([]Event, error)
}

// InputFunc adapts a function to Input.
type InputFunc func(ctx context.Context, checkpoint int64) ([]Event, error)

// Take calls f.
func (f InputFunc) Take(ctx context.Context, checkpoint int64) ([]Event, error) {
	return f(ctx, checkpoint)
}

// Check reports what is wrong with the events a sink holds, when it should hold events
// 1..n exactly once each: missing, duplicated, out of range or corrupt events. "" means
// nothing.
func Check(events []Event, n int64) string {
	seen := make([]int, n+1)
	var bad, outside int
	for _, e := range events {
		if e.Seq < 1 || e.Seq > n {
			outside++
			continue
		}
		if !e.Valid() {
			bad++
		}
		seen[e.Seq]++
	}
	var missing, twice int
	firstMissing, firstTwice := int64(0), int64(0)
	for i := int64(1); i <= n; i++ {
		switch {
		case seen[i] == 0:
			if missing == 0 {
				firstMissing = i
			}
			missing++
		case seen[i] > 1:
			if twice == 0 {
				firstTwice = i
			}
			twice++
		}
	}
	if missing == 0 && twice == 0 && bad == 0 && outside == 0 {
		return ""
	}
	return fmt.Sprintf("%d events held for 1..%d: %d missing (first %d), %d more than once (first %d), %d corrupt, %d out of range",
		len(events), n, missing, firstMissing, twice, firstTwice, bad, outside)
}
