package coordinatorclient_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twophase/coordinator/api"
	cc "github.com/twophase/coordinator/clients/go/coordinatorclient"
	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/pgtest"
	"github.com/twophase/coordinator/store/postgres"
)

// These tests run the participant library against the real coordinator: the API handler
// and the service in process, on a database of its own in a real PostgreSQL (pgtest).
// A fault injector sits between the two to make the coordinator fail on demand.

type bundle struct {
	url    string
	coord  *cc.Coordinator
	faults *faults
}

func setup(t *testing.T) *bundle {
	t.Helper()
	f := &faults{}
	_, url, coord := serveCoordinator(t, f.wrap)
	return &bundle{url: url, coord: coord, faults: f}
}

// serveCoordinator serves a coordinator on PostgreSQL (its sweeper every 50 ms) through
// wrap, and returns the test's context, the server's URL and a client of it with short
// backoffs.
func serveCoordinator(t *testing.T, wrap func(http.Handler) http.Handler) (context.Context, string, *cc.Coordinator) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	store, err := postgres.Open(ctx, pgtest.URL(t), postgres.Options{})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(store.Close)
	svc := coordinator.NewService(store, nil)
	go svc.RunSweeper(ctx, 50*time.Millisecond)
	srv := httptest.NewServer(wrap(api.NewHandler(svc, api.Options{Logger: slog.New(slog.DiscardHandler), RequestTimeout: time.Minute})))
	t.Cleanup(srv.Close)
	coord, err := cc.NewCoordinator(srv.URL, cc.Options{MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, srv.URL, coord
}

// fault is what the injector does to one request.
type fault int

const (
	pass         fault = iota
	unavailable        // answer 503 with Retry-After, without reaching the coordinator
	serverError        // answer 500, without reaching the coordinator
	dropRequest        // close the connection without an answer, before the coordinator sees it
	dropResponse       // let the coordinator process it, then close the connection unanswered
)

// faults decides per request; rule is consulted for each request, nil passes all.
type faults struct {
	mu    sync.Mutex
	rule  func(r *http.Request) fault
	seen  []string // "METHOD path" of every request
	fired atomic.Int64
}

func (f *faults) set(rule func(r *http.Request) fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rule = rule
}

func (f *faults) requests(prefix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, s := range f.seen {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

func (f *faults) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.seen = append(f.seen, r.Method+" "+r.URL.Path)
		rule := f.rule
		f.mu.Unlock()
		what := pass
		if rule != nil {
			what = rule(r)
		}
		if what != pass {
			f.fired.Add(1)
		}
		switch what {
		case unavailable:
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"type":"about:blank","title":"Service Unavailable","status":503,"code":"unavailable"}`)
		case serverError:
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, `{"type":"about:blank","title":"Internal Server Error","status":500,"code":"internal"}`)
		case dropRequest:
			hijackClose(w)
		case dropResponse:
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			hijackClose(w)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

func hijackClose(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = conn.Close()
}

// failFirst returns a rule that applies what to the first n requests matching
// method and path substring, then passes everything.
func failFirst(n int64, what fault, method, pathContains string) func(r *http.Request) fault {
	var count atomic.Int64
	return func(r *http.Request) fault {
		if r.Method == method && strings.Contains(r.URL.Path, pathContains) && count.Add(1) <= n {
			return what
		}
		return pass
	}
}

func (b *bundle) putJob(t *testing.T, job string, cfg cc.JobConfig) {
	t.Helper()
	if _, err := b.coord.PutJob(context.Background(), job, cfg); err != nil {
		t.Fatalf("put job: %v", err)
	}
}

func (b *bundle) open(t *testing.T, job string) int64 {
	t.Helper()
	cp, err := b.coord.OpenCheckpoint(context.Background(), job, "", 0)
	if err != nil {
		t.Fatalf("open checkpoint: %v", err)
	}
	return cp.Id
}

func (b *bundle) checkpoint(t *testing.T, job string, id int64) *cc.Checkpoint {
	t.Helper()
	cp, err := b.coord.Checkpoint(context.Background(), job, id, 0)
	if err != nil {
		t.Fatalf("get checkpoint %d: %v", id, err)
	}
	return cp
}

// waitStatus polls checkpoint id until it has status want.
func (b *bundle) waitStatus(t *testing.T, job string, id int64, want cc.CheckpointStatus) *cc.Checkpoint {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		cp := b.checkpoint(t, job, id)
		if cp.Status == want {
			return cp
		}
		if time.Now().After(deadline) {
			t.Fatalf("checkpoint %d is %s, want %s: %+v", id, cp.Status, want, cp)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// txn is the committable type of the test participants.
type txn struct {
	Participant string `json:"participant"`
	Checkpoint  int64  `json:"checkpoint"`
}

// call is one call of a recorded participant.
type call struct {
	Kind         string // prepare, commit, abort
	Checkpoint   int64
	Committables []txn
}

// recorder is a Participant that records its calls. Its Commit and Abort check, through
// the coordinator, that they run before this participant's ack (ack after apply, never
// before). Hooks replace the default behaviour.
type recorder struct {
	t     *testing.T
	b     *bundle
	job   string
	name  string
	epoch func() int64

	mu      sync.Mutex
	calls   []call
	prepare func(ctx context.Context, id int64) ([]txn, error)
	commit  func(ctx context.Context, id int64, cs []txn) error
}

func newRecorder(t *testing.T, b *bundle, job, name string) *recorder {
	return &recorder{t: t, b: b, job: job, name: name}
}

func (p *recorder) record(c call) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, c)
}

func (p *recorder) Calls(kind string) []call {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []call
	for _, c := range p.calls {
		if kind == "" || c.Kind == kind {
			out = append(out, c)
		}
	}
	return out
}

func (p *recorder) Prepare(ctx context.Context, id int64) ([]txn, error) {
	p.record(call{Kind: "prepare", Checkpoint: id})
	if p.prepare != nil {
		return p.prepare(ctx, id)
	}
	return []txn{{Participant: p.name, Checkpoint: id}}, nil
}

func (p *recorder) Commit(ctx context.Context, id int64, cs []txn) error {
	p.checkNotAcked(ctx, id)
	if p.commit != nil {
		if err := p.commit(ctx, id, cs); err != nil {
			return err
		}
	}
	p.record(call{Kind: "commit", Checkpoint: id, Committables: cs})
	return nil
}

func (p *recorder) Abort(ctx context.Context, id int64, cs []txn) error {
	p.checkNotAcked(ctx, id)
	p.record(call{Kind: "abort", Checkpoint: id, Committables: cs})
	return nil
}

func (p *recorder) checkNotAcked(ctx context.Context, id int64) {
	cp, err := p.b.coord.Checkpoint(ctx, p.job, id, 0)
	if err != nil {
		return
	}
	for _, q := range cp.Participants {
		if q.Name == p.name && q.AckedAt != nil {
			p.t.Errorf("%s: checkpoint %d was acked before its decision was applied", p.name, id)
		}
	}
}

// run starts a Runner of p; the returned function stops it and returns Run's error.
func run[C any](t *testing.T, b *bundle, job, name string, p cc.Participant[C]) (*cc.Runner[C], func() error) {
	t.Helper()
	r := cc.NewRunner(b.coord, job, name, p, cc.RunnerOptions{PollInterval: 10 * time.Millisecond, LongPoll: 2 * time.Second,
		MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	var err error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				t.Errorf("runner %s did not stop", name)
			}
			if errors.Is(err, context.Canceled) {
				err = nil
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return r, stop
}

func waitRegistered[C any](t *testing.T, r *cc.Runner[C]) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r.Epoch() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("runner did not register")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func ids(calls []call) []int64 {
	out := make([]int64, len(calls))
	for i, c := range calls {
		out[i] = c.Checkpoint
	}
	return out
}

func TestRoundsCommitInOrderAndAck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.putJob(t, "orders", cc.JobConfig{Participants: []string{"a", "b"}})
	pa, pb := newRecorder(t, b, "orders", "a"), newRecorder(t, b, "orders", "b")
	ra, stopA := run(t, b, "orders", "a", pa)
	rb, stopB := run(t, b, "orders", "b", pb)
	waitRegistered(t, ra)
	waitRegistered(t, rb)

	const rounds = 5
	for i := 1; i <= rounds; i++ {
		id := b.open(t, "orders")
		cp := b.waitStatus(t, "orders", id, cc.Committed)
		for _, p := range cp.Participants {
			got, err := cc.DecodeCommittables[txn](p.Committables)
			if err != nil || len(got) != 1 || got[0] != (txn{p.Name, id}) {
				t.Errorf("checkpoint %d: %s voted committables %s", id, p.Name, p.Committables)
			}
		}
	}
	for _, p := range []*recorder{pa, pb} {
		want := []int64{1, 2, 3, 4, 5}
		if got := ids(p.Calls("prepare")); !slices.Equal(got, want) {
			t.Errorf("%s prepared %v, want %v", p.name, got, want)
		}
		commits := p.Calls("commit")
		if got := ids(commits); !slices.Equal(got, want) {
			t.Errorf("%s committed %v, want %v", p.name, got, want)
		}
		for _, c := range commits {
			if len(c.Committables) != 1 || c.Committables[0] != (txn{p.name, c.Checkpoint}) {
				t.Errorf("%s commit %d got committables %+v", p.name, c.Checkpoint, c.Committables)
			}
		}
		if n := len(p.Calls("abort")); n != 0 {
			t.Errorf("%s aborted %d times", p.name, n)
		}
	}
	if err := stopA(); err != nil {
		t.Errorf("runner a: %v", err)
	}
	if err := stopB(); err != nil {
		t.Errorf("runner b: %v", err)
	}
}

// A participant that died after voting prepared finds the decision in pending when it
// comes back, and applies it with its committables, decoded, then acks.
func TestRecoversCommitAndAbortFromPending(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.putJob(t, "j", cc.JobConfig{Participants: []string{"a", "b"}})
	old, err := b.coord.Register(ctx, "j", "a")
	if err != nil {
		t.Fatal(err)
	}
	regB, err := b.coord.Register(ctx, "j", "b")
	if err != nil {
		t.Fatal(err)
	}
	vote := func(p string, epoch, id int64, kind cc.VoteKind, raw string) {
		t.Helper()
		v := cc.VoteRequest{Epoch: epoch, Vote: kind}
		if raw != "" {
			msg := cc.Committables(raw)
			v.Committables = &msg
		}
		if _, err := b.coord.Vote(ctx, "j", id, p, v); err != nil {
			t.Fatalf("vote %s on %d: %v", p, id, err)
		}
	}
	// Checkpoint 1 commits, 2 aborts (b votes abort), 3 commits: "a" (the old instance)
	// voted prepared on all three and then died without applying anything.
	for id := int64(1); id <= 3; id++ {
		b.open(t, "j")
		vote("a", old.Epoch, id, cc.VoteKindPrepared, fmt.Sprintf(`[{"participant":"a","checkpoint":%d}]`, id))
		if id == 2 {
			vote("b", regB.Epoch, id, cc.VoteKindAbort, "")
			continue
		}
		vote("b", regB.Epoch, id, cc.VoteKindPrepared, "")
		if _, err := b.coord.Ack(ctx, "j", id, "b", regB.Epoch); err != nil {
			t.Fatal(err)
		}
	}
	b.waitStatus(t, "j", 3, cc.Committing)

	pa := newRecorder(t, b, "j", "a")
	_, stop := run(t, b, "j", "a", pa)
	b.waitStatus(t, "j", 1, cc.Committed)
	b.waitStatus(t, "j", 3, cc.Committed)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := ids(pa.Calls("commit")); !slices.Equal(got, []int64{1, 3}) {
		t.Errorf("commits %v, want [1 3]", got)
	}
	aborts := pa.Calls("abort")
	if len(aborts) != 1 || aborts[0].Checkpoint != 2 || len(aborts[0].Committables) != 1 || aborts[0].Committables[0] != (txn{"a", 2}) {
		t.Errorf("aborts %+v, want checkpoint 2 with its committables", aborts)
	}
	// Everything a participant's pending list showed, in order.
	if got := ids(pa.Calls("")); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Errorf("calls in order %v, want [1 2 3]", got)
	}
	cp := b.checkpoint(t, "j", 2)
	for _, p := range cp.Participants {
		if p.Name == "a" && p.AckedAt == nil {
			t.Error("rollback of checkpoint 2 was not acked")
		}
	}
	if p, err := b.coord.Pending(ctx, "j", "a", 0); err != nil || len(p.Items) != 0 {
		t.Errorf("still owed after recovery: %+v, %v", p, err)
	}
}

// A checkpoint opened before the participant (re)registered, on which it had not voted,
// dies with its old instance: never prepared by the new one.
func TestCheckpointOpenBeforeRegistrationIsNotPrepared(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.putJob(t, "j", cc.JobConfig{Participants: []string{"a"}})
	if _, err := b.coord.Register(ctx, "j", "a"); err != nil {
		t.Fatal(err)
	}
	id := b.open(t, "j")
	pa := newRecorder(t, b, "j", "a")
	r, stop := run(t, b, "j", "a", pa)
	waitRegistered(t, r)
	b.waitStatus(t, "j", id, cc.Aborted)
	next := b.open(t, "j")
	b.waitStatus(t, "j", next, cc.Committed)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := ids(pa.Calls("prepare")); !slices.Equal(got, []int64{next}) {
		t.Errorf("prepared %v, want only %d", got, next)
	}
}

// Several commits owed at once are applied in checkpoint order, each acked after it is
// applied.
func TestManyOwedCommitsInCheckpointOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.putJob(t, "j", cc.JobConfig{Participants: []string{"a", "b"}, MaxConcurrentCheckpoints: ptr(5)})
	old, _ := b.coord.Register(ctx, "j", "a")
	regB, _ := b.coord.Register(ctx, "j", "b")
	for range 5 {
		b.open(t, "j")
	}
	// Votes arrive from the highest checkpoint down; decisions still follow checkpoint order.
	for id := int64(5); id >= 1; id-- {
		msg := cc.Committables(fmt.Sprintf(`[{"participant":"a","checkpoint":%d}]`, id))
		if _, err := b.coord.Vote(ctx, "j", id, "a", cc.VoteRequest{Epoch: old.Epoch, Vote: cc.VoteKindPrepared, Committables: &msg}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.coord.Vote(ctx, "j", id, "b", cc.VoteRequest{Epoch: regB.Epoch, Vote: cc.VoteKindPrepared}); err != nil {
			t.Fatal(err)
		}
	}
	var order []int64
	pa := newRecorder(t, b, "j", "a")
	pa.commit = func(ctx context.Context, id int64, cs []txn) error {
		order = append(order, id)
		return nil
	}
	_, stop := run(t, b, "j", "a", pa)
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, err := b.coord.Pending(ctx, "j", "a", 0)
		if err == nil && len(p.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still owed: %+v %v", p, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(order, []int64{1, 2, 3, 4, 5}) {
		t.Errorf("commit order %v", order)
	}
}

// A newer instance fences the older one: its Run stops with ErrFenced on its own.
func TestFencedInstanceStops(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.putJob(t, "j", cc.JobConfig{Participants: []string{"a"}})
	pa := newRecorder(t, b, "j", "a")
	r := cc.NewRunner(b.coord, "j", "a", cc.Participant[txn](pa), cc.RunnerOptions{PollInterval: 10 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitRegistered(t, r)
	if _, err := b.coord.Register(context.Background(), "j", "a"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, cc.ErrFenced) {
		t.Fatalf("Run returned %v, want ErrFenced", err)
	}
}

// A vote that is fenced (the newer instance registered while Prepare ran) stops the
// runner with ErrFenced and leaves the committables alone.
func TestFencedVoteStops(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.putJob(t, "j", cc.JobConfig{Participants: []string{"a"}})
	pa := newRecorder(t, b, "j", "a")
	reregistered := make(chan struct{})
	pa.prepare = func(ctx context.Context, id int64) ([]txn, error) {
		if _, err := b.coord.Register(context.Background(), "j", "a"); err != nil {
			t.Error(err)
		}
		close(reregistered)
		return []txn{{"a", id}}, nil
	}
	r := cc.NewRunner(b.coord, "j", "a", cc.Participant[txn](pa), cc.RunnerOptions{PollInterval: 10 * time.Millisecond})
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() { done <- r.Run(ctx) }()
	waitRegistered(t, r)
	b.open(t, "j")
	<-reregistered
	if err := <-done; !errors.Is(err, cc.ErrFenced) {
		t.Fatalf("Run returned %v, want ErrFenced", err)
	}
	if n := len(pa.Calls("abort")); n != 0 {
		t.Errorf("fenced instance rolled back %d times; the next instance owns that", n)
	}
}

func ptr[T any](v T) *T { return &v }
