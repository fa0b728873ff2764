package coordinatorclient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cc "github.com/twophase/coordinator/clients/go/coordinatorclient"
)

// idleRequest is one request the counting handler saw.
type idleRequest struct {
	method, path string
	query        string
	started      time.Time
	ended        time.Time
	status       int
	body         []byte
}

// idleCounter records every request it passes to next, with its answer.
type idleCounter struct {
	mu   sync.Mutex
	seen []*idleRequest
}

func (c *idleCounter) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := &idleRequest{method: r.Method, path: r.URL.Path, query: r.URL.RawQuery, started: time.Now()}
		c.mu.Lock()
		c.seen = append(c.seen, req)
		c.mu.Unlock()
		rec := &idleRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		c.mu.Lock()
		req.ended, req.status, req.body = time.Now(), rec.status, rec.body.Bytes()
		c.mu.Unlock()
	})
}

// waitFor returns the first request seen for which f is true, waiting for one up to 10 s
// (then the test fails, naming what it waited for).
func (c *idleCounter) waitFor(t *testing.T, what string, f func(idleRequest) bool) idleRequest {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		for _, req := range c.requests() {
			if f(req) {
				return req
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s; requests: %+v", what, c.requests())
		}
	}
}

// requests returns a copy of what was seen so far.
func (c *idleCounter) requests() []idleRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]idleRequest, len(c.seen))
	for i, r := range c.seen {
		out[i] = *r
	}
	return out
}

// idleRecorder passes the answer on and keeps a copy of it.
type idleRecorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *idleRecorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

func (r *idleRecorder) Write(b []byte) (int, error) {
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}

func (r *idleRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// countedCoordinator serves a coordinator (serveCoordinator) through an idleCounter, and
// returns a client of it and the test's context.
func countedCoordinator(t *testing.T) (context.Context, *cc.Coordinator, *idleCounter) {
	t.Helper()
	counter := &idleCounter{}
	ctx, _, coord := serveCoordinator(t, counter.wrap)
	return ctx, coord, counter
}

// runUntilCleanup runs r in the background until the test ends, then stops it, and fails
// the test if it does not stop or returns an error other than its context's end.
func runUntilCleanup[C any](t *testing.T, ctx context.Context, r *cc.Runner[C]) {
	t.Helper()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("the Runner did not stop")
		}
	})
}

// idleParticipant tells when the Runner prepares.
type idleParticipant struct {
	prepared chan int64
}

func (p *idleParticipant) Prepare(ctx context.Context, id int64) ([]string, error) {
	select {
	case p.prepared <- id:
	default:
	}
	return []string{"txn"}, nil
}

func (p *idleParticipant) Commit(ctx context.Context, id int64, cs []string) error { return nil }

func (p *idleParticipant) Abort(ctx context.Context, id int64, cs []string) error { return nil }

// TestIdleRunnerOnePendingPerWait checks what RunnerOptions.LongPoll promises: an idle
// Runner (nothing owed, nothing in doubt) costs one request per LongPoll, a long-poll on
// pending with wait_ms, and nothing else; and a checkpoint opened while it waits wakes that
// very request, so that the Runner votes at once rather than on its next poll.
func TestIdleRunnerOnePendingPerWait(t *testing.T) {
	t.Parallel()
	ctx, coord, counter := countedCoordinator(t)
	if _, err := coord.PutJob(ctx, "idle", cc.JobConfig{Participants: []string{"a"}}); err != nil {
		t.Fatalf("put job: %v", err)
	}

	const longPoll = 500 * time.Millisecond
	const idleFor = 2200 * time.Millisecond
	p := &idleParticipant{prepared: make(chan int64, 1)}
	r := cc.NewRunner(coord, "idle", "a", cc.Participant[string](p), cc.RunnerOptions{LongPoll: longPoll})
	start := len(counter.requests()) // the PUT of the job
	runUntilCleanup(t, ctx, r)
	began := time.Now()
	time.Sleep(idleFor)

	pendingPath := "/v1/jobs/idle/participants/a/pending"
	idle := counter.requests()[start:]
	var pendings []idleRequest
	for i, req := range idle {
		switch {
		case i == 0 && req.method == "POST" && req.path == "/v1/jobs/idle/participants/a/register":
		case req.method == "GET" && req.path == pendingPath:
			pendings = append(pendings, req)
		default:
			t.Errorf("request %d of the idle Runner: %s %s?%s, want only the registration and then long-polls on pending", i, req.method, req.path, req.query)
		}
	}
	if len(idle) == 0 || idle[0].path != "/v1/jobs/idle/participants/a/register" {
		t.Fatalf("the Runner's first request is not its registration: %+v", idle)
	}
	t.Logf("in %s of idling with LongPoll %s: %d requests, %d of them on pending", idleFor, longPoll, len(idle), len(pendings))
	for i, req := range pendings {
		t.Logf("pending %d: ?%s at +%s, held %s", i, req.query, req.started.Sub(began).Round(time.Millisecond), func() time.Duration {
			if req.ended.IsZero() {
				return 0 // still held
			}
			return req.ended.Sub(req.started).Round(time.Millisecond)
		}())
	}
	if n := len(pendings); n < 3 || n > 6 {
		t.Errorf("%d requests on pending in %s with LongPoll %s, want 3 to 6 (one per LongPoll, plus the first)", n, idleFor, longPoll)
	}
	for i, req := range pendings {
		if i > 0 && req.query != "wait_ms=500&epoch=1" {
			t.Errorf("pending request %d carried ?%s, want wait_ms=500&epoch=1 (the epoch of its registration)", i, req.query)
		}
		if !req.ended.IsZero() && req.ended.Sub(req.started) < longPoll-50*time.Millisecond && req.query == "wait_ms=500&epoch=1" {
			t.Errorf("pending request %d was answered after %s, before its wait_ms: %s", i, req.ended.Sub(req.started), req.body)
		}
	}

	// A checkpoint opened while the Runner's long-poll is held: that request answers with
	// the vote item, and the Runner votes within a second.
	waitHeld := func() idleRequest {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			reqs := counter.requests()
			last := reqs[len(reqs)-1]
			if last.path == pendingPath && last.ended.IsZero() && time.Since(last.started) > 100*time.Millisecond &&
				time.Since(last.started) < 300*time.Millisecond {
				return last
			}
			if time.Now().After(deadline) {
				t.Fatalf("no long-poll on pending held for 100 to 300 ms within 5 s")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	held := waitHeld()
	opening := time.Now()
	cp, err := coord.OpenCheckpoint(ctx, "idle", "", 0)
	if err != nil {
		t.Fatalf("open checkpoint: %v", err)
	}
	opened := time.Now()
	var voted time.Time
	deadline := time.Now().Add(5 * time.Second)
	for voted.IsZero() {
		for _, req := range counter.requests() {
			if req.method == "PUT" && strings.HasSuffix(req.path, "/votes/a") && !req.ended.IsZero() {
				voted = req.ended
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Runner did not vote on checkpoint %d within 5 s", cp.Id)
		}
		time.Sleep(2 * time.Millisecond)
	}
	delay := voted.Sub(opened)
	t.Logf("checkpoint %d opened %s into a held long-poll (the open took %s); the Runner's vote answered %s after the open",
		cp.Id, opening.Sub(held.started).Round(time.Millisecond), opened.Sub(opening).Round(time.Millisecond), delay.Round(time.Millisecond))
	if delay > time.Second {
		t.Errorf("the Runner voted %s after the checkpoint opened, want within 1 s", delay)
	}
	// The request that brought the vote item is the one held when the checkpoint opened,
	// answered before its wait_ms ran out: woken, not a new poll.
	var woke *idleRequest
	for _, req := range counter.requests() {
		if req.path == pendingPath && req.started.Equal(held.started) {
			woke = &req
		}
	}
	if woke == nil || woke.ended.IsZero() {
		t.Fatalf("the held long-poll was not answered: %+v", woke)
	}
	var answer cc.Pending
	if err := json.Unmarshal(woke.body, &answer); err != nil {
		t.Fatalf("the held long-poll's answer %s: %v", woke.body, err)
	}
	heldFor := woke.ended.Sub(woke.started)
	t.Logf("the held long-poll answered %s after the open, after %s of its %s", woke.ended.Sub(opened).Round(time.Millisecond), heldFor.Round(time.Millisecond), longPoll)
	if len(answer.Items) != 1 || answer.Items[0].Checkpoint != cp.Id || answer.Items[0].Action != cc.PendingActionVote {
		t.Errorf("the held long-poll answered %s, want the vote on checkpoint %d", woke.body, cp.Id)
	}
	if heldFor >= longPoll {
		t.Errorf("the held long-poll answered after %s, its whole wait: not woken by the checkpoint", heldFor)
	}
	select {
	case id := <-p.prepared:
		if id != cp.Id {
			t.Errorf("prepared %d, want %d", id, cp.Id)
		}
	default:
		t.Error("the Runner voted without calling Prepare")
	}
}

// TestRunnerVotesOnANewerCheckpointWhileItsVoteWaits checks that a Runner of a job that
// may hold several checkpoints preparing at once, whose vote waits for its checkpoint's
// decision, votes on a checkpoint opened meanwhile without waiting for that decision: the
// coordinator ends the vote's wait, the checkpoint still preparing, and the Runner's
// long-poll on pending brings the new one. Both are then committed, in order.
func TestRunnerVotesOnANewerCheckpointWhileItsVoteWaits(t *testing.T) {
	t.Parallel()
	ctx, coord, counter := countedCoordinator(t)
	two := 2
	if _, err := coord.PutJob(ctx, "decide", cc.JobConfig{Participants: []string{"a", "b"}, MaxConcurrentCheckpoints: &two}); err != nil {
		t.Fatalf("put job: %v", err)
	}
	regB, err := coord.Register(ctx, "decide", "b")
	if err != nil {
		t.Fatalf("register b: %v", err)
	}
	p := &idleParticipant{prepared: make(chan int64, 2)}
	r := cc.NewRunner(coord, "decide", "a", cc.Participant[string](p), cc.RunnerOptions{LongPoll: 30 * time.Second})
	runUntilCleanup(t, ctx, r)
	// Open once the Runner has registered: its registration would abort a checkpoint
	// opened before it.
	for deadline := time.Now().Add(10 * time.Second); r.Epoch() == 0; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the Runner did not register within 10 s")
		}
	}
	path := func(kind string, id int64) string {
		return "/v1/jobs/decide/checkpoints/" + strconv.FormatInt(id, 10) + "/" + kind + "/a"
	}
	first, err := coord.OpenCheckpoint(ctx, "decide", "", 0)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	vote1 := counter.waitFor(t, "the Runner's vote on the first checkpoint, held for 100 ms", func(req idleRequest) bool {
		return req.method == "PUT" && req.path == path("votes", first.Id) && strings.Contains(req.query, "wait_ms=") &&
			req.ended.IsZero() && time.Since(req.started) > 100*time.Millisecond
	})
	opened := time.Now()
	second, err := coord.OpenCheckpoint(ctx, "decide", "", 0)
	if err != nil {
		t.Fatalf("open the second: %v", err)
	}
	// Before b votes on the first: the Runner does not wait for that decision.
	counter.waitFor(t, "the Runner's vote on the second checkpoint", func(req idleRequest) bool {
		return req.method == "PUT" && req.path == path("votes", second.Id)
	})
	vote1 = counter.waitFor(t, "the first vote's answer", func(req idleRequest) bool { return req.started.Equal(vote1.started) && !req.ended.IsZero() })
	var answer cc.Checkpoint
	if err := json.Unmarshal(vote1.body, &answer); err != nil {
		t.Fatalf("the first vote's answer %s: %v", vote1.body, err)
	}
	if answer.Status != cc.Preparing || vote1.ended.Before(opened) {
		t.Errorf("the first vote answered %s at %s, the second checkpoint opened at %s: want preparing, after the opening",
			answer.Status, vote1.ended.Format(time.StampMicro), opened.Format(time.StampMicro))
	}
	empty := json.RawMessage(`[]`)
	for _, id := range []int64{first.Id, second.Id} {
		if _, err := coord.Vote(ctx, "decide", id, "b", cc.VoteRequest{Epoch: regB.Epoch, Vote: cc.VoteKindPrepared, Committables: &empty}); err != nil {
			t.Fatalf("vote b on %d: %v", id, err)
		}
	}
	ack1 := counter.waitFor(t, "the Runner's ack of the first", func(req idleRequest) bool { return req.path == path("acks", first.Id) && !req.ended.IsZero() })
	ack2 := counter.waitFor(t, "the Runner's ack of the second", func(req idleRequest) bool { return req.path == path("acks", second.Id) && !req.ended.IsZero() })
	if ack2.started.Before(ack1.ended) {
		t.Errorf("the Runner acked the second checkpoint at %s, before the first's ack ended at %s: want checkpoint order",
			ack2.started.Format(time.StampMicro), ack1.ended.Format(time.StampMicro))
	}
}

// TestRunnerLearnsTheDecisionFromItsVote checks that a Runner of a job that holds one
// checkpoint preparing at a time (the default) has its prepared vote wait for the
// decision: the vote, held across the other participant's vote, answers the decision,
// and the Runner's next request is its ack, after Commit (or, when the other voted abort,
// Abort of its committables): no request of its own to learn the decision.
func TestRunnerLearnsTheDecisionFromItsVote(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		other cc.VoteKind
		want  cc.CheckpointStatus
	}{{cc.VoteKindPrepared, cc.Committing}, {cc.VoteKindAbort, cc.Aborted}} {
		t.Run(string(c.other), func(t *testing.T) {
			t.Parallel()
			testRunnerLearnsTheDecisionFromItsVote(t, c.other, c.want)
		})
	}
}

// decisionParticipant records the decisions the Runner applies.
type decisionParticipant struct {
	idleParticipant
	applied chan string
}

func (p *decisionParticipant) Commit(ctx context.Context, id int64, cs []string) error {
	p.applied <- "commit " + strings.Join(cs, ",")
	return nil
}

func (p *decisionParticipant) Abort(ctx context.Context, id int64, cs []string) error {
	p.applied <- "abort " + strings.Join(cs, ",")
	return nil
}

func testRunnerLearnsTheDecisionFromItsVote(t *testing.T, other cc.VoteKind, want cc.CheckpointStatus) {
	ctx, coord, counter := countedCoordinator(t)
	if _, err := coord.PutJob(ctx, "one", cc.JobConfig{Participants: []string{"a", "b"}}); err != nil {
		t.Fatalf("put job: %v", err)
	}
	regB, err := coord.Register(ctx, "one", "b")
	if err != nil {
		t.Fatalf("register b: %v", err)
	}
	p := &decisionParticipant{idleParticipant: idleParticipant{prepared: make(chan int64, 1)}, applied: make(chan string, 4)}
	r := cc.NewRunner(coord, "one", "a", cc.Participant[string](p), cc.RunnerOptions{LongPoll: 10 * time.Second})
	runUntilCleanup(t, ctx, r)
	// Open once the Runner has read the job and waits on pending.
	pendingPath := "/v1/jobs/one/participants/a/pending"
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		reqs := counter.requests()
		if last := reqs[len(reqs)-1]; last.path == pendingPath && last.ended.IsZero() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Runner is not waiting on pending within 10 s: %+v", reqs)
		}
	}
	cp, err := coord.OpenCheckpoint(ctx, "one", "", 0)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	votePath := "/v1/jobs/one/checkpoints/" + strconv.FormatInt(cp.Id, 10) + "/votes/a"
	ackPath := "/v1/jobs/one/checkpoints/" + strconv.FormatInt(cp.Id, 10) + "/acks/a"
	// The Runner's vote, held for 50 ms: then b votes.
	held := counter.waitFor(t, "the Runner's vote, held", func(req idleRequest) bool {
		return req.method == "PUT" && req.path == votePath && req.ended.IsZero() && time.Since(req.started) > 50*time.Millisecond
	})
	if !strings.Contains(held.query, "wait_ms=10000") {
		t.Errorf("the Runner's vote carried ?%s, want wait_ms=10000 (its LongPoll)", held.query)
	}
	decided := time.Now()
	vote := cc.VoteRequest{Epoch: regB.Epoch, Vote: other}
	if other == cc.VoteKindPrepared {
		empty := json.RawMessage(`[]`)
		vote.Committables = &empty
	} else {
		reason := "disk full"
		vote.Reason = &reason
	}
	if _, err := coord.Vote(ctx, "one", cp.Id, "b", vote); err != nil {
		t.Fatalf("vote b: %v", err)
	}
	ack := counter.waitFor(t, "the Runner's ack", func(req idleRequest) bool { return req.method == "PUT" && req.path == ackPath && !req.ended.IsZero() })
	var voted idleRequest
	var between []idleRequest
	for _, req := range counter.requests() {
		switch {
		case req.method == "PUT" && req.path == votePath:
			voted = req
		case req.started.After(held.started) && req.started.Before(ack.started) && !strings.HasSuffix(req.path, "/votes/b"): // b's vote is the test's
			between = append(between, req)
		}
	}
	if len(between) != 0 {
		t.Errorf("between its vote and its ack the Runner sent %+v, want nothing", between)
	}
	var answer cc.Checkpoint
	if err := json.Unmarshal(voted.body, &answer); err != nil {
		t.Fatalf("the vote's answer %s: %v", voted.body, err)
	}
	if answer.Status != want {
		t.Errorf("the Runner's vote answered %s, want %s", voted.body, want)
	}
	if !voted.started.Before(decided) || voted.ended.Before(decided) {
		t.Errorf("the vote ran from %s to %s, b voting at %s: want it held across b's vote",
			voted.started.Format(time.StampMicro), voted.ended.Format(time.StampMicro), decided.Format(time.StampMicro))
	}
	applied := map[cc.CheckpointStatus]string{cc.Committing: "commit txn", cc.Aborted: "abort txn"}[want]
	select {
	case got := <-p.applied:
		if got != applied {
			t.Errorf("the Runner applied %q, want %q", got, applied)
		}
	default:
		t.Errorf("the Runner acked without applying the decision (%q)", applied)
	}
}
