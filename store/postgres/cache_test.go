package postgres_test

import (
	"errors"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/postgres"
)

// TestCachedStateChangedByAnotherCoordinator: a coordinator that changed a job last caches
// its state and runs its next update on it without reading; if another coordinator changed
// the job meanwhile, that update must not decide on the cached state. Here a prepares (and
// caches the checkpoint with no votes), b records pa's vote, then a records pb's: a must
// see pa's vote and decide commit, and every vote must be kept.
func TestCachedStateChangedByAnotherCoordinator(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	stores := openStores(t, 2)
	a, b := coordinator.NewService(stores[0], nil), coordinator.NewService(stores[1], nil)
	epochs := setUpJob(t, a, time.Minute)
	vote := func(s *coordinator.Service, id int64, p string) *coordinator.Checkpoint {
		t.Helper()
		cp, err := s.Vote(ctx, "j", id, p, coordinator.Vote{Epoch: epochs[p], Kind: coordinator.VotePrepared, Committables: []byte(`["` + p + `"]`)})
		if err != nil {
			t.Fatal(err)
		}
		return cp
	}
	for round := int64(1); round <= 5; round++ {
		if _, _, err := a.Prepare(ctx, "j", coordinator.PrepareRequest{}); err != nil {
			t.Fatal(err)
		}
		vote(b, round, "pa")
		cp := vote(a, round, "pb")
		if cp.Status != coordinator.StatusCommitting || string(cp.Participant("pa").Committables) != `["pa"]` {
			t.Fatalf("round %d: a's vote, after b recorded pa's, answered %s; want committing with pa's vote", round, describe(cp))
		}
		wantStored(t, stores[0], cp)
		// The acks the other way round: b acks first, then a, whose cached state has none.
		if _, err := b.Ack(ctx, "j", round, "pa", epochs["pa"]); err != nil {
			t.Fatal(err)
		}
		cp, err := a.Ack(ctx, "j", round, "pb", epochs["pb"])
		if err != nil {
			t.Fatal(err)
		}
		if cp.Status != coordinator.StatusCommitted {
			t.Fatalf("round %d: the last ack answered %s; want committed", round, describe(cp))
		}
		wantStored(t, stores[0], cp)
	}
}

// TestCachedStateKeepsDeadlinesExact: an update run on a cached state times its rules by an
// estimate of the database's clock; even when that estimate is behind (here by a minute),
// a vote that the database's clock says came after the deadline is not counted (rule 6).
func TestCachedStateKeepsDeadlinesExact(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := openStores(t, 1)[0]
	s := coordinator.NewService(st, nil)
	epochs := setUpJob(t, s, 300*time.Millisecond)
	if _, _, err := s.Prepare(ctx, "j", coordinator.PrepareRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Vote(ctx, "j", 1, "pa", coordinator.Vote{Epoch: epochs["pa"], Kind: coordinator.VotePrepared}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond)
	postgres.SetClockBehind(st, time.Minute)
	_, err := s.Vote(ctx, "j", 1, "pb", coordinator.Vote{Epoch: epochs["pb"], Kind: coordinator.VotePrepared})
	var e *coordinator.Error
	if !errors.As(err, &e) || e.Code != coordinator.CodeAlreadyDecided {
		t.Fatalf("a vote after the deadline answered %v; want already_decided", err)
	}
	cp, err := st.GetCheckpoint(ctx, "j", 1)
	if err != nil {
		t.Fatal(err)
	}
	if cp.Status != coordinator.StatusAborted || cp.Participant("pb").Vote != "" {
		t.Fatalf("after a vote past the deadline the checkpoint is %s", describe(cp))
	}
}

// TestLongPollAfterAnotherCoordinatorDecided: a long-poll may wait without reading when
// its coordinator's cached state says the checkpoint is preparing; once another
// coordinator has decided it, and this one has heard of it, that state must not be
// trusted: the long-poll answers the decision at once instead of sleeping out its wait.
func TestLongPollAfterAnotherCoordinatorDecided(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	stores := openStores(t, 2)
	a, b := coordinator.NewService(stores[0], nil), coordinator.NewService(stores[1], nil)
	epochs := setUpJob(t, a, time.Minute)
	for round := int64(1); round <= 3; round++ {
		if _, _, err := a.Prepare(ctx, "j", coordinator.PrepareRequest{}); err != nil {
			t.Fatal(err)
		}
		// a caches the job's state unless it heard of b's last decision (the round before)
		// only after its prepare began; then an update of its own caches it again.
		for try := 0; !stores[0].KnownPreparing("j", round); try++ {
			if try == 50 {
				t.Fatalf("round %d: the coordinator that prepared does not know the checkpoint is preparing", round)
			}
			time.Sleep(20 * time.Millisecond)
			if err := stores[0].Update(ctx, "j", 0, func(coordinator.JobTx) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range []string{"pa", "pb"} {
			if _, err := b.Vote(ctx, "j", round, p, coordinator.Vote{Epoch: epochs[p], Kind: coordinator.VotePrepared}); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for stores[0].KnownPreparing("j", round) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond) // until a hears of b's decision
		}
		start := time.Now()
		cp, err := a.GetCheckpoint(ctx, "j", round, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if cp.Status != coordinator.StatusCommitting || time.Since(start) > 10*time.Second {
			t.Fatalf("round %d: the long-poll answered %s after %s; want committing at once", round, cp.Status, time.Since(start))
		}
		for _, p := range []string{"pa", "pb"} {
			if _, err := b.Ack(ctx, "j", round, p, epochs[p]); err != nil {
				t.Fatal(err)
			}
		}
	}
}
