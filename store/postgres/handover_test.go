package postgres_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/postgres"
)

// readCounting is the store with its reads for pending counted, and how often pending
// asked what the store knows without a read (KnownOwing, which a long-poll asks each time
// it has no view of the job to wait on); what the store knows comes through unchanged.
type readCounting struct {
	*postgres.Store
	reads, looks atomic.Int64
}

func (s *readCounting) Owing(ctx context.Context, job, participant string) (*coordinator.Job, time.Time, []*coordinator.Checkpoint, error) {
	s.reads.Add(1)
	return s.Store.Owing(ctx, job, participant)
}

func (s *readCounting) KnownOwing(job string) (*coordinator.Job, time.Time, []*coordinator.Checkpoint, bool) {
	s.looks.Add(1)
	return s.Store.KnownOwing(job)
}

// listeningStores is openStores, once each store's listener listens: what a store knows
// without reading is told only then.
func listeningStores(t *testing.T, n int) []*postgres.Store {
	t.Helper()
	stores := openStores(t, n)
	for _, s := range stores {
		if !postgres.WaitListening(s, 10*time.Second) {
			t.Fatal("the store does not listen")
		}
	}
	return stores
}

// twoCoordinators returns two services on one database, each on a store of its own that
// listens: the first's store with its reads counted, and the other.
func twoCoordinators(t *testing.T) (local *readCounting, svc, other *coordinator.Service) {
	t.Helper()
	stores := listeningStores(t, 2)
	local = &readCounting{Store: stores[0]}
	return local, coordinator.NewService(local, nil), coordinator.NewService(stores[1], nil)
}

type pendingAnswer struct {
	p   *coordinator.Pending
	err error
}

// waitPending starts a long-poll of participant on pending and returns once it waits: it
// has looked at what the store knows (looks reached want), read if it had to, and had time
// to subscribe.
func waitPending(t *testing.T, svc *coordinator.Service, s *readCounting, participant string, want int64) <-chan pendingAnswer {
	t.Helper()
	ch := make(chan pendingAnswer, 1)
	go func() {
		p, err := svc.Pending(t.Context(), "j", participant, 20*time.Second, 0)
		ch <- pendingAnswer{p, err}
	}()
	for deadline := time.Now().Add(5 * time.Second); s.looks.Load() < want; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the long-poll of %s did not look within 5 s (%d looks)", participant, s.looks.Load())
		}
	}
	time.Sleep(200 * time.Millisecond) // from its look (and read) to its wait
	return ch
}

// notYet fails if the long-poll answered: it should still be waiting.
func notYet(t *testing.T, ch <-chan pendingAnswer, what string) {
	t.Helper()
	select {
	case a := <-ch:
		t.Fatalf("%s: the long-poll answered %+v (%v), want it waiting", what, a.p, a.err)
	default:
	}
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
// it to them (Changed), since what they read last is the version it began from. A change
// made through another coordinator is read, as before.
func TestOpenedCheckpointHandedToWaiters(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	local, svc, other := twoCoordinators(t)
	epochs := setUpJob(t, svc, time.Minute)

	for id := int64(1); id <= 3; id++ {
		before, looked := local.reads.Load(), local.looks.Load()
		pa, pb := waitPending(t, svc, local, "pa", looked+1), waitPending(t, svc, local, "pb", looked+2)
		// This process committed the job's last change: the long-polls owe nothing by what it
		// cached, and wait without reading.
		read := local.reads.Load()
		if read != before {
			t.Errorf("checkpoint %d: the long-polls read %d times before it opened, want 0", id, read-before)
		}
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

	// Opened through the other coordinator: this one hears of it, drops what it cached of
	// the job, and reads.
	before := local.reads.Load()
	pa := waitPending(t, svc, local, "pa", local.looks.Load()+1)
	if _, _, err := other.Prepare(ctx, "j", coordinator.PrepareRequest{}); err != nil {
		t.Fatal(err)
	}
	if p := answered(t, pa); len(p.Items) != 1 || p.Items[0].Checkpoint != 4 || p.Items[0].Action != coordinator.ActionVote {
		t.Fatalf("a checkpoint opened elsewhere: %+v", p)
	}
	if got := local.reads.Load(); got != before+1 {
		t.Errorf("a checkpoint opened elsewhere: %d reads, want 1 (once woken)", got-before)
	}
}

// A participant that asks pending right after its vote or its ack, and owes nothing by
// what this process cached of the job, waits without a read; a change wakes it, and what
// this process changed is handed to it: the decision, and the next checkpoint, reach it
// without a read either.
func TestArrivalOwingNothingWaitsWithoutRead(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := listeningStores(t, 1)[0]
	local := &readCounting{Store: s}
	svc := coordinator.NewService(local, nil)
	epochs := setUpJob(t, svc, time.Minute)
	if _, _, err := svc.Prepare(ctx, "j", coordinator.PrepareRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Vote(ctx, "j", 1, "pa", coordinator.Vote{Epoch: epochs["pa"], Kind: coordinator.VotePrepared}); err != nil {
		t.Fatal(err)
	}
	before := local.reads.Load()
	pa := waitPending(t, svc, local, "pa", local.looks.Load()+1)
	notYet(t, pa, "after pa's vote")
	if got := local.reads.Load(); got != before {
		t.Errorf("pa's long-poll after its vote read %d times, want 0", got-before)
	}
	if _, err := svc.Vote(ctx, "j", 1, "pb", coordinator.Vote{Epoch: epochs["pb"], Kind: coordinator.VotePrepared}); err != nil {
		t.Fatal(err)
	}
	if p := answered(t, pa); len(p.Items) != 1 || p.Items[0].Checkpoint != 1 || p.Items[0].Action != coordinator.ActionCommit {
		t.Fatalf("pa's long-poll answered %+v once decided, want its commit", p)
	}
	if got := local.reads.Load(); got != before {
		t.Errorf("pa's long-poll read %d times once the decision was handed to it, want 0", got-before)
	}
	if _, err := svc.Ack(ctx, "j", 1, "pa", epochs["pa"]); err != nil {
		t.Fatal(err)
	}
	before = local.reads.Load()
	pa = waitPending(t, svc, local, "pa", local.looks.Load()+1)
	notYet(t, pa, "after pa's ack")
	if got := local.reads.Load(); got != before {
		t.Errorf("pa's long-poll after its ack read %d times, want 0", got-before)
	}
	// pb still owes its commit by the same cached state: it is read, and answered at once.
	if p, err := svc.Pending(ctx, "j", "pb", 20*time.Second, 0); err != nil || len(p.Items) != 1 || p.Items[0].Action != coordinator.ActionCommit {
		t.Fatalf("pb's pending answered %+v, %v, want its commit", p, err)
	}
	if got := local.reads.Load(); got != before+1 {
		t.Errorf("pb's pending, owing its commit, read %d times, want 1", got-before)
	}
	before = local.reads.Load()
	if _, err := svc.Ack(ctx, "j", 1, "pb", epochs["pb"]); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.Prepare(ctx, "j", coordinator.PrepareRequest{}); err != nil {
		t.Fatal(err)
	}
	if p := answered(t, pa); len(p.Items) != 1 || p.Items[0].Checkpoint != 2 || p.Items[0].Action != coordinator.ActionVote {
		t.Fatalf("pa's long-poll answered %+v once the next checkpoint opened, want its vote on 2", p)
	}
	if got := local.reads.Load(); got != before {
		t.Errorf("pa's long-poll read %d times through the commit and the next opening, want 0", got-before)
	}
}

// A decision handed over follows what a waiter knew only if every change in between was
// this process's: after another coordinator recorded a vote (which it does not announce,
// and which wakes nobody), this one's batches read the job, and their hand-over starts
// from there; the waiter, which knew an older version, reads.
func TestHandOverNotTrustedAcrossAnotherCoordinatorsChange(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	local, svc, other := twoCoordinators(t)
	cfg := coordinator.JobConfig{Participants: []string{"pa", "pb", "pc", "pd"}, CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 1, AutoCommit: true}
	if _, _, err := svc.PutJob(ctx, "j", cfg); err != nil {
		t.Fatal(err)
	}
	epochs := map[string]int64{}
	for _, p := range cfg.Participants {
		reg, err := svc.Register(ctx, "j", p)
		if err != nil {
			t.Fatal(err)
		}
		epochs[p] = reg.Epoch
	}
	vote := func(s *coordinator.Service, p string) {
		t.Helper()
		if _, err := s.Vote(ctx, "j", 1, p, coordinator.Vote{Epoch: epochs[p], Kind: coordinator.VotePrepared}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := svc.Prepare(ctx, "j", coordinator.PrepareRequest{}); err != nil {
		t.Fatal(err)
	}
	vote(svc, "pa")
	before := local.reads.Load()
	pa := waitPending(t, svc, local, "pa", local.looks.Load()+1)
	if got := local.reads.Load(); got != before {
		t.Fatalf("pa's long-poll after its vote read %d times, want 0", got-before)
	}
	vote(other, "pb")
	vote(svc, "pc") // finds the cached state stale, and reads: no decision yet, nobody woken
	notYet(t, pa, "after pc's vote")
	// A job found stale is not cached for a second (contendedFor); once it is again, the
	// hand-over and the cache agree on the version after pd's vote, and only the hand-over's
	// start can send pa to read.
	time.Sleep(1100 * time.Millisecond)
	vote(svc, "pd")
	if p := answered(t, pa); len(p.Items) != 1 || p.Items[0].Checkpoint != 1 || p.Items[0].Action != coordinator.ActionCommit {
		t.Fatalf("pa's long-poll answered %+v once decided, want its commit", p)
	}
	if got := local.reads.Load(); got != before+1 {
		t.Errorf("pa's long-poll read %d times once decided after another coordinator's vote, want 1", got-before)
	}
}

// An abort owed on a checkpoint that no lock read selects (aborted, with a participant's
// prepared vote unacked) keeps the cache from saying that participant owes nothing: its
// pending answers the abort at once, also after other changes to the job were cached.
func TestAbortOwedOutsideTheCacheIsAnswered(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	stores := listeningStores(t, 2)
	first := coordinator.NewService(stores[0], nil)
	epochs := setUpJob(t, first, time.Minute)
	if _, _, err := first.Prepare(ctx, "j", coordinator.PrepareRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Vote(ctx, "j", 1, "pa", coordinator.Vote{Epoch: epochs["pa"], Kind: coordinator.VotePrepared}); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Vote(ctx, "j", 1, "pb", coordinator.Vote{Epoch: epochs["pb"], Kind: coordinator.VoteAbort}); err != nil {
		t.Fatal(err)
	}
	// A coordinator that never saw checkpoint 1 opens and runs checkpoint 2: what its lock
	// reads (the preparing checkpoints) does not hold 1, on which pa owes its abort.
	second := &readCounting{Store: stores[1]}
	svc := coordinator.NewService(second, nil)
	if _, _, err := svc.Prepare(ctx, "j", coordinator.PrepareRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Vote(ctx, "j", 2, "pa", coordinator.Vote{Epoch: epochs["pa"], Kind: coordinator.VotePrepared}); err != nil {
		t.Fatal(err)
	}
	p, err := svc.Pending(ctx, "j", "pa", 3*time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Items) != 1 || p.Items[0].Checkpoint != 1 || p.Items[0].Action != coordinator.ActionAbort {
		t.Fatalf("pa's pending answered %+v, want its abort of checkpoint 1", p)
	}
	// Once pa acks it, nothing is owed outside what the cache holds, and pb, whose vote on
	// 2 is owed, is still read and answered.
	if _, err := svc.Ack(ctx, "j", 1, "pa", epochs["pa"]); err != nil {
		t.Fatal(err)
	}
	if p, err := svc.Pending(ctx, "j", "pb", 3*time.Second, 0); err != nil || len(p.Items) != 1 || p.Items[0].Checkpoint != 2 || p.Items[0].Action != coordinator.ActionVote {
		t.Fatalf("pb's pending answered %+v, %v, want its vote on 2", p, err)
	}
	before := second.reads.Load()
	pa := waitPending(t, svc, second, "pa", second.looks.Load()+1)
	notYet(t, pa, "after pa's ack of the abort")
	if got := second.reads.Load(); got != before {
		t.Errorf("pa's long-poll read %d times once nothing was owed outside the cache, want 0", got-before)
	}
}

// A job changed or deleted through another coordinator wakes this one's long-polls, which
// read it: what this process cached of the job is no longer trusted.
func TestJobChangedElsewhereWakesWaiters(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	local, svc, other := twoCoordinators(t)
	setUpJob(t, svc, time.Minute)

	pb := waitPending(t, svc, local, "pb", local.looks.Load()+1)
	cfg := coordinator.JobConfig{Participants: []string{"pa"}, CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 1, AutoCommit: true}
	if _, _, err := other.PutJob(ctx, "j", cfg); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-pb:
		if !errors.Is(a.err, coordinator.ErrNotFound) {
			t.Fatalf("pb's long-poll, once pb was taken out of the job elsewhere, answered %+v, %v; want not found", a.p, a.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("pb's long-poll was not woken by the job changed elsewhere")
	}

	pa := waitPending(t, svc, local, "pa", local.looks.Load()+1)
	if err := other.DeleteJob(ctx, "j"); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-pa:
		if !errors.Is(a.err, coordinator.ErrNotFound) {
			t.Fatalf("pa's long-poll, once the job was deleted elsewhere, answered %+v, %v; want not found", a.p, a.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("pa's long-poll was not woken by the job deleted elsewhere")
	}
}

// A participant that owes something by what this process cached is answered from that
// state once the job's version confirms it, without reading what is owed; an ack through
// another coordinator, which this one does not hear of, moves the version, and the answer
// is read: the participant is not told it owes what it has acked.
func TestOwedConfirmedByTheJobsVersion(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	stores := listeningStores(t, 2)
	s := stores[0]
	svc, other := coordinator.NewService(s, nil), coordinator.NewService(stores[1], nil)
	epochs := setUpJob(t, svc, time.Minute)
	if _, _, err := svc.Prepare(ctx, "j", coordinator.PrepareRequest{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"pa", "pb"} {
		if _, err := svc.Vote(ctx, "j", 1, p, coordinator.Vote{Epoch: epochs[p], Kind: coordinator.VotePrepared}); err != nil {
			t.Fatal(err)
		}
	}
	owes := func(p string) []coordinator.PendingItem {
		t.Helper()
		pending, err := svc.Pending(ctx, "j", p, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		return pending.Items
	}
	isCommit := func(items []coordinator.PendingItem) bool {
		return len(items) == 1 && items[0].Checkpoint == 1 && items[0].Action == coordinator.ActionCommit
	}
	before := postgres.OwingReads(s)
	for _, p := range []string{"pa", "pb"} {
		if items := owes(p); !isCommit(items) {
			t.Fatalf("%s's pending answered %+v, want its commit of 1", p, items)
		}
	}
	if got := postgres.OwingReads(s) - before; got != 0 {
		t.Errorf("pending of two participants owing their commit read %d times with the version unchanged, want 0", got)
	}

	if _, err := other.Ack(ctx, "j", 1, "pa", epochs["pa"]); err != nil {
		t.Fatal(err)
	}
	if _, _, _, ok := s.KnownOwing("j"); !ok {
		t.Fatal("this coordinator dropped its cached state on the other's ack: the version is not what tells it")
	}
	before = postgres.OwingReads(s)
	if items := owes("pa"); len(items) != 0 {
		t.Fatalf("pa's pending after its ack through the other coordinator answered %+v, want nothing owed", items)
	}
	if items := owes("pb"); !isCommit(items) {
		t.Fatalf("pb's pending answered %+v, want its commit of 1", items)
	}
	if got := postgres.OwingReads(s) - before; got != 2 {
		t.Errorf("pending after another coordinator's ack read %d times, want 2 (the version moved)", got)
	}
}
