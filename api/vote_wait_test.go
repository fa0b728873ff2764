package api

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
)

func TestVoteWaitsForTheDecision(t *testing.T) { onEachStore(t, testVoteWaitsForTheDecision) }

// A prepared vote with wait_ms that leaves the checkpoint preparing is answered once the
// checkpoint is decided; the vote is recorded before the wait.
func testVoteWaitsForTheDecision(t *testing.T) {
	b := setup(t)
	b.job(t, "j", `{"participants":["a","b"]}`, "a", "b")
	var cp Checkpoint
	b.call(t, "POST", "/v1/jobs/j/checkpoints", "", "").ok(t, 201, &cp)

	done := waitingVote(t, b, "j", cp.Id, `{"epoch":1,"vote":"prepared","committables":["t1"]}`)
	b.json(t, "PUT", votePathOf("j", cp.Id, "b"), `{"epoch":1,"vote":"prepared"}`).ok(t, 200, nil)
	var got Checkpoint
	within(t, "the waiting vote, after the decision", done, 5*time.Second).ok(t, 200, &got)
	if got.Status != Committing {
		t.Fatalf("the waiting vote answered %s, want committing", got.Status)
	}
}

// waitingVote sends participant a's vote with body on checkpoint id of job, with
// wait_ms=30000, in the background, and returns where its answer will come once it is
// recorded (a is the job's first participant) and still held 200 ms later.
func waitingVote(t *testing.T, b *bundle, job string, id int64, body string) <-chan answer {
	t.Helper()
	done := make(chan answer, 1)
	go func() { done <- b.json(t, "PUT", votePathOf(job, id, "a")+"?wait_ms=30000", body) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var now Checkpoint
		b.call(t, "GET", fmt.Sprintf("/v1/jobs/%s/checkpoints/%d", job, id), "", "").ok(t, 200, &now)
		if now.Participants[0].Vote != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's vote not recorded while it waits: %+v", now.Participants[0])
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case a := <-done:
		t.Fatalf("the waiting vote answered before anything happened: %d %s", a.status, a.body)
	case <-time.After(200 * time.Millisecond):
	}
	return done
}

func TestVoteWaitEndsWhenANewerCheckpointOpens(t *testing.T) {
	onEachStore(t, testVoteWaitEndsWhenANewerCheckpointOpens)
}

// In a job that holds two checkpoints preparing at once, a vote waiting for the first
// one's decision is answered, the first still preparing, once the second opens: the voter
// owes a vote on it.
func testVoteWaitEndsWhenANewerCheckpointOpens(t *testing.T) {
	b := setup(t)
	b.job(t, "j", `{"participants":["a","b"],"max_concurrent_checkpoints":2}`, "a", "b")
	var first Checkpoint
	b.call(t, "POST", "/v1/jobs/j/checkpoints", "", "").ok(t, 201, &first)
	done := waitingVote(t, b, "j", first.Id, `{"epoch":1,"vote":"prepared"}`)
	b.call(t, "POST", "/v1/jobs/j/checkpoints", "", "").ok(t, 201, nil)
	var got Checkpoint
	within(t, "the waiting vote, when a newer checkpoint opened", done, 5*time.Second).ok(t, 200, &got)
	if got.Id != first.Id || got.Status != Preparing {
		t.Fatalf("the waiting vote answered checkpoint %d %s, want %d preparing", got.Id, got.Status, first.Id)
	}

	// A voter that owes a vote on a newer checkpoint already, when it votes, does not wait.
	b.job(t, "k", `{"participants":["a","b"],"max_concurrent_checkpoints":2}`, "a", "b")
	b.call(t, "POST", "/v1/jobs/k/checkpoints", "", "").ok(t, 201, nil)
	b.call(t, "POST", "/v1/jobs/k/checkpoints", "", "").ok(t, 201, nil)
	started := time.Now()
	b.json(t, "PUT", votePathOf("k", 1, "a")+"?wait_ms=30000", `{"epoch":1,"vote":"prepared"}`).ok(t, 200, &got)
	if took := time.Since(started); got.Status != Preparing || took > 5*time.Second {
		t.Fatalf("a vote owing another answered %s after %s, want preparing at once", got.Status, took)
	}
}

// The wait of a vote is woken by a decision through another coordinator on the database,
// ends at its wait_ms or at shutdown, and is checked before the vote is recorded.
func TestVoteWaitAcrossCoordinators(t *testing.T) {
	t.Parallel()
	waiter, waiterSvc, other := sharingJobJ(t)

	open := func() int64 {
		r := other.send(t, "", "POST", "/v1/jobs/j/checkpoints", "")
		var cp Checkpoint
		if err := json.Unmarshal(r.body, &cp); err != nil || r.status != 201 {
			t.Fatalf("open: %d %s", r.status, r.body)
		}
		return cp.Id
	}
	vote := func(id int64, wait string) <-chan timed[Checkpoint] {
		return sendTimed[Checkpoint](t, waiter, "PUT", votePathOf("j", id, "a")+"?wait_ms="+wait, `{"epoch":1,"vote":"prepared"}`)
	}
	ackBoth := func(id int64) {
		for _, p := range []string{"a", "b"} {
			if r := other.send(t, "", "PUT", ackPathOf("j", id, p), `{"epoch":1}`); r.status != 200 {
				t.Fatalf("ack %s of %d: %d %s", p, id, r.status, r.body)
			}
		}
	}

	// b's vote elsewhere decides commit: a's waiting vote answers committing.
	id := open()
	ch := vote(id, "20000")
	time.Sleep(200 * time.Millisecond)
	other.send(t, "", "PUT", votePathOf("j", id, "b"), `{"epoch":1,"vote":"prepared"}`)
	if a := within(t, "a commit elsewhere", ch, 5*time.Second); a.v.Status != Committing || a.took < 200*time.Millisecond {
		t.Fatalf("after b's vote elsewhere: %s after %s, want committing after b voted", a.v.Status, a.took)
	}
	ackBoth(id)

	// An operator's abort elsewhere: a's waiting vote answers aborted.
	id = open()
	ch = vote(id, "20000")
	time.Sleep(200 * time.Millisecond)
	other.send(t, "", "POST", fmt.Sprintf("/v1/jobs/j/checkpoints/%d/abort", id), `{"reason":"operator"}`)
	if a := within(t, "an abort elsewhere", ch, 5*time.Second); a.v.Status != Aborted {
		t.Fatalf("after an abort elsewhere: %s, want aborted", a.v.Status)
	}
	if r := other.send(t, "", "PUT", ackPathOf("j", id, "a"), `{"epoch":1}`); r.status != 200 {
		t.Fatalf("ack of the abort: %d %s", r.status, r.body)
	}

	// The last voter waits for nothing: it decides.
	id = open()
	other.send(t, "", "PUT", votePathOf("j", id, "b"), `{"epoch":1,"vote":"prepared"}`)
	if a := within(t, "the last vote", vote(id, "20000"), 2*time.Second); a.v.Status != Committing || a.took > time.Second {
		t.Fatalf("the last vote with wait_ms: %s after %s, want committing at once", a.v.Status, a.took)
	}
	ackBoth(id)

	// A change that wakes the job's waiters but leaves the voter owing nothing (another
	// participant, which has voted, registered again elsewhere): a's wait goes on until the
	// decision. a itself registered again elsewhere ends it: the waiting instance is fenced.
	other.send(t, "", "PUT", "/v1/jobs/m", `{"participants":["a","b","c"]}`)
	for _, p := range []string{"a", "b", "c"} {
		other.send(t, "", "POST", "/v1/jobs/m/participants/"+p+"/register", "")
	}
	openM := func(id int64) <-chan timed[Checkpoint] {
		if r := other.send(t, "", "POST", "/v1/jobs/m/checkpoints", ""); r.status != 201 {
			t.Fatalf("open m/%d: %d %s", id, r.status, r.body)
		}
		other.send(t, "", "PUT", votePathOf("m", id, "b"), `{"epoch":1,"vote":"prepared"}`)
		ch := sendTimed[Checkpoint](t, waiter, "PUT", votePathOf("m", id, "a")+"?wait_ms=20000", `{"epoch":1,"vote":"prepared"}`)
		time.Sleep(200 * time.Millisecond)
		return ch
	}
	chm := openM(1)
	other.send(t, "", "POST", "/v1/jobs/m/participants/b/register", "") // b's epoch 2, its vote kept
	select {
	case a := <-chm:
		t.Fatalf("a's vote answered %s after %s when b registered again; want it to go on waiting", a.v.Status, a.took)
	case <-time.After(500 * time.Millisecond):
	}
	other.send(t, "", "PUT", votePathOf("m", 1, "c"), `{"epoch":1,"vote":"prepared"}`)
	if a := within(t, "the decision after another's registration", chm, 5*time.Second); a.v.Status != Committing {
		t.Fatalf("after b registered again and c voted: %s, want committing", a.v.Status)
	}
	for p, epoch := range map[string]int{"a": 1, "b": 2, "c": 1} {
		if r := other.send(t, "", "PUT", ackPathOf("m", 1, p), fmt.Sprintf(`{"epoch":%d}`, epoch)); r.status != 200 {
			t.Fatalf("ack %s of m/1: %d %s", p, r.status, r.body)
		}
	}
	chm = openM(2)
	other.send(t, "", "POST", "/v1/jobs/m/participants/a/register", "") // a's epoch 2
	if a := within(t, "the voter registered again", chm, 5*time.Second); a.v.Status != Preparing {
		t.Fatalf("after a registered again elsewhere: %s, want preparing", a.v.Status)
	}

	// A newer checkpoint opened elsewhere, in a job of two at once: a's vote answers, the
	// checkpoint still preparing.
	other.send(t, "", "PUT", "/v1/jobs/k", `{"participants":["a","b"],"max_concurrent_checkpoints":2}`)
	other.send(t, "", "POST", "/v1/jobs/k/participants/a/register", "")
	if r := other.send(t, "", "POST", "/v1/jobs/k/checkpoints", ""); r.status != 201 {
		t.Fatalf("open k/1: %d %s", r.status, r.body)
	}
	chk := sendTimed[Checkpoint](t, waiter, "PUT", votePathOf("k", 1, "a")+"?wait_ms=20000", `{"epoch":1,"vote":"prepared"}`)
	time.Sleep(200 * time.Millisecond)
	if r := other.send(t, "", "POST", "/v1/jobs/k/checkpoints", ""); r.status != 201 {
		t.Fatalf("open k/2: %d %s", r.status, r.body)
	}
	if a := within(t, "a newer checkpoint elsewhere", chk, 5*time.Second); a.v.Id != 1 || a.v.Status != Preparing || a.took < 200*time.Millisecond {
		t.Fatalf("after k/2 opened elsewhere: checkpoint %d %s after %s, want 1 preparing after the opening", a.v.Id, a.v.Status, a.took)
	}

	// Nobody else votes: it answers preparing at its wait_ms, not before.
	id = open()
	if a := within(t, "an undecided wait", vote(id, "300"), 5*time.Second); a.v.Status != Preparing || a.took < 300*time.Millisecond {
		t.Fatalf("an undecided vote with wait_ms=300: %s after %s, want preparing after 300 ms", a.v.Status, a.took)
	}

	// Shutdown answers it at once, the vote recorded.
	ch = vote(id, "20000")
	time.Sleep(200 * time.Millisecond)
	waiterSvc.EndWaits()
	if a := within(t, "a shutdown", ch, 3*time.Second); a.v.Status != Preparing {
		t.Fatalf("after EndWaits: %s, want preparing", a.v.Status)
	}
	other.send(t, "", "PUT", votePathOf("j", id, "b"), `{"epoch":1,"vote":"prepared"}`)
	ackBoth(id)

	// Bounds, checked before the vote: nothing recorded.
	id = open()
	for _, bad := range []string{"-1", "60001", "x"} {
		if r := other.send(t, "", "PUT", votePathOf("j", id, "a")+"?wait_ms="+bad, `{"epoch":1,"vote":"prepared"}`); r.status != 400 {
			t.Errorf("wait_ms=%s: %d %s, want 400", bad, r.status, r.body)
		}
	}
	r := other.send(t, "", "GET", fmt.Sprintf("/v1/jobs/j/checkpoints/%d", id), "")
	var cp Checkpoint
	if err := json.Unmarshal(r.body, &cp); err != nil || r.status != 200 {
		t.Fatalf("read: %d %s", r.status, r.body)
	}
	for _, p := range cp.Participants {
		if p.Vote != nil {
			t.Fatalf("after refused votes, %s's vote is %s; want none recorded", p.Name, *p.Vote)
		}
	}
}

// A vote whose checkpoint is decided between the vote and the look at what its voter
// owes (the decision is then owed) answers the decision, not preparing: the voter learns
// it from its vote.
func TestVoteAnswersADecisionTakenDuringItsLook(t *testing.T) {
	onEachStore(t, testVoteAnswersADecisionTakenDuringItsLook)
}

func testVoteAnswersADecisionTakenDuringItsLook(t *testing.T) {
	// Only the store's own methods: the service reads what the voter owes and the
	// checkpoint from the store, as it does when another coordinator changed the job.
	st := &decidingOnLook{Store: testStore(t)}
	svc := coordinator.NewService(st, nil)
	srv := httptest.NewServer(NewHandler(svc, Options{Logger: slog.New(slog.DiscardHandler), RequestTimeout: time.Minute}))
	t.Cleanup(srv.Close)
	b := &bundle{url: srv.URL, store: st}
	b.job(t, "j", `{"participants":["a","b"]}`, "a", "b")
	var cp Checkpoint
	b.call(t, "POST", "/v1/jobs/j/checkpoints", "", "").ok(t, 201, &cp)
	st.arm(func(ctx context.Context) {
		if _, err := svc.Vote(ctx, "j", cp.Id, "b", coordinator.Vote{Epoch: 1, Kind: coordinator.VotePrepared}); err != nil {
			t.Errorf("b's vote: %v", err)
		}
	})
	var got Checkpoint
	b.json(t, "PUT", votePathOf("j", cp.Id, "a")+"?wait_ms=30000", `{"epoch":1,"vote":"prepared"}`).ok(t, 200, &got)
	if !st.fired() {
		t.Fatal("the store was never asked what a owes")
	}
	if got.Status != Committing {
		t.Fatalf("a's vote answered %s; want committing (b's vote decided while a's look ran)", got.Status)
	}
}

// decidingOnLook is a store that, once armed, runs a function (another participant's
// vote) the first time it is asked what a job's participants owe, before answering.
type decidingOnLook struct {
	coordinator.Store
	mu     sync.Mutex
	before func(context.Context)
	done   bool
}

func (s *decidingOnLook) arm(fn func(context.Context)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.before = fn
}

func (s *decidingOnLook) fired() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}

func (s *decidingOnLook) Owing(ctx context.Context, job, participant string) (*coordinator.Job, time.Time, []*coordinator.Checkpoint, error) {
	s.mu.Lock()
	fn := s.before
	s.before = nil
	s.mu.Unlock()
	if fn != nil {
		fn(ctx)
		s.mu.Lock()
		s.done = true
		s.mu.Unlock()
	}
	return s.Store.Owing(ctx, job, participant)
}
