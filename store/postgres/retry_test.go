package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/groupcommit"
	"github.com/twophase/coordinator/store/postgres"
)

// queued is the store with its updates queued on q instead of committed: the test takes
// them and commits them as it likes.
type queued struct {
	*postgres.Store
	q *groupcommit.Queue
}

func (s *queued) Update(ctx context.Context, job string, checkpoint int64, fn func(tx coordinator.JobTx) error) error {
	return s.q.Submit(ctx, job, checkpoint, fn)
}

// A batch run again after a failure holds the updates that joined it after the others,
// out of job order. Each job's updates must still follow one another in one transaction:
// two acks of one checkpoint, with another job's update between them, make it committed
// (each begun from the job as read, the second ack would miss the first and leave the
// checkpoint committing with every participant acked).
func TestRetriedBatchRunsEachJobsUpdatesInTurn(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openStores(t, 1)[0]
	svc := coordinator.NewService(s, nil)
	epochs := setUpJob(t, svc, time.Minute)
	if _, _, err := svc.PutJob(ctx, "k", coordinator.JobConfig{Participants: []string{"pa"}, CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 1, AutoCommit: true}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.Prepare(ctx, "j", coordinator.PrepareRequest{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"pa", "pb"} {
		if _, err := svc.Vote(ctx, "j", 1, p, coordinator.Vote{Epoch: epochs[p], Kind: coordinator.VotePrepared}); err != nil {
			t.Fatal(err)
		}
	}

	stop := make(chan struct{})
	defer close(stop)
	q := &queued{Store: s, q: groupcommit.NewQueue(stop)}
	held := coordinator.NewService(q, nil)
	errs := make(chan error, 3)
	var ops []*groupcommit.Op
	take := func(submit func() error) {
		t.Helper()
		go func() { errs <- submit() }()
		got, ok := q.q.Next(1)
		if !ok || len(got) != 1 {
			t.Fatal("the update was not queued")
		}
		ops = append(ops, got...)
	}
	take(func() error { _, err := held.Ack(ctx, "j", 1, "pa", epochs["pa"]); return err })
	take(func() error { _, _, err := held.Prepare(ctx, "k", coordinator.PrepareRequest{}); return err })
	take(func() error { _, err := held.Ack(ctx, "j", 1, "pb", epochs["pb"]); return err })
	if err := postgres.CommitRetry(s, ops); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	cp, err := svc.GetCheckpoint(ctx, "j", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if cp.Status != coordinator.StatusCommitted {
		t.Fatalf("checkpoint 1 is %s after both acks, want committed: %+v", cp.Status, cp.Participants)
	}
}
