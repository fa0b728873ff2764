package groupcommit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
)

// A batch takes everything queued, answers an update whose context ended without running
// it, and a stopped queue answers what is left with ErrUnavailable.
func TestQueue(t *testing.T) {
	stop := make(chan struct{})
	q := NewQueue(stop)
	results := make(chan error, 3)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, ctx := range []context.Context{context.Background(), context.Background()} {
		go func() { results <- q.Submit(ctx, "j", 0, nil) }()
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(q.ops) < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	q.ops <- &Op{Ctx: cancelled, Job: "gone", done: make(chan struct{})}
	abandonedOp := &Op{Ctx: context.Background(), Job: "abandoned", done: make(chan struct{})}
	abandonedOp.state.Store(abandoned)
	q.ops <- abandonedOp
	batch, ok := q.Next(64)
	if !ok || len(batch) != 2 || batch[0].Job != "j" || batch[1].Job != "j" {
		t.Fatalf("Next = %d updates, %v; want the 2 live ones", len(batch), ok)
	}
	for _, o := range batch {
		o.Finish(nil)
	}
	for range 2 {
		if err := <-results; err != nil {
			t.Fatalf("Submit answered %v, want the batch's nil", err)
		}
	}
	go func() { results <- q.Submit(context.Background(), "late", 0, nil) }()
	for len(q.ops) < 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	if _, ok := q.Next(64); ok {
		t.Fatal("Next on a stopped queue returned a batch")
	}
	if err := <-results; !errors.Is(err, coordinator.ErrUnavailable) {
		t.Fatalf("an update left in a stopped queue got %v, want ErrUnavailable", err)
	}
	if err := q.Submit(context.Background(), "after", 0, nil); !errors.Is(err, coordinator.ErrUnavailable) {
		t.Fatalf("Submit after stop: %v, want ErrUnavailable", err)
	}
}
