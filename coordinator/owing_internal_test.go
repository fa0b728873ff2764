package coordinator

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// owingStore answers Owing with a fixed read, counting the calls; each call first waits for
// a value on release when release is not nil. Every other method panics.
type owingStore struct {
	Store
	calls   atomic.Int64
	release chan struct{}
	job     *Job
	owing   []*Checkpoint
}

func (s *owingStore) Owing(ctx context.Context, job, participant string) (*Job, time.Time, []*Checkpoint, error) {
	s.calls.Add(1)
	if participant != "" {
		panic("owingReads reads for one participant: " + participant)
	}
	if s.release != nil {
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, time.Time{}, nil, ctx.Err()
		}
	}
	return s.job, time.Unix(100, 0), s.owing, nil
}

func owingFixture() *owingStore {
	prepared := &Checkpoint{ID: 7, Status: StatusPreparing, Participants: []ParticipantState{{Name: "a"}, {Name: "b", Vote: VotePrepared}}}
	aborted := &Checkpoint{ID: 5, Status: StatusAborted, Participants: []ParticipantState{{Name: "a"}, {Name: "b", Vote: VotePrepared}}}
	return &owingStore{job: &Job{Name: "j"}, owing: []*Checkpoint{aborted, prepared}}
}

// Callers that ask while a read of their job is not sent yet share it: the store is read
// once for all of them.
func TestOwingReadsJoinAReadNotSent(t *testing.T) {
	t.Parallel()
	st := owingFixture()
	r := newOwingReads()
	// A read whose first caller has not sent it yet.
	rd := &owingRead{done: make(chan struct{})}
	r.open["j"] = rd
	var wg sync.WaitGroup
	got := make([][]*Checkpoint, 3)
	for i := range got {
		wg.Go(func() {
			v, err := r.read(context.Background(), st, "j")
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = v.owing
		})
	}
	time.Sleep(20 * time.Millisecond) // they join
	sendRead(r, "j", rd)
	rd.view.job, rd.view.owing = st.job, st.owing
	close(rd.done)
	wg.Wait()
	if n := st.calls.Load(); n != 0 {
		t.Errorf("%d reads of the store by callers that could join an open read, want 0", n)
	}
	for i, owing := range got {
		if len(owing) != 2 {
			t.Errorf("caller %d got %d checkpoints, want the shared read's 2", i, len(owing))
		}
	}
}

// A read already sent is not joined: a caller that asks once the store is being read gets
// a read of its own, begun after it asked.
func TestOwingReadsNeverJoinARunningRead(t *testing.T) {
	t.Parallel()
	st := owingFixture()
	st.release = make(chan struct{})
	r := newOwingReads()
	first := make(chan error, 1)
	go func() {
		_, err := r.read(context.Background(), st, "j")
		first <- err
	}()
	for st.calls.Load() == 0 { // the first read is sent
		time.Sleep(time.Millisecond)
	}
	second := make(chan error, 1)
	go func() {
		_, err := r.read(context.Background(), st, "j")
		second <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); st.calls.Load() < 2; {
		select {
		case <-second:
			t.Fatal("the second caller was answered by the read sent before it asked")
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			close(st.release)
			t.Fatal("the second caller joined the read sent before it asked")
		}
	}
	close(st.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
}

// When the caller that sent a shared read gives up, the others read again by themselves
// instead of taking its cancellation for their answer.
func TestOwingReadsOutliveTheirFirstCaller(t *testing.T) {
	t.Parallel()
	st := owingFixture()
	r := newOwingReads()
	rd, answered := joinOpenRead(t, r, st)
	// The first caller's context ends during the read, and the store answers with an error
	// of its own (a connection closed under it), not the context's.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rd.run(ctx, brokenStore{}, "j")
	if err := <-answered; err != nil {
		t.Fatalf("a joined caller got %v, want its own read", err)
	}
	if n := st.calls.Load(); n != 1 {
		t.Errorf("%d reads of the store, want 1 (the joined caller's own)", n)
	}
}

// Each participant gets, in a slice of its own, the checkpoints it may owe something in.
func TestOwingForParticipant(t *testing.T) {
	t.Parallel()
	st := owingFixture()
	a := OwingOf(st.owing, "a") // owes its vote on 7; nothing on 5 (no prepared vote)
	b := OwingOf(st.owing, "b") // owes the abort's ack on 5; voted on 7 but may owe (MayOwe)
	if len(a) != 1 || a[0].ID != 7 {
		t.Errorf("a: %v, want checkpoint 7", ids(a))
	}
	if len(b) != 2 {
		t.Errorf("b: %v, want checkpoints 5 and 7", ids(b))
	}
	b[0], b[1] = b[1], b[0]
	if st.owing[0].ID != 5 {
		t.Error("a participant's slice shares the read's")
	}
	if got := OwingOf(st.owing, "c"); len(got) != 0 {
		t.Errorf("c: %v, want none", ids(got))
	}
}

// joinOpenRead opens a read of job j as a first caller does, has a caller on st join it,
// and takes the read out of open as the first caller does before sending it. The joined
// caller's error comes on answered; if it gets an answer, it must be st's two checkpoints.
func joinOpenRead(t *testing.T, r *owingReads, st *owingStore) (rd *owingRead, answered <-chan error) {
	t.Helper()
	rd = &owingRead{done: make(chan struct{})}
	r.open["j"] = rd
	ch := make(chan error, 1)
	go func() {
		v, err := r.read(context.Background(), st, "j")
		if err == nil && len(v.owing) != 2 {
			t.Errorf("got %d checkpoints, want 2", len(v.owing))
		}
		ch <- err
	}()
	time.Sleep(20 * time.Millisecond) // it joins
	sendRead(r, "j", rd)
	return rd, ch
}

// sendRead does what a read's first caller does before it reads the store: it takes the
// read out of open, so that no one joins it from then on.
func sendRead(r *owingReads, job string, rd *owingRead) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.open[job] == rd {
		delete(r.open, job)
	}
}

func ids(cps []*Checkpoint) []int64 {
	var out []int64
	for _, cp := range cps {
		out = append(out, cp.ID)
	}
	return out
}

// brokenStore fails every Owing as a store whose connection broke does.
type brokenStore struct{ Store }

func (brokenStore) Owing(context.Context, string, string) (*Job, time.Time, []*Checkpoint, error) {
	return nil, time.Time{}, nil, Unavailable(errors.New("connection closed"))
}

// panicStore panics in Owing.
type panicStore struct{ Store }

func (panicStore) Owing(context.Context, string, string) (*Job, time.Time, []*Checkpoint, error) {
	panic("the store failed")
}

// A read whose first caller panicked in the store does not leave the others waiting: they
// read by themselves.
func TestOwingReadsSurviveAPanic(t *testing.T) {
	t.Parallel()
	r := newOwingReads()
	st := owingFixture()
	rd, answered := joinOpenRead(t, r, st)
	// What the first caller does, with a store that panics.
	func() {
		defer func() { _ = recover() }()
		rd.run(context.Background(), panicStore{}, "j")
	}()
	select {
	case err := <-answered:
		if err != nil {
			t.Fatalf("a joined caller got %v, want its own read", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a joined caller still waits on a read whose first caller panicked")
	}
	// The real first caller: the panic goes on up to it, and the read is closed.
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the store's panic did not reach the first caller")
			}
		}()
		_, _ = r.read(context.Background(), panicStore{}, "k")
	}()
	if _, open := r.open["k"]; open {
		t.Error("a read whose store panicked is still open to join")
	}
}
