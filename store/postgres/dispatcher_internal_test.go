package postgres

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twophase/coordinator/store/groupcommit"
)

// TestNextTakesInOrderWhatCanRun: a batch takes, in arrival order and up to the batch
// size, the updates of jobs in no running batch and not waiting for a retry (several of
// one job together); it drops those it would take whose context ended, and leaves the
// rest waiting in their order, the ended ones of busy jobs included, for their turn.
func TestNextTakesInOrderWhatCanRun(t *testing.T) {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	live := context.Background()
	op := func(ctx context.Context, job string) *groupcommit.Op {
		return &groupcommit.Op{Ctx: ctx, Job: job}
	}
	busyLive, busyEnded := op(live, "busy"), op(ended, "busy")
	freeEnded := op(ended, "free")
	a1, a2, retried, b, c, d := op(live, "a"), op(live, "a"), op(live, "locked"), op(live, "b"), op(live, "c"), op(live, "d")
	disp := &dispatcher{
		c:       &committer{maxBatch: 3},
		busy:    map[string]bool{"busy": true},
		retry:   map[string]time.Time{"locked": time.Now().Add(time.Hour)},
		waiting: []*groupcommit.Op{busyLive, a1, freeEnded, retried, busyEnded, a2, b, c, d},
	}
	batch := disp.next()
	if want := []*groupcommit.Op{a1, a2, b}; !slices.Equal(batch, want) {
		t.Fatalf("batch: got %d updates %v, want a, a, b", len(batch), jobsOf(batch))
	}
	if want := []*groupcommit.Op{busyLive, retried, busyEnded, c, d}; !slices.Equal(disp.waiting, want) {
		t.Fatalf("left waiting: %v, want busy, locked, busy, c, d", jobsOf(disp.waiting))
	}
	for _, job := range []string{"a", "b"} {
		if !disp.busy[job] {
			t.Fatalf("job %s of the batch not marked busy", job)
		}
	}
	if disp.busy["c"] {
		t.Fatal("job c, left waiting, marked busy")
	}

	// The batch done and the retry's time up, the rest runs, the ended update dropped.
	disp.batchDone(batchDone{ops: batch})
	delete(disp.busy, "busy")
	disp.retry["locked"] = time.Now().Add(-time.Millisecond)
	disp.c.maxBatch = 10
	batch = disp.next()
	if want := []*groupcommit.Op{busyLive, retried, c, d}; !slices.Equal(batch, want) {
		t.Fatalf("second batch: %v, want busy, locked, c, d", jobsOf(batch))
	}
	if len(disp.waiting) != 0 {
		t.Fatalf("still waiting: %v", jobsOf(disp.waiting))
	}
}

func jobsOf(ops []*groupcommit.Op) []string {
	var jobs []string
	for _, o := range ops {
		jobs = append(jobs, o.Job)
	}
	return jobs
}

// TestAnswerJoinsOnlyTheBatchsJobs: a join request gets, in order and up to its bound, the
// waiting updates of its jobs, those whose context ended dropped; the others stay waiting,
// ended ones included, for next to look at.
func TestAnswerJoinsOnlyTheBatchsJobs(t *testing.T) {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	live := context.Background()
	a1, aEnded, a2, a3 := &groupcommit.Op{Ctx: live, Job: "a"}, &groupcommit.Op{Ctx: ended, Job: "a"},
		&groupcommit.Op{Ctx: live, Job: "a"}, &groupcommit.Op{Ctx: live, Job: "a"}
	b, bEnded := &groupcommit.Op{Ctx: live, Job: "b"}, &groupcommit.Op{Ctx: ended, Job: "b"}
	disp := &dispatcher{c: &committer{maxBatch: 10}, busy: map[string]bool{}, linger: newLingerPolicy(time.Now),
		waiting: []*groupcommit.Op{b, a1, bEnded, aEnded, a2, a3}}
	req := joinRequest{jobs: map[string]bool{"a": true}, max: 2, reply: make(chan []*groupcommit.Op, 1)}
	if !disp.answer(req) {
		t.Fatal("a join request with updates waiting for its job was not answered")
	}
	if got := <-req.reply; !slices.Equal(got, []*groupcommit.Op{a1, a2}) {
		t.Fatalf("joined %v, want a, a (the live ones, up to the bound)", jobsOf(got))
	}
	if want := []*groupcommit.Op{b, bEnded, a3}; !slices.Equal(disp.waiting, want) {
		t.Fatalf("left waiting %v, want b, b, a", jobsOf(disp.waiting))
	}
}

// TestABatchStartsBesideAnotherOnlyOnceItRanAWhile: with a batch running and a writer
// free, another batch may start only once the latest running one has run overlapAfter
// (it is waiting on something: a lock, a slow commit), or at once if a whole batch of
// updates waits; until then the loop is woken when that time comes, and not after it.
func TestABatchStartsBesideAnotherOnlyOnceItRanAWhile(t *testing.T) {
	now := time.Now()
	op := func(job string) *groupcommit.Op { return &groupcommit.Op{Ctx: context.Background(), Job: job} }
	disp := &dispatcher{
		c:       &committer{maxBatch: 3, workers: 2},
		busy:    map[string]bool{},
		retry:   map[string]time.Time{},
		starts:  []time.Time{now},
		waiting: []*groupcommit.Op{op("a"), op("b")},
	}
	if disp.mayOverlap(now.Add(overlapAfter / 2)) {
		t.Fatalf("a batch may start beside one that has run %v", overlapAfter/2)
	}
	if !disp.mayOverlap(now.Add(overlapAfter)) {
		t.Fatalf("no batch may start beside one that has run %v", overlapAfter)
	}
	// The loop wakes when the running batch has run overlapAfter.
	if disp.wake() == nil {
		t.Fatal("no wake-up for when a batch may start beside the running one")
	}
	select {
	case <-disp.wake():
		if time.Since(now) < overlapAfter {
			t.Fatalf("woken %v after the batch started, before %v", time.Since(now), overlapAfter)
		}
	case <-time.After(time.Second):
		t.Fatal("not woken within a second")
	}
	// Past that time, nothing to wake for: what waits could not run (its jobs busy), and an
	// arrival or a batch's end wakes the loop.
	if w := disp.wake(); w != nil {
		t.Fatal("woken again for a time already past")
	}
	// A whole batch waiting starts at once.
	disp.starts = []time.Time{time.Now()}
	disp.waiting = append(disp.waiting, op("c"))
	if !disp.mayOverlap(time.Now()) {
		t.Fatal("a whole batch waiting may not start beside the running one")
	}
	// One writer: never.
	disp.c.workers = 1
	if w := disp.wake(); w != nil {
		t.Fatal("woken for an overlap with one writer")
	}
}
