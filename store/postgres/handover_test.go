package postgres_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/postgres"
)

// readCounting is the store with its reads for pending counted; what it knows without
// reading (KnownVersion, KnownPreparing) comes through unchanged.
type readCounting struct {
	*postgres.Store
	reads atomic.Int64
}

func (s *readCounting) Owing(ctx context.Context, job, participant string) (*coordinator.Job, time.Time, []*coordinator.Checkpoint, error) {
	s.reads.Add(1)
	return s.Store.Owing(ctx, job, participant)
}

type pendingAnswer struct {
	p   *coordinator.Pending
	err error
}

// waitPending starts a long-poll of participant on pending and returns once it waits: its
// read is done (reads reached want) and it has had time to subscribe.
func waitPending(t *testing.T, svc *coordinator.Service, s *readCounting, participant string, want int64) <-chan pendingAnswer {
	t.Helper()
	ch := make(chan pendingAnswer, 1)
	go func() {
		p, err := svc.Pending(t.Context(), "j", participant, 20*time.Second, 0)
		ch <- pendingAnswer{p, err}
	}()
	for deadline := time.Now().Add(5 * time.Second); s.reads.Load() < want; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the long-poll of %s did not read within 5 s (%d reads)", participant, s.reads.Load())
		}
	}
	time.Sleep(200 * time.Millisecond) // from its read to its wait
	return ch
}

func answered(t *testing.T, ch <-chan pendingAnswer) *coordinator.Pending {
	t.Helper()
	select {
	case a := <-ch:
		if a.err != nil {
			t.Fatal(a.err)
		}
		return a.p
	case <-time.After(10 * time.Second):
		t.Fatal("the long-poll did not answer within 10 s")
		return nil
	}
}

// A checkpoint opened through this coordinator reaches the participants waiting on pending
// without a read: the transaction that opened it, and did nothing else to the job, hands
// it to them (Opened), since what they read last is the version it began from. A change
// made through another coordinator is read, as before.
func TestOpenedCheckpointHandedToWaiters(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	stores := openStores(t, 2)
	for _, s := range stores {
		if !postgres.WaitListening(s, 10*time.Second) {
			t.Fatal("the store does not listen")
		}
	}
	local := &readCounting{Store: stores[0]}
	svc := coordinator.NewService(local, nil)
	other := coordinator.NewService(stores[1], nil)
	epochs := setUpJob(t, svc, time.Minute)

	for id := int64(1); id <= 3; id++ {
		before := local.reads.Load()
		pa, pb := waitPending(t, svc, local, "pa", before+1), waitPending(t, svc, local, "pb", before+2)
		read := local.reads.Load()
		if _, _, err := svc.Prepare(ctx, "j", coordinator.PrepareRequest{}); err != nil {
			t.Fatal(err)
		}
		for name, ch := range map[string]<-chan pendingAnswer{"pa": pa, "pb": pb} {
			p := answered(t, ch)
			if len(p.Items) != 1 || p.Items[0].Checkpoint != id || p.Items[0].Action != coordinator.ActionVote || p.Epoch != epochs[name] {
				t.Fatalf("checkpoint %d: %s's long-poll answered %+v", id, name, p)
			}
		}
		if got := local.reads.Load(); got != read {
			t.Errorf("checkpoint %d: the long-polls read %d more times once it opened, want 0", id, got-read)
		}
		for _, p := range []string{"pa", "pb"} {
			if _, err := svc.Vote(ctx, "j", id, p, coordinator.Vote{Epoch: epochs[p], Kind: coordinator.VotePrepared}); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range []string{"pa", "pb"} {
			if _, err := svc.Ack(ctx, "j", id, p, epochs[p]); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Opened through the other coordinator: this one hears of it and reads.
	before := local.reads.Load()
	pa := waitPending(t, svc, local, "pa", before+1)
	if _, _, err := other.Prepare(ctx, "j", coordinator.PrepareRequest{}); err != nil {
		t.Fatal(err)
	}
	if p := answered(t, pa); len(p.Items) != 1 || p.Items[0].Checkpoint != 4 || p.Items[0].Action != coordinator.ActionVote {
		t.Fatalf("a checkpoint opened elsewhere: %+v", p)
	}
	if got := local.reads.Load(); got != before+2 {
		t.Errorf("a checkpoint opened elsewhere: %d reads, want 2 (the long-poll's first, and one once woken)", got-before)
	}
}
