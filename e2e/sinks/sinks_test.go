package sinks_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/twophase/coordinator/api"
	cc "github.com/twophase/coordinator/clients/go/coordinatorclient"
	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/e2e/harness"
	"github.com/twophase/coordinator/e2e/sinks"
	"github.com/twophase/coordinator/store/pgtest"
	"github.com/twophase/coordinator/store/postgres"
)

func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }

// coordinatorFor runs the coordinator in process (API handler and service) on a database
// of its own in the test PostgreSQL, and returns a client of it.
func coordinatorFor(t *testing.T) (*cc.Coordinator, string) {
	t.Helper()
	return coordinatorWrapped(t, nil)
}

// coordinatorWrapped is coordinatorFor with the API's handler wrapped by wrap (nil: not
// wrapped).
func coordinatorWrapped(t *testing.T, wrap func(http.Handler) http.Handler) (*cc.Coordinator, string) {
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
	handler := api.NewHandler(svc, api.Options{Logger: slog.New(slog.DiscardHandler), RequestTimeout: time.Minute})
	if wrap != nil {
		handler = wrap(handler)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	coord, err := cc.NewCoordinator(srv.URL, cc.Options{MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return coord, srv.URL
}

// sink is what both sinks are: a participant that recovers.
type sink[C any] interface {
	cc.Participant[C]
	cc.Recoverer[C]
}

// fixture is one kind of sink under test, on storage of its own.
type fixture[C any] struct {
	coord *cc.Coordinator
	// newSink returns a new instance (as a restarted process would make) on the same
	// storage, reading from in.
	newSink func(job, name string, in sinks.Input) sink[C]
	// held returns the committed events.
	held func(t *testing.T) []sinks.Event
	// leftovers lists prepared-but-undecided work (prepared transactions, temp files).
	leftovers func(t *testing.T) []string
}

func pgFixture(t *testing.T, cluster *harness.Cluster) *fixture[sinks.PGCommittable] {
	coord, _ := coordinatorFor(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, cluster.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var last *sinks.PGSink
	fx := &fixture[sinks.PGCommittable]{coord: coord}
	fx.newSink = func(job, name string, in sinks.Input) sink[sinks.PGCommittable] {
		s := &sinks.PGSink{Pool: pool, Coordinator: coord, Job: job, Name: name, Table: "events", Input: in}
		if err := s.Setup(ctx); err != nil {
			t.Fatal(err)
		}
		last = s
		return s
	}
	fx.held = func(t *testing.T) []sinks.Event {
		ev, err := sinks.ReadPG(ctx, pool, "events")
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	fx.leftovers = func(t *testing.T) []string {
		gids, err := last.Prepared(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return gids
	}
	return fx
}

func mariaDBFixture(t *testing.T) *fixture[sinks.MariaDBCommittable] {
	coord, _ := coordinatorFor(t)
	ctx := context.Background()
	db, err := sql.Open("mysql", harness.MariaDB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var last *sinks.MariaDBSink
	fx := &fixture[sinks.MariaDBCommittable]{coord: coord}
	fx.newSink = func(job, name string, in sinks.Input) sink[sinks.MariaDBCommittable] {
		s := &sinks.MariaDBSink{DB: db, Coordinator: coord, Job: job, Name: name, Table: "events", Input: in}
		if err := s.Setup(ctx); err != nil {
			t.Fatal(err)
		}
		last = s
		return s
	}
	fx.held = func(t *testing.T) []sinks.Event {
		ev, err := sinks.ReadMariaDB(ctx, db, "events")
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	fx.leftovers = func(t *testing.T) []string {
		xids, err := last.Prepared(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return xids
	}
	return fx
}

func fileFixture(t *testing.T) *fixture[sinks.FileCommittable] {
	coord, _ := coordinatorFor(t)
	dir := t.TempDir()
	fx := &fixture[sinks.FileCommittable]{coord: coord}
	fx.newSink = func(job, name string, in sinks.Input) sink[sinks.FileCommittable] {
		return &sinks.FileSink{Dir: dir, Coordinator: coord, Job: job, Name: name, Input: in}
	}
	fx.held = func(t *testing.T) []sinks.Event {
		ev, err := sinks.ReadFiles(dir)
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	fx.leftovers = func(t *testing.T) []string {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range entries {
			if e.Name()[0] == '.' {
				out = append(out, e.Name())
			}
		}
		return out
	}
	return fx
}

// tenPer hands out events 10(c-1)+1 .. 10c for checkpoint c.
var tenPer = sinks.InputFunc(func(ctx context.Context, c int64) ([]sinks.Event, error) {
	out := make([]sinks.Event, 10)
	for i := range out {
		out[i] = sinks.MakeEvent((c-1)*10 + int64(i) + 1)
	}
	return out, nil
})

func TestPGSink(t *testing.T) {
	t.Parallel()
	cluster := harness.StartCluster(t) // max_prepared_transactions > 0
	for _, tc := range sinkTests[sinks.PGCommittable]() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, pgFixture(t, cluster))
		})
	}
}

// TestMariaDBSink: the sinks' tests on MariaDB, whose sink writes through XA transactions.
func TestMariaDBSink(t *testing.T) {
	t.Parallel()
	for _, tc := range sinkTests[sinks.MariaDBCommittable]() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, mariaDBFixture(t))
		})
	}
}

func TestFileSink(t *testing.T) {
	t.Parallel()
	for _, tc := range sinkTests[sinks.FileCommittable]() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, fileFixture(t))
		})
	}
}

type sinkTest[C any] struct {
	name string
	run  func(t *testing.T, fx *fixture[C])
}

func sinkTests[C any]() []sinkTest[C] {
	return []sinkTest[C]{
		{"rounds through the runner", testRounds[C]},
		{"prepared is invisible until committed, commit is idempotent", testPrepareCommit[C]},
		{"abort rolls back, idempotently, and cannot be undone", testAbort[C]},
		{"orphan of a crash before the vote is rolled back on restart", testOrphanRolledBack[C]},
		{"commit owed after a crash after the vote is applied on restart", testCommitAfterCrash[C]},
		{"prepared work in doubt survives a restart until decided", testInDoubtSurvives[C]},
		{"a crash while applying the decision leaves it owed to the next instance", testCrashDuringCommit[C]},
	}
}

func startRunner[C any](t *testing.T, fx *fixture[C], job, name string, s sink[C]) *cc.Runner[C] {
	t.Helper()
	r := cc.NewRunner(fx.coord, job, name, cc.Participant[C](s), cc.RunnerOptions{PollInterval: 10 * time.Millisecond, LongPoll: 2 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("runner %s: %v", name, err)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for r.Epoch() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("runner did not register")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return r
}

func putJob[C any](t *testing.T, fx *fixture[C], job string, participants ...string) {
	t.Helper()
	if _, err := fx.coord.PutJob(context.Background(), job, cc.JobConfig{Participants: participants}); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func status[C any](t *testing.T, fx *fixture[C], job string, id int64) cc.CheckpointStatus {
	t.Helper()
	cp, err := fx.coord.Checkpoint(context.Background(), job, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	return cp.Status
}

func checkHeld[C any](t *testing.T, fx *fixture[C], n int64) {
	t.Helper()
	if msg := sinks.Check(fx.held(t), n); msg != "" {
		t.Error(msg)
	}
	if l := fx.leftovers(t); len(l) != 0 {
		t.Errorf("left over: %v", l)
	}
}

func testRounds[C any](t *testing.T, fx *fixture[C]) {
	putJob(t, fx, "j", "sink")
	startRunner(t, fx, "j", "sink", fx.newSink("j", "sink", tenPer))
	for i := int64(1); i <= 3; i++ {
		if _, err := fx.coord.OpenCheckpoint(context.Background(), "j", "", 0); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "commit", func() bool { return status(t, fx, "j", i) == cc.Committed })
	}
	checkHeld(t, fx, 30)
}

func testPrepareCommit[C any](t *testing.T, fx *fixture[C]) {
	ctx := context.Background()
	s := fx.newSink("j", "sink", tenPer)
	cs, err := s.Prepare(ctx, 1)
	if err != nil || len(cs) != 1 {
		t.Fatalf("prepare: %v %v", cs, err)
	}
	if n := len(fx.held(t)); n != 0 {
		t.Errorf("%d events visible before commit", n)
	}
	if l := fx.leftovers(t); len(l) != 1 {
		t.Errorf("prepared work %v, want one", l)
	}
	for range 2 { // a replay after a crash commits nothing twice
		if err := s.Commit(ctx, 1, cs); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	checkHeld(t, fx, 10)
	// A new instance replaying the commit finds it done.
	if err := fx.newSink("j", "sink", tenPer).Commit(ctx, 1, cs); err != nil {
		t.Errorf("commit replayed by a new instance: %v", err)
	}
	var perm *cc.PermanentError
	if err := s.Abort(ctx, 1, cs); !errors.As(err, &perm) {
		t.Errorf("abort of a committed checkpoint: %v, want a permanent error", err)
	}
	checkHeld(t, fx, 10)
}

func testAbort[C any](t *testing.T, fx *fixture[C]) {
	ctx := context.Background()
	s := fx.newSink("j", "sink", tenPer)
	cs, err := s.Prepare(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.Abort(ctx, 1, cs); err != nil {
			t.Fatalf("abort: %v", err)
		}
	}
	checkHeld(t, fx, 0)
	var perm *cc.PermanentError
	if err := s.Commit(ctx, 1, cs); !errors.As(err, &perm) {
		t.Errorf("commit of rolled back work: %v, want a permanent error (lost)", err)
	}
}

func testOrphanRolledBack[C any](t *testing.T, fx *fixture[C]) {
	ctx := context.Background()
	putJob(t, fx, "j", "sink")
	if _, err := fx.coord.Register(ctx, "j", "sink"); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.coord.OpenCheckpoint(ctx, "j", "", 0); err != nil {
		t.Fatal(err)
	}
	// The old process prepared checkpoint 1 and died before voting.
	if _, err := fx.newSink("j", "sink", tenPer).Prepare(ctx, 1); err != nil {
		t.Fatal(err)
	}
	startRunner(t, fx, "j", "sink", fx.newSink("j", "sink", tenPer))
	if st := status(t, fx, "j", 1); st != cc.Aborted {
		t.Errorf("checkpoint 1 is %s after the restart, want aborted", st)
	}
	waitFor(t, "the orphan's rollback", func() bool { return len(fx.leftovers(t)) == 0 })
	checkHeld(t, fx, 0)
}

// crashAfterVote has an old instance of "sink" prepare checkpoint 1 and vote, then die;
// "other" is registered and has not voted.
func crashAfterVote[C any](t *testing.T, fx *fixture[C]) (otherEpoch int64) {
	t.Helper()
	ctx := context.Background()
	putJob(t, fx, "j", "sink", "other")
	old, err := fx.coord.Register(ctx, "j", "sink")
	if err != nil {
		t.Fatal(err)
	}
	other, err := fx.coord.Register(ctx, "j", "other")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fx.coord.OpenCheckpoint(ctx, "j", "", 0); err != nil {
		t.Fatal(err)
	}
	cs, err := fx.newSink("j", "sink", tenPer).Prepare(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := jsonMarshal(cs)
	if _, err := fx.coord.Vote(ctx, "j", 1, "sink", cc.VoteRequest{Epoch: old.Epoch, Vote: cc.VoteKindPrepared, Committables: &raw}); err != nil {
		t.Fatal(err)
	}
	return other.Epoch
}

func testCommitAfterCrash[C any](t *testing.T, fx *fixture[C]) {
	ctx := context.Background()
	otherEpoch := crashAfterVote(t, fx)
	if _, err := fx.coord.Vote(ctx, "j", 1, "other", cc.VoteRequest{Epoch: otherEpoch, Vote: cc.VoteKindPrepared}); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.coord.Ack(ctx, "j", 1, "other", otherEpoch); err != nil {
		t.Fatal(err)
	}
	startRunner(t, fx, "j", "sink", fx.newSink("j", "sink", tenPer))
	waitFor(t, "the owed commit", func() bool { return status(t, fx, "j", 1) == cc.Committed })
	checkHeld(t, fx, 10)
}

func testInDoubtSurvives[C any](t *testing.T, fx *fixture[C]) {
	ctx := context.Background()
	otherEpoch := crashAfterVote(t, fx)
	startRunner(t, fx, "j", "sink", fx.newSink("j", "sink", tenPer))
	time.Sleep(100 * time.Millisecond) // the new instance has recovered by now
	if l := fx.leftovers(t); len(l) != 1 {
		t.Fatalf("prepared work %v after the restart, want it kept (its vote is recorded)", l)
	}
	if st := status(t, fx, "j", 1); st != cc.Preparing {
		t.Fatalf("checkpoint 1 is %s, want still preparing", st)
	}
	if _, err := fx.coord.Vote(ctx, "j", 1, "other", cc.VoteRequest{Epoch: otherEpoch, Vote: cc.VoteKindPrepared}); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.coord.Ack(ctx, "j", 1, "other", otherEpoch); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the commit", func() bool { return status(t, fx, "j", 1) == cc.Committed })
	checkHeld(t, fx, 10)
}

func jsonMarshal(v any) (cc.Committables, error) {
	b, err := json.Marshal(v)
	return cc.Committables(b), err
}

// dyingCommit is a sink whose process dies as Commit starts: nothing is applied, and the
// runner stops (a Permanent error stands for the kill).
type dyingCommit[C any] struct{ sink[C] }

func (d dyingCommit[C]) Commit(context.Context, int64, []C) error {
	return cc.Permanent(errors.New("killed while committing"))
}

func testCrashDuringCommit[C any](t *testing.T, fx *fixture[C]) {
	ctx := context.Background()
	putJob(t, fx, "j", "sink")
	r := cc.NewRunner(fx.coord, "j", "sink", cc.Participant[C](dyingCommit[C]{fx.newSink("j", "sink", tenPer)}),
		cc.RunnerOptions{PollInterval: 10 * time.Millisecond})
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	waitFor(t, "registration", func() bool { return r.Epoch() > 0 })
	if _, err := fx.coord.OpenCheckpoint(ctx, "j", "", 0); err != nil {
		t.Fatal(err)
	}
	var perm *cc.PermanentError
	if err := <-done; !errors.As(err, &perm) {
		t.Fatalf("first instance: %v, want it to die in Commit", err)
	}
	if st := status(t, fx, "j", 1); st != cc.Committing {
		t.Fatalf("checkpoint 1 is %s after a crash before its commit was applied, want committing (not acked)", st)
	}
	startRunner(t, fx, "j", "sink", fx.newSink("j", "sink", tenPer))
	waitFor(t, "the owed commit", func() bool { return status(t, fx, "j", 1) == cc.Committed })
	checkHeld(t, fx, 10)
}

// A PREPARE TRANSACTION whose answer is lost (here: an error right after it) leaves a
// prepared transaction that no vote names: the sink rolls it back before its next prepare,
// so nothing is left over and nothing of it is ever committed.
func TestPGSinkRollsBackUncertainPrepare(t *testing.T) {
	t.Parallel()
	cluster := harness.StartCluster(t)
	fx := pgFixture(t, cluster)
	putJob(t, fx, "j", "sink")
	s := fx.newSink("j", "sink", tenPer).(*sinks.PGSink)
	var calls atomic.Int64
	sinks.SetAfterPrepare(s, func() error {
		if calls.Add(1) == 1 {
			return errors.New("connection lost after PREPARE TRANSACTION")
		}
		return nil
	})
	startRunner(t, fx, "j", "sink", sink[sinks.PGCommittable](s))
	ctx := context.Background()
	if _, err := fx.coord.OpenCheckpoint(ctx, "j", "", 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the abort of checkpoint 1", func() bool { return status(t, fx, "j", 1) == cc.Aborted })
	if l := fx.leftovers(t); len(l) != 1 {
		t.Fatalf("prepared transactions %v, want the uncertain one", l)
	}
	if _, err := fx.coord.OpenCheckpoint(ctx, "j", "", 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the commit of checkpoint 2", func() bool { return status(t, fx, "j", 2) == cc.Committed })
	if l := fx.leftovers(t); len(l) != 0 {
		t.Errorf("left over: %v", l)
	}
	held := fx.held(t)
	if len(held) != 10 || held[0].Seq != 11 || held[9].Seq != 20 {
		t.Errorf("holds %v, want events 11..20 of checkpoint 2 only", held)
	}
}

// An XA COMMIT or XA ROLLBACK that comes while the session that prepared the transaction
// is still open gets "unknown XID" (1397) although XA RECOVER lists it: the sink answers an
// error to retry, never "lost" or "already rolled back", and the commit succeeds once the
// session is gone.
func TestMariaDBSinkWaitsForThePreparingSession(t *testing.T) {
	t.Parallel()
	fx := mariaDBFixture(t)
	ctx := context.Background()
	s := fx.newSink("j", "sink", tenPer).(*sinks.MariaDBSink)
	var commitErr, abortErr error
	sinks.SetAfterXAPrepare(s, func(xid string) error {
		commitErr = s.Commit(ctx, 1, []sinks.MariaDBCommittable{{XID: xid}})
		abortErr = s.Abort(ctx, 1, []sinks.MariaDBCommittable{{XID: xid}})
		return nil
	})
	cs, err := s.Prepare(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	var perm *cc.PermanentError
	for what, err := range map[string]error{"commit": commitErr, "abort": abortErr} {
		if err == nil || errors.As(err, &perm) {
			t.Errorf("%s while the preparing session is open: %v, want an error to retry", what, err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Commit(ctx, 1, cs) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the commit did not succeed within 10 s of the preparing session's end")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if held := fx.held(t); len(held) != 10 {
		t.Errorf("holds %d events after the commit, want 10", len(held))
	}
}
