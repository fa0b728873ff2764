package coordinatorclient_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cc "github.com/twophase/coordinator/clients/go/coordinatorclient"
)

// A Prepare error is an abort vote carrying the error's text.
func TestPrepareErrorVotesAbort(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.putJob(t, "j", cc.JobConfig{Participants: []string{"a", "b"}})
	pa, pb := newRecorder(t, b, "j", "a"), newRecorder(t, b, "j", "b")
	pa.prepare = func(ctx context.Context, id int64) ([]txn, error) {
		if id == 1 {
			return nil, errors.New("disk full")
		}
		return []txn{{"a", id}}, nil
	}
	ra, _ := run(t, b, "j", "a", pa)
	rb, _ := run(t, b, "j", "b", pb)
	waitRegistered(t, ra)
	waitRegistered(t, rb)
	b.open(t, "j")
	cp := b.waitStatus(t, "j", 1, cc.Aborted)
	if cp.AbortReason == nil || !strings.Contains(*cp.AbortReason, "disk full") {
		t.Errorf("abort reason %v, want the Prepare error", cp.AbortReason)
	}
	b.open(t, "j")
	b.waitStatus(t, "j", 2, cc.Committed)
	// b had prepared 1 (or not, if the abort came first): if it had, it rolled it back.
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, err := b.coord.Pending(context.Background(), "j", "b", 0)
		if err == nil && len(p.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b still owes %+v (%v)", p, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := ids(pb.Calls("commit")); !slices.Equal(got, []int64{2}) {
		t.Errorf("b committed %v, want [2]", got)
	}
	if slices.Contains(ids(pa.Calls("commit")), 1) {
		t.Error("a committed the checkpoint it failed to prepare")
	}
}

// A Prepare still running when the checkpoint is decided (another participant voted abort)
// sees its context cancelled with ErrDecidedMeanwhile, and nothing is voted.
func TestPrepareCancelledWhenDecided(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.putJob(t, "j", cc.JobConfig{Participants: []string{"a", "b"}})
	pa := newRecorder(t, b, "j", "a")
	cause := make(chan error, 1)
	pa.prepare = func(ctx context.Context, id int64) ([]txn, error) {
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return nil, ctx.Err()
	}
	ra, _ := run(t, b, "j", "a", pa)
	waitRegistered(t, ra)
	regB, err := b.coord.Register(context.Background(), "j", "b")
	if err != nil {
		t.Fatal(err)
	}
	b.open(t, "j")
	for len(pa.Calls("prepare")) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	reason := "b gives up"
	if _, err := b.coord.Vote(context.Background(), "j", 1, "b", cc.VoteRequest{Epoch: regB.Epoch, Vote: cc.VoteKindAbort, Reason: &reason}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-cause:
		if !errors.Is(err, cc.ErrDecidedMeanwhile) {
			t.Errorf("Prepare's context ended with %v, want ErrDecidedMeanwhile", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Prepare's context was not cancelled by the decision")
	}
	cp := b.checkpoint(t, "j", 1)
	for _, p := range cp.Participants {
		if p.Name == "a" && p.Vote != nil {
			t.Errorf("a voted %s after the decision", *p.Vote)
		}
	}
}

// A Prepare that finishes after the checkpoint's deadline gets its vote refused: the
// runner rolls back the committables itself, since no pending item will ever name them.
func TestLateVoteRollsBackLocally(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The runner must see the checkpoint before its deadline (it polls every 10 ms); a
	// second leaves room for a loaded machine.
	b.putJob(t, "j", cc.JobConfig{Participants: []string{"a"}, CheckpointTimeoutMs: ptr(int64(1000))})
	pa := newRecorder(t, b, "j", "a")
	pa.prepare = func(ctx context.Context, id int64) ([]txn, error) {
		if id == 1 {
			time.Sleep(1500 * time.Millisecond) // ignores ctx on purpose: a slow, stubborn sink
		}
		return []txn{{"a", id}}, nil
	}
	ra, _ := run(t, b, "j", "a", pa)
	waitRegistered(t, ra)
	b.open(t, "j")
	b.waitStatus(t, "j", 1, cc.Aborted)
	deadline := time.Now().Add(10 * time.Second)
	for len(pa.Calls("abort")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the refused committables were never rolled back")
		}
		time.Sleep(10 * time.Millisecond)
	}
	aborts := pa.Calls("abort")
	if aborts[0].Checkpoint != 1 || len(aborts[0].Committables) != 1 || aborts[0].Committables[0] != (txn{"a", 1}) {
		t.Errorf("abort %+v, want checkpoint 1 with its committables", aborts[0])
	}
	if len(pa.Calls("commit")) != 0 {
		t.Error("committed an aborted checkpoint")
	}
}

// A failing Commit is retried with backoff, and the checkpoint is not acked meanwhile.
func TestCommitRetriedUntilItSucceeds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.putJob(t, "j", cc.JobConfig{Participants: []string{"a"}})
	pa := newRecorder(t, b, "j", "a")
	var failures atomic.Int64
	pa.commit = func(ctx context.Context, id int64, cs []txn) error {
		if failures.Add(1) <= 3 {
			// Still committing, not acked, while Commit fails.
			cp, err := b.coord.Checkpoint(ctx, "j", id, 0)
			if err == nil && cp.Status != cc.Committing {
				t.Errorf("checkpoint %d is %s while its commit fails", id, cp.Status)
			}
			return errors.New("database briefly gone")
		}
		return nil
	}
	ra, stop := run(t, b, "j", "a", pa)
	waitRegistered(t, ra)
	b.open(t, "j")
	b.waitStatus(t, "j", 1, cc.Committed)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := failures.Load(); n != 4 {
		t.Errorf("Commit called %d times, want 4 (3 failures, then success)", n)
	}
}

// A Permanent error from Commit stops the runner, unacked.
func TestPermanentCommitErrorStops(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.putJob(t, "j", cc.JobConfig{Participants: []string{"a"}})
	pa := newRecorder(t, b, "j", "a")
	boom := errors.New("prepared transaction vanished")
	pa.commit = func(context.Context, int64, []txn) error { return cc.Permanent(boom) }
	r := cc.NewRunner(b.coord, "j", "a", cc.Participant[txn](pa), cc.RunnerOptions{PollInterval: 10 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitRegistered(t, r)
	b.open(t, "j")
	if err := <-done; !errors.Is(err, boom) {
		t.Fatalf("Run returned %v, want the permanent error", err)
	}
	if cp := b.checkpoint(t, "j", 1); cp.Status != cc.Committing {
		t.Errorf("checkpoint is %s, want committing (not acked)", cp.Status)
	}
}

// Through a coordinator that answers 503, 500, drops connections before and after
// processing requests, rounds still complete, exactly once each.
func TestRoundsSurviveTransientFailures(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.putJob(t, "j", cc.JobConfig{Participants: []string{"a", "b"}})
	var n atomic.Int64
	b.faults.set(func(r *http.Request) fault {
		// Every third request of the participants fails, in turns of each kind.
		if !strings.Contains(r.URL.Path, "/participants/") && !strings.Contains(r.URL.Path, "/votes/") &&
			!strings.Contains(r.URL.Path, "/acks/") && r.Method != http.MethodGet {
			return pass
		}
		k := n.Add(1)
		if k%3 != 0 {
			return pass
		}
		return []fault{unavailable, serverError, dropRequest, dropResponse}[(k/3)%4]
	})
	pa, pb := newRecorder(t, b, "j", "a"), newRecorder(t, b, "j", "b")
	ra, stopA := run(t, b, "j", "a", pa)
	rb, stopB := run(t, b, "j", "b", pb)
	waitRegistered(t, ra)
	waitRegistered(t, rb)
	epochA, epochB := ra.Epoch(), rb.Epoch()
	for i := int64(1); i <= 4; i++ {
		id := b.open(t, "j")
		b.waitStatus(t, "j", id, cc.Committed)
	}
	if err := stopA(); err != nil {
		t.Errorf("a: %v", err)
	}
	if err := stopB(); err != nil {
		t.Errorf("b: %v", err)
	}
	if b.faults.fired.Load() < 8 {
		t.Errorf("only %d faults injected", b.faults.fired.Load())
	}
	for _, p := range []*recorder{pa, pb} {
		if got := ids(p.Calls("commit")); !slices.Equal(got, []int64{1, 2, 3, 4}) {
			t.Errorf("%s committed %v", p.name, got)
		}
	}
	// A lost answer to a register would show as a second epoch: a dropped register is
	// allowed to, but runners keep the epoch they were answered.
	if epochA == 0 || epochB == 0 {
		t.Error("no epoch")
	}
}

// The Coordinator retries transient answers (503 with Retry-After, 500, lost connection)
// up to MaxAttempts, and does not retry a refusal.
func TestCoordinatorRetries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.putJob(t, "j", cc.JobConfig{Participants: []string{"a"}})
	for _, tc := range []struct {
		name string
		f    fault
		want error
	}{
		{"unavailable", unavailable, cc.ErrUnavailable},
		{"server error", serverError, nil},
		{"dropped request", dropRequest, nil},
	} {
		coord, err := cc.NewCoordinator(b.url, cc.Options{MaxAttempts: 3, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		before := b.faults.requests("GET /v1/jobs/j")
		b.faults.set(func(*http.Request) fault { return tc.f })
		_, err = coord.Job(ctx, "j")
		b.faults.set(nil)
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
		}
		if n := b.faults.requests("GET /v1/jobs/j") - before; n != 3 {
			t.Errorf("%s: %d attempts, want 3", tc.name, n)
		}
		// Two failures, then the coordinator answers: success.
		b.faults.set(failFirst(2, tc.f, http.MethodGet, "/v1/jobs/j"))
		if _, err := coord.Job(ctx, "j"); err != nil {
			t.Errorf("%s: after two failures: %v", tc.name, err)
		}
		b.faults.set(nil)
	}
	// A refusal is final: one attempt.
	coord, _ := cc.NewCoordinator(b.url, cc.Options{MinBackoff: time.Millisecond})
	before := b.faults.requests("GET /v1/jobs/nope")
	_, err := coord.Job(ctx, "nope")
	if !errors.Is(err, cc.ErrNotFound) {
		t.Errorf("missing job: %v, want ErrNotFound", err)
	}
	var apiErr *cc.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Code() != "not_found" {
		t.Errorf("missing job: %#v", err)
	}
	if n := b.faults.requests("GET /v1/jobs/nope") - before; n != 1 {
		t.Errorf("a 404 was sent %d times", n)
	}
	// Without MaxAttempts, retries last as long as the context.
	b.faults.set(func(*http.Request) fault { return unavailable })
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = coord.Job(cctx, "j")
	b.faults.set(nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("retry until the context ends: %v", err)
	}
}

// A vote whose answer was lost is sent again, word for word, and counts once.
func TestVoteRetriedAfterLostAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.putJob(t, "j", cc.JobConfig{Participants: []string{"a"}})
	b.faults.set(failFirst(1, dropResponse, http.MethodPut, "/votes/"))
	pa := newRecorder(t, b, "j", "a")
	pa.prepare = func(ctx context.Context, id int64) ([]txn, error) {
		// Several committables: the retried vote must match the recorded one byte for
		// byte, or it would get vote_conflict.
		return []txn{{"a", id}, {"z", -id}}, nil
	}
	ra, stop := run(t, b, "j", "a", pa)
	waitRegistered(t, ra)
	b.open(t, "j")
	b.waitStatus(t, "j", 1, cc.Committed)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := b.faults.requests("PUT /v1/jobs/j/checkpoints/1/votes/a"); n != 2 {
		t.Errorf("vote sent %d times, want 2 (one lost answer)", n)
	}
	if got := pa.Calls("commit"); len(got) != 1 || len(got[0].Committables) != 2 {
		t.Errorf("commits %+v", got)
	}
}

// recovering is a recorder whose Recover fails a few times (its database is still
// starting), then succeeds.
type recovering struct {
	*recorder
	failures  int
	recovered atomic.Int64
	owed      []int64
}

func (p *recovering) Recover(ctx context.Context, epoch int64, pending []cc.Item[txn]) error {
	if p.recovered.Add(1) <= int64(p.failures) {
		return errors.New("database not up yet")
	}
	for _, it := range pending {
		p.owed = append(p.owed, it.Checkpoint)
	}
	return nil
}

// Recover runs after registration, with what is owed, before anything is applied; its
// errors are retried.
func TestRecoverRetriedBeforeOwedItems(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.putJob(t, "j", cc.JobConfig{Participants: []string{"a"}})
	old, _ := b.coord.Register(ctx, "j", "a")
	b.open(t, "j")
	msg := cc.Committables(`[{"participant":"a","checkpoint":1}]`)
	if _, err := b.coord.Vote(ctx, "j", 1, "a", cc.VoteRequest{Epoch: old.Epoch, Vote: cc.VoteKindPrepared, Committables: &msg}); err != nil {
		t.Fatal(err)
	}
	p := &recovering{recorder: newRecorder(t, b, "j", "a"), failures: 2}
	p.commit = func(context.Context, int64, []txn) error {
		if p.recovered.Load() != 3 {
			t.Error("commit before a successful Recover")
		}
		return nil
	}
	_, stop := run(t, b, "j", "a", cc.Participant[txn](p))
	b.waitStatus(t, "j", 1, cc.Committed)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.owed, []int64{1}) {
		t.Errorf("Recover saw %v owed, want [1]", p.owed)
	}
}

// A prepare sent without a key of the caller's still carries one, so that its retry after a
// lost answer returns the checkpoint the first attempt opened, and opens no second one.
func TestOpenCheckpointRetriedAfterLostAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.putJob(t, "j", cc.JobConfig{Participants: []string{"a"}, MaxConcurrentCheckpoints: ptr(5)})
	b.faults.set(failFirst(1, dropResponse, http.MethodPost, "/checkpoints"))
	cp, err := b.coord.OpenCheckpoint(context.Background(), "j", "", 0)
	b.faults.set(nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := b.faults.requests("POST /v1/jobs/j/checkpoints"); n != 2 {
		t.Errorf("prepare sent %d times, want 2 (one lost answer)", n)
	}
	job, err := b.coord.Job(context.Background(), "j")
	if err != nil {
		t.Fatal(err)
	}
	if cp.Id != 1 || job.LastCheckpoint == nil || *job.LastCheckpoint != 1 {
		t.Fatalf("answered checkpoint %d, the job's last is %v: want 1 and 1 (one prepare, one checkpoint)", cp.Id, job.LastCheckpoint)
	}
}
