package groupcommit

import (
	"context"
	"errors"
	"strings"
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

// A caller that gives up before its update started is told it was not applied, and the
// update never starts afterwards; one that gives up after is told it may have been; an
// update whose transaction failed can be given up on again before it starts once more.
func TestGivingUp(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	q := NewQueue(stop)
	submit := func(ctx context.Context) (<-chan error, *Op) {
		errs := make(chan error, 1)
		go func() { errs <- q.Submit(ctx, "j", 0, nil) }()
		o := <-q.Arrivals()
		if !q.Claim(o) {
			t.Fatal("Claim refused a live update")
		}
		return errs, o
	}
	message := func(err error) string {
		var e *coordinator.Error
		if !errors.As(err, &e) || e.Code != coordinator.CodeUnavailable || !errors.Is(err, context.Canceled) {
			t.Fatalf("answer %v: want an unavailable coordinator.Error wrapping context.Canceled", err)
		}
		return e.Message
	}

	ctx, cancel := context.WithCancel(context.Background())
	errs, o := submit(ctx)
	cancel()
	if msg := message(<-errs); !strings.Contains(msg, "nothing of it was") {
		t.Fatalf("gave up while claimed: %q, want not applied", msg)
	}
	if o.Start() {
		t.Fatal("an update whose caller gave up started")
	}

	ctx, cancel = context.WithCancel(context.Background())
	errs, o = submit(ctx)
	if !o.Start() {
		t.Fatal("a live claimed update did not start")
	}
	cancel()
	if msg := message(<-errs); !strings.Contains(msg, "may have been applied") {
		t.Fatalf("gave up while started: %q, want may have been applied", msg)
	}
	o.Unstart() // its transaction failed
	if o.Start() {
		t.Fatal("an update whose caller gave up started again after its transaction failed")
	}
	select {
	case <-o.done:
	default:
		t.Fatal("an update not started again was not answered")
	}

	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	errs, o = submit(ctx)
	if !o.Start() {
		t.Fatal("a live claimed update did not start")
	}
	o.Unstart()
	if !o.Start() {
		t.Fatal("a live update did not start again after its transaction failed")
	}
	o.Finish(nil)
	if err := <-errs; err != nil {
		t.Fatalf("Submit = %v, want the batch's nil", err)
	}
}
