package coordinatorclient_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	cc "github.com/twophase/coordinator/clients/go/coordinatorclient"
)

// The trigger opens a checkpoint per interval; a request whose answer was lost is retried
// with the same Idempotency-Key and opens nothing twice; ticks that find one preparing are
// skipped.
func TestTriggerOpensCheckpointsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.putJob(t, "j", cc.JobConfig{Participants: []string{"a"}})
	b.faults.set(failFirst(3, dropResponse, http.MethodPost, "/checkpoints"))
	var opened []int64
	trig := &cc.Trigger{Coordinator: b.coord, Job: "j", Interval: 20 * time.Millisecond,
		OnOpen: func(cp *cc.Checkpoint) { opened = append(opened, cp.Id) }}
	tctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- trig.Run(tctx) }()
	// Nobody votes: the first checkpoint stays preparing, later ticks are skipped.
	deadline := time.Now().Add(10 * time.Second)
	for trig.Skipped() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("opened %d, skipped %d", trig.Opened(), trig.Skipped())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Abort it: the trigger opens the next one.
	if _, err := b.coord.Abort(ctx, "j", 1, "test"); err != nil {
		t.Fatal(err)
	}
	for trig.Opened() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("opened %d after the abort", trig.Opened())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	job, err := b.coord.Job(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	if job.LastCheckpoint == nil || *job.LastCheckpoint != int64(len(opened)) || opened[0] != 1 || opened[1] != 2 {
		t.Errorf("job's last checkpoint %v, trigger opened %v: a retry opened a second checkpoint", job.LastCheckpoint, opened)
	}
	if n := b.faults.requests("POST /v1/jobs/j/checkpoints"); n < 4 {
		t.Errorf("%d open requests: the dropped answers were not retried", n)
	}
}

// RestorePoint is the participant's committables in the latest committed checkpoint.
func TestRestorePoint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.putJob(t, "j", cc.JobConfig{Participants: []string{"src", "sink"}})
	id, pos, err := cc.RestorePoint[int64](ctx, b.coord, "j", "src")
	if err != nil || id != 0 || pos != nil {
		t.Fatalf("before any commit: %d %v %v", id, pos, err)
	}
	src, _ := b.coord.Register(ctx, "j", "src")
	sink, _ := b.coord.Register(ctx, "j", "sink")
	vote := func(id int64, p string, epoch int64, kind cc.VoteKind, raw string) {
		t.Helper()
		v := cc.VoteRequest{Epoch: epoch, Vote: kind}
		if raw != "" {
			m := cc.Committables(raw)
			v.Committables = &m
		}
		if _, err := b.coord.Vote(ctx, "j", id, p, v); err != nil {
			t.Fatal(err)
		}
	}
	b.open(t, "j") // 1 commits at position 100
	vote(1, "src", src.Epoch, cc.VoteKindPrepared, `[100]`)
	vote(1, "sink", sink.Epoch, cc.VoteKindPrepared, "")
	b.open(t, "j") // 2 aborts at position 200
	vote(2, "src", src.Epoch, cc.VoteKindPrepared, `[200]`)
	vote(2, "sink", sink.Epoch, cc.VoteKindAbort, "")
	b.open(t, "j") // 3 preparing at position 300
	vote(3, "src", src.Epoch, cc.VoteKindPrepared, `[300]`)
	id, pos, err = cc.RestorePoint[int64](ctx, b.coord, "j", "src")
	if err != nil || id != 1 || len(pos) != 1 || pos[0] != 100 {
		t.Fatalf("restore point %d %v %v, want checkpoint 1 at [100]", id, pos, err)
	}
	vote(3, "sink", sink.Epoch, cc.VoteKindPrepared, "")
	id, pos, err = cc.RestorePoint[int64](ctx, b.coord, "j", "src")
	if err != nil || id != 3 || len(pos) != 1 || pos[0] != 300 {
		t.Fatalf("restore point %d %v %v, want checkpoint 3 at [300] (committing counts)", id, pos, err)
	}
	for _, p := range []struct {
		name  string
		epoch int64
	}{{"src", src.Epoch}, {"sink", sink.Epoch}} {
		if _, err := b.coord.Ack(ctx, "j", 3, p.name, p.epoch); err != nil {
			t.Fatal(err)
		}
	}
	b.waitStatus(t, "j", 3, cc.Committed)
	id, pos, err = cc.RestorePoint[int64](ctx, b.coord, "j", "src")
	if err != nil || id != 3 || len(pos) != 1 || pos[0] != 300 {
		t.Fatalf("restore point %d %v %v, want checkpoint 3 at [300] once committed", id, pos, err)
	}
}
