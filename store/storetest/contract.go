package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
)

// runContract tests the Store and JobTx interfaces directly, as their doc comments in
// coordinator/store.go and coordinator/types.go state them.
func runContract(t *testing.T, o opener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b *bundle)
	}{
		{"PutJob/CreateThenUpdate", testPutJobCreateThenUpdate},
		{"PutJob/UpdateReturnsSeqAndEpochs", testPutJobUpdateReturnsSeqAndEpochs},
		{"GetJob/NotFound", testGetJobNotFound},
		{"GetJob/LastCheckpointAndLastCommitted", testGetJobLastCheckpoints},
		{"ListJobs/OrderAndPaging", testListJobsOrderAndPaging},
		{"ListJobs/MixedCasePagingIsConsistent", testListJobsMixedCase},
		{"ListJobs/ShowsLastCheckpointsAndEpochs", testListJobsShowsLastCheckpoints},
		{"Update/MissingJob", testUpdateMissingJob},
		{"View/MissingJob", testViewMissingJob},
		{"View/RefusesWrites", testViewRefusesWrites},
		{"Update/RollsBackOnError", testUpdateRollsBackOnError},
		{"Update/RollsBackOnUnavailable", testUpdateRollsBackOnUnavailable},
		{"Update/CommitsOnRejection", testUpdateCommitsOnRejection},
		{"Update/HoldsTheJobLock", testUpdateHoldsTheJobLock},
		{"JobTx/NowIsTheDatabaseClock", testNow},
		{"JobTx/JobReflectsOwnWrites", testJobReflectsOwnWrites},
		{"Checkpoint/NotFound", testCheckpointNotFound},
		{"Checkpoint/InsertRoundTrip", testCheckpointInsertRoundTrip},
		{"Checkpoint/DecisionRoundTrip", testCheckpointDecisionRoundTrip},
		{"Checkpoint/CommittablesByteForByte", testCommittablesByteForByte},
		{"Checkpoint/KeepsItsConfiguration", testCheckpointKeepsItsConfiguration},
		{"Checkpoint/ReadsAreCopies", testReadsAreCopies},
		{"Seq/ContinuesAfterDeleteAndRecreate", testSeqContinues},
		{"Epochs/SetEpoch", testSetEpoch},
		{"Preparing/OnlyPreparingLowestFirst", testPreparing},
		{"Update/CheckpointHint", testCheckpointHint},
		{"Update/ManyJobsAtOnce", testUpdateManyJobsAtOnce},
		{"Owing/Filters", testOwing},
		{"Owing/AbortedWithoutPreparedVote", testOwingAbortedWithoutPreparedVote},
		{"Idempotency/RoundTrip", testIdempotencyRoundTrip},
		{"ExpiredJobs", testExpiredJobs},
		{"ListCheckpoints/PerJob", testListCheckpointsPerJob},
		{"ListCheckpoints/Global", testListCheckpointsGlobal},
		{"Subscribe/WokenByCommittedDecision", testSubscribeWoken},
		{"Subscribe/WokenByDecisionInRejectedUpdate", testSubscribeWokenOnRejection},
		{"Subscribe/CancelLeavesOthersWaiting", testSubscribeCancel},
		{"Ready", testReady},
		{"GetCheckpoint", testGetCheckpoint},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, o.setup(t))
		})
	}
}

func wantConfig(t *testing.T, what string, got, want coordinator.JobConfig) {
	t.Helper()
	if !slices.Equal(got.Participants, want.Participants) || got.CheckpointTimeout != want.CheckpointTimeout ||
		got.MaxConcurrentCheckpoints != want.MaxConcurrentCheckpoints || got.AutoCommit != want.AutoCommit {
		t.Fatalf("%s: config %+v, want %+v", what, got, want)
	}
}

func testPutJobCreateThenUpdate(t *testing.T, b *bundle) {
	first := coordinator.JobConfig{
		Participants:             []string{"zeta", "alpha", "mid-1"},
		CheckpointTimeout:        1234 * time.Millisecond,
		MaxConcurrentCheckpoints: 3,
		AutoCommit:               false,
	}
	job, created, err := b.store.PutJob(b.ctx, "orders", first)
	if err != nil {
		t.Fatalf("PutJob (create): %v", err)
	}
	if !created {
		t.Fatal("PutJob of a new job: created = false, want true")
	}
	if job.Name != "orders" {
		t.Fatalf("PutJob returned job %q, want orders", job.Name)
	}
	wantConfig(t, "PutJob (create) result", job.Config, first)
	if job.CreatedAt.IsZero() || job.UpdatedAt.IsZero() {
		t.Fatalf("PutJob (create): CreatedAt %v, UpdatedAt %v, want both set", job.CreatedAt, job.UpdatedAt)
	}
	got := b.getJob("orders")
	wantConfig(t, "GetJob after create", got.Config, first)
	if got.Seq != 0 || len(got.Epochs) != 0 || got.LastCheckpoint != nil || got.LastCommitted != nil {
		t.Fatalf("new job: Seq %d, Epochs %v, LastCheckpoint %s, LastCommitted %s; want 0, empty, null, null",
			got.Seq, got.Epochs, fmtIDPtr(got.LastCheckpoint), fmtIDPtr(got.LastCommitted))
	}
	if !sameTime(got.CreatedAt, job.CreatedAt) {
		t.Fatalf("GetJob CreatedAt %v, PutJob said %v", got.CreatedAt, job.CreatedAt)
	}

	time.Sleep(20 * time.Millisecond)
	second := coordinator.JobConfig{
		Participants:             []string{"alpha", "beta"},
		CheckpointTimeout:        86400 * time.Second,
		MaxConcurrentCheckpoints: 1,
		AutoCommit:               true,
	}
	job2, created, err := b.store.PutJob(b.ctx, "orders", second)
	if err != nil {
		t.Fatalf("PutJob (update): %v", err)
	}
	if created {
		t.Fatal("PutJob of an existing job: created = true, want false")
	}
	wantConfig(t, "PutJob (update) result", job2.Config, second)
	got = b.getJob("orders")
	wantConfig(t, "GetJob after update", got.Config, second)
	if !sameTime(got.CreatedAt, job.CreatedAt) {
		t.Fatalf("update changed CreatedAt from %v to %v, want it kept", job.CreatedAt, got.CreatedAt)
	}
	if !got.UpdatedAt.After(job.UpdatedAt) {
		t.Fatalf("update: UpdatedAt %v, want after the first %v", got.UpdatedAt, job.UpdatedAt)
	}
	// The whole configuration is replaced, so a false auto-commit is stored as false.
	third := second
	third.AutoCommit = false
	b.putJob("orders", third)
	wantConfig(t, "GetJob after third PutJob", b.getJob("orders").Config, third)
}

func testPutJobUpdateReturnsSeqAndEpochs(t *testing.T, b *bundle) {
	b.putJob("j", config("a", "b"))
	b.update("j", func(tx coordinator.JobTx) error { return tx.SetEpoch(b.ctx, "a", 4) })
	b.insert("j", nil)
	b.insert("j", nil)
	job, created, err := b.store.PutJob(b.ctx, "j", config("a", "b", "c"))
	if err != nil || created {
		t.Fatalf("PutJob (update): created %v, err %v; want false, nil", created, err)
	}
	if job.Seq != 2 || job.Epochs["a"] != 4 {
		t.Fatalf("PutJob (update) returned Seq %d, Epochs %v; want the job as stored: Seq 2, a=4", job.Seq, job.Epochs)
	}
}

func testGetJobNotFound(t *testing.T, b *bundle) {
	_, err := b.store.GetJob(b.ctx, "nope")
	wantNotFound(t, "GetJob of a missing job", err)
}

func testGetJobLastCheckpoints(t *testing.T, b *bundle) {
	b.putJob("j", config("a"))
	check := func(step string, last, committed *int64) {
		t.Helper()
		job := b.getJob("j")
		if fmtIDPtr(job.LastCheckpoint) != fmtIDPtr(last) || fmtIDPtr(job.LastCommitted) != fmtIDPtr(committed) {
			t.Fatalf("%s: LastCheckpoint %s, LastCommitted %s; want %s, %s", step,
				fmtIDPtr(job.LastCheckpoint), fmtIDPtr(job.LastCommitted), fmtIDPtr(last), fmtIDPtr(committed))
		}
	}
	id := func(n int64) *int64 { return &n }
	check("no checkpoint", nil, nil)
	b.insert("j", nil)
	check("1 preparing", id(1), nil)
	b.decide("j", 1, coordinator.StatusAborted, "no")
	check("1 aborted", id(1), nil)
	b.insert("j", nil)
	b.decide("j", 2, coordinator.StatusCommitting, "")
	check("2 committing", id(2), id(2))
	b.insert("j", nil)
	check("3 preparing", id(3), id(2))
	b.decide("j", 3, coordinator.StatusCommitted, "")
	check("3 committed", id(3), id(3))
	b.insert("j", nil)
	b.decide("j", 4, coordinator.StatusAborted, "no")
	check("4 aborted", id(4), id(3))
}

func testListJobsOrderAndPaging(t *testing.T, b *bundle) {
	if jobs, err := b.store.ListJobs(b.ctx, "", 10); err != nil || len(jobs) != 0 {
		t.Fatalf("ListJobs on an empty store: %v, %v; want none", jobNames(jobs), err)
	}
	for _, name := range []string{"job-2", "c", "job-10", "a", "e", "b", "d", "gone"} {
		b.putJob(name, config("p"))
	}
	b.update("gone", func(tx coordinator.JobTx) error { return tx.DeleteJob(b.ctx) })
	cases := []struct {
		after string
		limit int
		want  []string
	}{
		{"", 100, []string{"a", "b", "c", "d", "e", "job-10", "job-2"}},
		{"", 2, []string{"a", "b"}},
		{"b", 2, []string{"c", "d"}},
		{"d", 2, []string{"e", "job-10"}},
		{"job-10", 2, []string{"job-2"}},
		{"job-2", 2, []string{}},
		{"bb", 100, []string{"c", "d", "e", "job-10", "job-2"}},
	}
	for _, c := range cases {
		jobs, err := b.store.ListJobs(b.ctx, c.after, c.limit)
		if err != nil {
			t.Fatalf("ListJobs(%q, %d): %v", c.after, c.limit, err)
		}
		if got := jobNames(jobs); !slices.Equal(got, c.want) {
			t.Fatalf("ListJobs(%q, %d) = %v, want %v (by name, deleted jobs left out)", c.after, c.limit, got, c.want)
		}
	}
}

// testListJobsMixedCase does not impose a collation on upper and lower case names, only
// that paging by the last name returns every job once, in the order of a single listing.
func testListJobsMixedCase(t *testing.T, b *bundle) {
	all := []string{"Beta", "alpha", "ALPHA", "b.x", "b-y", "bz", "A9", "a_1", "Zed", "0day"}
	for _, name := range all {
		b.putJob(name, config("p"))
	}
	whole, err := b.store.ListJobs(b.ctx, "", 100)
	if err != nil {
		t.Fatalf("ListJobs: %v", err)
	}
	var paged []string
	after := ""
	for range len(all) + 1 {
		jobs, err := b.store.ListJobs(b.ctx, after, 3)
		if err != nil {
			t.Fatalf("ListJobs(%q, 3): %v", after, err)
		}
		if len(jobs) == 0 {
			break
		}
		paged = append(paged, jobNames(jobs)...)
		after = jobs[len(jobs)-1].Name
	}
	if !slices.Equal(paged, jobNames(whole)) {
		t.Fatalf("pages of 3 gave %v, one listing gave %v: paging by name must agree with the listing order", paged, jobNames(whole))
	}
	sorted := slices.Clone(all)
	slices.Sort(sorted)
	got := slices.Clone(paged)
	slices.Sort(got)
	if !slices.Equal(got, sorted) {
		t.Fatalf("listing returned %v, want each of %v exactly once", paged, all)
	}
}

func testListJobsShowsLastCheckpoints(t *testing.T, b *bundle) {
	b.putJob("j", config("a"))
	b.update("j", func(tx coordinator.JobTx) error { return tx.SetEpoch(b.ctx, "a", 2) })
	b.insert("j", nil)
	b.decide("j", 1, coordinator.StatusCommitting, "")
	b.insert("j", nil)
	jobs, err := b.store.ListJobs(b.ctx, "", 10)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("ListJobs: %v, %v; want job j", jobNames(jobs), err)
	}
	j := jobs[0]
	if fmtIDPtr(j.LastCheckpoint) != "2" || fmtIDPtr(j.LastCommitted) != "1" || j.Epochs["a"] != 2 || j.Seq != 2 {
		t.Fatalf("ListJobs shows LastCheckpoint %s, LastCommitted %s, Epochs %v, Seq %d; want 2, 1, a=2, 2",
			fmtIDPtr(j.LastCheckpoint), fmtIDPtr(j.LastCommitted), j.Epochs, j.Seq)
	}
	wantConfig(t, "ListJobs", j.Config, config("a"))
}

func testUpdateMissingJob(t *testing.T, b *bundle) {
	called := false
	err := b.store.Update(b.ctx, "nope", 0, func(tx coordinator.JobTx) error { called = true; return nil })
	wantNotFound(t, "Update of a missing job", err)
	if called {
		t.Fatal("Update of a missing job called fn")
	}
	// A deleted job is missing too.
	b.putJob("gone", config("a"))
	b.update("gone", func(tx coordinator.JobTx) error { return tx.DeleteJob(b.ctx) })
	err = b.store.Update(b.ctx, "gone", 0, func(tx coordinator.JobTx) error { called = true; return nil })
	wantNotFound(t, "Update of a deleted job", err)
	if called {
		t.Fatal("Update of a deleted job called fn")
	}
	_, err = b.store.GetJob(b.ctx, "gone")
	wantNotFound(t, "GetJob of a deleted job", err)
}

func testViewMissingJob(t *testing.T, b *bundle) {
	called := false
	err := b.store.View(b.ctx, "nope", func(tx coordinator.JobTx) error { called = true; return nil })
	wantNotFound(t, "View of a missing job", err)
	if called {
		t.Fatal("View of a missing job called fn")
	}
}

func testViewRefusesWrites(t *testing.T, b *bundle) {
	b.putJob("j", config("a", "b"))
	b.insert("j", nil)
	b.saveVote("j", 1, "a", coordinator.VotePrepared, `[1]`)
	before := b.checkpoint("j", 1)
	writes := []struct {
		name  string
		write func(tx coordinator.JobTx) error
	}{
		{"SetEpoch", func(tx coordinator.JobTx) error { return tx.SetEpoch(b.ctx, "a", 9) }},
		{"InsertCheckpoint", func(tx coordinator.JobTx) error {
			return tx.InsertCheckpoint(b.ctx, newCheckpoint(tx, "j"), &coordinator.IdempotencyRecord{Key: "k", Fingerprint: "f", Checkpoint: 2})
		}},
		{"SaveStatus", func(tx coordinator.JobTx) error {
			cp, err := tx.Checkpoint(b.ctx, 1)
			if err != nil {
				return fmt.Errorf("read: %w", err)
			}
			now := tx.Now()
			cp.Status, cp.DecidedAt, cp.CompletedAt, cp.AbortReason = coordinator.StatusAborted, &now, &now, "x"
			return tx.SaveStatus(b.ctx, cp)
		}},
		{"SaveVote", func(tx coordinator.JobTx) error {
			cp, err := tx.Checkpoint(b.ctx, 1)
			if err != nil {
				return fmt.Errorf("read: %w", err)
			}
			now := tx.Now()
			p := cp.Participant("b")
			p.Epoch, p.Vote, p.VotedAt, p.Committables = 1, coordinator.VotePrepared, &now, json.RawMessage(`[2]`)
			return tx.SaveVote(b.ctx, cp, p)
		}},
		{"SaveAck", func(tx coordinator.JobTx) error {
			cp, err := tx.Checkpoint(b.ctx, 1)
			if err != nil {
				return fmt.Errorf("read: %w", err)
			}
			now := tx.Now()
			p := cp.Participant("a")
			p.AckedAt = &now
			return tx.SaveAck(b.ctx, cp, p)
		}},
		{"DeleteJob", func(tx coordinator.JobTx) error { return tx.DeleteJob(b.ctx) }},
	}
	for _, w := range writes {
		var writeErr error
		err := b.store.View(b.ctx, "j", func(tx coordinator.JobTx) error {
			writeErr = w.write(tx)
			return nil
		})
		if writeErr == nil {
			t.Errorf("View: %s returned nil, want an error (writes through a View transaction fail)", w.name)
		}
		_ = err // View may report the failed write or not; what matters is that nothing changed.
	}
	job := b.getJob("j")
	if job.Seq != 1 || job.Epochs["a"] != 0 {
		t.Fatalf("after writes in View: Seq %d, epoch of a %d; want 1, 0 (unchanged)", job.Seq, job.Epochs["a"])
	}
	wantCheckpoint(t, "checkpoint 1 after writes in View", before, b.checkpoint("j", 1))
	b.view("j", func(tx coordinator.JobTx) error {
		if _, err := tx.Checkpoint(b.ctx, 2); err != coordinator.ErrNotFound {
			t.Errorf("checkpoint 2 after InsertCheckpoint in View: %v, want ErrNotFound", err)
		}
		if _, ok, err := tx.Idempotency(b.ctx, "k"); ok || err != nil {
			t.Errorf("Idempotency(k) after InsertCheckpoint in View: ok %v, err %v; want unknown", ok, err)
		}
		return nil
	})
}

// writeSome changes the job in every way a transaction can, so a test can check that all of
// it was kept or none of it.
func (b *bundle) writeSome(tx coordinator.JobTx) error {
	if err := tx.SetEpoch(b.ctx, "a", 7); err != nil {
		return err
	}
	cp1, err := tx.Checkpoint(b.ctx, 1)
	if err != nil {
		return err
	}
	now := tx.Now()
	p := cp1.Participant("a")
	p.Epoch, p.Vote, p.VotedAt, p.Committables = 7, coordinator.VotePrepared, &now, json.RawMessage(`["x"]`)
	if err := tx.SaveVote(b.ctx, cp1, p); err != nil {
		return err
	}
	cp1.Status, cp1.DecidedAt, cp1.CompletedAt, cp1.AbortReason = coordinator.StatusAborted, &now, &now, "test"
	if err := tx.SaveStatus(b.ctx, cp1); err != nil {
		return err
	}
	p.AckedAt = &now
	if err := tx.SaveAck(b.ctx, cp1, p); err != nil {
		return err
	}
	return tx.InsertCheckpoint(b.ctx, newCheckpoint(tx, "j"), &coordinator.IdempotencyRecord{Key: "k", Fingerprint: "f", Checkpoint: 2})
}

func (b *bundle) wantUnwritten(what string, before *coordinator.Checkpoint) {
	b.t.Helper()
	job := b.getJob("j")
	if job.Seq != 1 || job.Epochs["a"] != 0 {
		b.t.Fatalf("%s: Seq %d, epoch of a %d; want 1, 0 (rolled back)", what, job.Seq, job.Epochs["a"])
	}
	wantCheckpoint(b.t, what+": checkpoint 1", before, b.checkpoint("j", 1))
	b.view("j", func(tx coordinator.JobTx) error {
		if _, err := tx.Checkpoint(b.ctx, 2); err != coordinator.ErrNotFound {
			b.t.Errorf("%s: checkpoint 2: %v, want ErrNotFound (its insert rolled back)", what, err)
		}
		if _, ok, _ := tx.Idempotency(b.ctx, "k"); ok {
			b.t.Errorf("%s: Idempotency(k) is known, want its insert rolled back", what)
		}
		return nil
	})
}

func (b *bundle) wantWritten(what string) {
	b.t.Helper()
	job := b.getJob("j")
	if job.Seq != 2 || job.Epochs["a"] != 7 {
		b.t.Fatalf("%s: Seq %d, epoch of a %d; want 2, 7 (committed)", what, job.Seq, job.Epochs["a"])
	}
	cp := b.checkpoint("j", 1)
	if p := cp.Participant("a"); cp.Status != coordinator.StatusAborted || p.Vote != coordinator.VotePrepared || p.AckedAt == nil {
		b.t.Fatalf("%s: checkpoint 1 is %s, a's vote %q, acked %v; want aborted, prepared, acked (committed)", what, cp.Status, p.Vote, p.AckedAt != nil)
	}
	b.checkpoint("j", 2)
	b.view("j", func(tx coordinator.JobTx) error {
		if rec, ok, err := tx.Idempotency(b.ctx, "k"); !ok || err != nil || rec.Checkpoint != 2 {
			b.t.Errorf("%s: Idempotency(k) = %+v, %v, %v; want checkpoint 2", what, rec, ok, err)
		}
		return nil
	})
}

func testUpdateRollsBackOnError(t *testing.T, b *bundle) {
	b.putJob("j", config("a"))
	b.insert("j", nil)
	before := b.checkpoint("j", 1)
	boom := errors.New("boom")
	err := b.store.Update(b.ctx, "j", 0, func(tx coordinator.JobTx) error {
		if err := b.writeSome(tx); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		return fmt.Errorf("callback failed: %w", boom)
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update returned %v, want the callback's error", err)
	}
	b.wantUnwritten("after a callback error", before)
}

func testUpdateRollsBackOnUnavailable(t *testing.T, b *bundle) {
	b.putJob("j", config("a"))
	b.insert("j", nil)
	before := b.checkpoint("j", 1)
	cause := errors.New("connection reset")
	err := b.store.Update(b.ctx, "j", 0, func(tx coordinator.JobTx) error {
		if err := b.writeSome(tx); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		return coordinator.Unavailable(cause)
	})
	if !errors.Is(err, coordinator.ErrUnavailable) {
		t.Fatalf("Update returned %v, want the callback's unavailable error", err)
	}
	b.wantUnwritten("after an unavailable error (not a rejection)", before)
}

func testUpdateCommitsOnRejection(t *testing.T, b *bundle) {
	b.putJob("j", config("a"))
	b.insert("j", nil)
	rejection := &coordinator.Error{Code: coordinator.CodeAlreadyDecided, Message: "refused after aborting"}
	err := b.store.Update(b.ctx, "j", 0, func(tx coordinator.JobTx) error {
		if err := b.writeSome(tx); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		return rejection
	})
	if err != rejection {
		t.Fatalf("Update returned %v (%T), want the callback's *Error unchanged", err, err)
	}
	b.wantWritten("after a rejection")

	// A rejection wrapped with context is still a rejection (IsRejection uses errors.As).
	b.putJob("w", config("a"))
	wrapped := fmt.Errorf("context: %w", &coordinator.Error{Code: coordinator.CodeVoteConflict})
	err = b.store.Update(b.ctx, "w", 0, func(tx coordinator.JobTx) error {
		if err := tx.SetEpoch(b.ctx, "a", 3); err != nil {
			return err
		}
		return wrapped
	})
	if !errors.Is(err, coordinator.ErrVoteConflict) {
		t.Fatalf("Update returned %v, want the wrapped rejection", err)
	}
	if e := b.getJob("w").Epochs["a"]; e != 3 {
		t.Fatalf("after a wrapped rejection: epoch %d, want 3 (committed)", e)
	}
}

// testUpdateHoldsTheJobLock runs read-modify-write transactions at once: with the job's lock
// held, none of the increments is lost.
func testUpdateHoldsTheJobLock(t *testing.T, b *bundle) {
	b.putJob("j", config("a"))
	const n = 20
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			errs <- b.store.Update(b.ctx, "j", 0, func(tx coordinator.JobTx) error {
				e := tx.Job().Epoch("a")
				time.Sleep(time.Millisecond)
				return tx.SetEpoch(b.ctx, "a", e+1)
			})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Update: %v", err)
		}
	}
	if e := b.getJob("j").Epochs["a"]; e != n {
		t.Fatalf("after %d concurrent increments the epoch is %d: Update does not serialize on the job's lock", n, e)
	}
}

func testNow(t *testing.T, b *bundle) {
	b.putJob("j", config("a"))
	var first time.Time
	b.view("j", func(tx coordinator.JobTx) error {
		first = tx.Now()
		time.Sleep(5 * time.Millisecond)
		if second := tx.Now(); !second.Equal(first) {
			t.Errorf("Now changed within one transaction: %v then %v, want it read once", first, second)
		}
		return nil
	})
	if d := time.Since(first); d < -time.Minute || d > time.Minute {
		t.Fatalf("Now = %v is %v away from this machine's clock", first, d)
	}
	time.Sleep(20 * time.Millisecond)
	b.update("j", func(tx coordinator.JobTx) error {
		if later := tx.Now(); !later.After(first) {
			t.Errorf("Now in a later transaction is %v, want after %v", later, first)
		}
		return nil
	})
}

func testJobReflectsOwnWrites(t *testing.T, b *bundle) {
	b.putJob("j", config("a"))
	b.update("j", func(tx coordinator.JobTx) error {
		if err := tx.InsertCheckpoint(b.ctx, newCheckpoint(tx, "j"), nil); err != nil {
			return err
		}
		if err := tx.SetEpoch(b.ctx, "a", 5); err != nil {
			return err
		}
		if s, e := tx.Job().Seq, tx.Job().Epoch("a"); s != 1 || e != 5 {
			t.Errorf("in the transaction that wrote them: Job().Seq %d, Epoch(a) %d; want 1, 5", s, e)
		}
		return nil
	})
}

func testCheckpointNotFound(t *testing.T, b *bundle) {
	b.putJob("j", config("a"))
	b.putJob("other", config("a"))
	b.insert("other", nil)
	b.view("j", func(tx coordinator.JobTx) error {
		_, err := tx.Checkpoint(b.ctx, 1)
		wantNotFound(t, "Checkpoint(1) of a job without checkpoints (another job has one)", err)
		return nil
	})
	b.update("j", func(tx coordinator.JobTx) error {
		_, err := tx.Checkpoint(b.ctx, 99)
		wantNotFound(t, "Checkpoint(99) in Update", err)
		return nil
	})
}

func testCheckpointInsertRoundTrip(t *testing.T, b *bundle) {
	b.putJob("j", config("zeta", "alpha", "mid"))
	var cp *coordinator.Checkpoint
	b.update("j", func(tx coordinator.JobTx) error {
		cp = newCheckpoint(tx, "j")
		cp.CreatedAt = tx.Now().Add(-123456789 * time.Nanosecond)
		cp.Deadline = tx.Now().Add(90*time.Second + 987654321*time.Nanosecond)
		cp.AutoCommit = false // differs from the job's: the checkpoint's own is stored
		return tx.InsertCheckpoint(b.ctx, cp, nil)
	})
	// Seq is assigned by the time the update committed.
	if cp.Seq <= 0 {
		t.Fatalf("InsertCheckpoint assigned Seq %d once committed, want > 0", cp.Seq)
	}
	want := cp.Clone()
	got := b.checkpoint("j", 1)
	wantCheckpoint(t, "Checkpoint(1) after InsertCheckpoint", want, got)
	if got.Seq != want.Seq {
		t.Fatalf("Seq read back %d, InsertCheckpoint assigned %d", got.Seq, want.Seq)
	}
	if job := b.getJob("j"); job.Seq != 1 {
		t.Fatalf("job Seq after inserting checkpoint 1: %d, want 1", job.Seq)
	}
}

func testCheckpointDecisionRoundTrip(t *testing.T, b *bundle) {
	b.putJob("j", config("zeta", "alpha", "mid"))
	b.insert("j", nil)
	var want *coordinator.Checkpoint
	b.update("j", func(tx coordinator.JobTx) error {
		cp, err := tx.Checkpoint(b.ctx, 1)
		if err != nil {
			return err
		}
		now := tx.Now()
		t1, t2, t3 := now.Add(1234567*time.Nanosecond), now.Add(2345678*time.Nanosecond), now.Add(3456789*time.Nanosecond)
		z := cp.Participant("zeta")
		z.Epoch, z.Vote, z.VotedAt, z.Committables = 3, coordinator.VotePrepared, &t1, json.RawMessage(`[{"txn":"z-1"},"ü"]`)
		a := cp.Participant("alpha")
		a.Epoch, a.Vote, a.VotedAt, a.Reason = 2, coordinator.VoteAbort, &t2, "disk full: é"
		for _, p := range []*coordinator.ParticipantState{z, a} {
			if err := tx.SaveVote(b.ctx, cp, p); err != nil {
				return err
			}
		}
		cp.Status, cp.DecidedAt, cp.CompletedAt, cp.AbortReason = coordinator.StatusAborted, &t2, &t2, "participant alpha voted abort: disk full: é"
		if err := tx.SaveStatus(b.ctx, cp); err != nil {
			return err
		}
		z.AckedAt = &t3
		if err := tx.SaveAck(b.ctx, cp, z); err != nil {
			return err
		}
		want = cp.Clone()
		return nil
	})
	wantCheckpoint(t, "aborted checkpoint read back in a new transaction", want, b.checkpoint("j", 1))

	// A commit: committing with DecidedAt and no CompletedAt, then committed.
	b.insert("j", nil)
	b.update("j", func(tx coordinator.JobTx) error {
		cp, err := tx.Checkpoint(b.ctx, 2)
		if err != nil {
			return err
		}
		now := tx.Now()
		for i := range cp.Participants {
			p := &cp.Participants[i]
			p.Epoch, p.Vote, p.VotedAt, p.Committables = 1, coordinator.VotePrepared, &now, json.RawMessage(`[]`)
			if err := tx.SaveVote(b.ctx, cp, p); err != nil {
				return err
			}
		}
		cp.Status, cp.DecidedAt = coordinator.StatusCommitting, &now
		if err := tx.SaveStatus(b.ctx, cp); err != nil {
			return err
		}
		want = cp.Clone()
		return nil
	})
	wantCheckpoint(t, "committing checkpoint read back", want, b.checkpoint("j", 2))
	b.update("j", func(tx coordinator.JobTx) error {
		cp, err := tx.Checkpoint(b.ctx, 2)
		if err != nil {
			return err
		}
		now := tx.Now()
		for i := range cp.Participants {
			cp.Participants[i].AckedAt = &now
			if err := tx.SaveAck(b.ctx, cp, &cp.Participants[i]); err != nil {
				return err
			}
		}
		cp.Status, cp.CompletedAt = coordinator.StatusCommitted, &now
		if err := tx.SaveStatus(b.ctx, cp); err != nil {
			return err
		}
		want = cp.Clone()
		return nil
	})
	wantCheckpoint(t, "committed checkpoint read back", want, b.checkpoint("j", 2))
}

func testCommittablesByteForByte(t *testing.T, b *bundle) {
	samples := []string{
		`[{"b":1,"a":[1.0,2e3,"\u00e9"]},null,"x"]`,
		`[]`,
		`[{"z":{"y":{"x":[true,false,null]}},"a":-0.0,"m":1E+2,"n":123456789012345678901234567890}]`,
		`["é","\ud83d\ude00","😀","\"quoted\"","tab\tand\\backslash","\u0041"]`,
		`[{"dup":1,"dup":2}]`,
		`[{"txn":"orders-41","offsets":{"p0":1,"p1":22,"p10":333}},{"file":"/out/.part-7"}]`,
	}
	b.putJob("j", config("p"))
	for i, sample := range samples {
		compact, err := coordinator.CompactJSON([]byte(sample))
		if err != nil {
			t.Fatalf("sample %d is not JSON: %v", i, err)
		}
		cp := b.insert("j", nil)
		b.saveVote("j", cp.ID, "p", coordinator.VotePrepared, string(compact))
		got := b.checkpoint("j", cp.ID).Participant("p").Committables
		if string(got) != string(compact) {
			t.Errorf("committables %s came back as %s, want them byte for byte", compact, got)
		}
		// Preparing and Owing return them the same way.
		b.view("j", func(tx coordinator.JobTx) error {
			owing, err := tx.Owing(b.ctx, "p")
			if err != nil {
				return err
			}
			for _, o := range owing {
				if o.ID == cp.ID && string(o.Participant("p").Committables) != string(compact) {
					t.Errorf("Owing: committables %s came back as %s", compact, o.Participant("p").Committables)
				}
			}
			return nil
		})
		b.decide("j", cp.ID, coordinator.StatusAborted, "next")
	}
	// A larger payload, beyond what fits in one small buffer.
	big := make([]string, 2000)
	for i := range big {
		big[i] = fmt.Sprintf(`{"k%d":"%x"}`, i, i*7919)
	}
	payload := "[" + strings.Join(big, ",") + "]"
	cp := b.insert("j", nil)
	b.saveVote("j", cp.ID, "p", coordinator.VotePrepared, payload)
	if got := b.checkpoint("j", cp.ID).Participant("p").Committables; string(got) != payload {
		t.Errorf("a %d-byte committables payload came back as %d bytes, different", len(payload), len(got))
	}
}

func testCheckpointKeepsItsConfiguration(t *testing.T, b *bundle) {
	b.putJob("j", coordinator.JobConfig{Participants: []string{"a", "b"}, CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 2, AutoCommit: false})
	want := b.insert("j", nil)
	b.putJob("j", coordinator.JobConfig{Participants: []string{"c"}, CheckpointTimeout: time.Second, MaxConcurrentCheckpoints: 1, AutoCommit: true})
	wantCheckpoint(t, "checkpoint after PutJob changed the job", want, b.checkpoint("j", 1))
}

func testReadsAreCopies(t *testing.T, b *bundle) {
	b.putJob("j", config("a", "b"))
	b.update("j", func(tx coordinator.JobTx) error { return tx.SetEpoch(b.ctx, "a", 1) })
	b.insert("j", nil)
	b.saveVote("j", 1, "a", coordinator.VotePrepared, `[1]`)
	want := b.checkpoint("j", 1)
	mess := func(cp *coordinator.Checkpoint) {
		cp.Status = coordinator.StatusCommitted
		cp.Participants[0].Vote = coordinator.VoteAbort
		cp.Participants[0].Committables[1] = '9'
		cp.Participants[1].Name = "x"
	}
	// A checkpoint read and changed in memory, without a Save, stays as stored, whether the
	// transaction commits or not.
	mess(b.checkpoint("j", 1))
	b.update("j", func(tx coordinator.JobTx) error {
		cp, err := tx.Checkpoint(b.ctx, 1)
		if err != nil {
			return err
		}
		mess(cp)
		ps, err := tx.Preparing(b.ctx)
		if err != nil {
			return err
		}
		mess(ps[0])
		return nil
	})
	wantCheckpoint(t, "checkpoint after callers changed their copies", want, b.checkpoint("j", 1))
	job := b.getJob("j")
	job.Epochs["a"] = 99
	job.Config.Participants[0] = "zz"
	if again := b.getJob("j"); again.Epochs["a"] != 1 || again.Config.Participants[0] != "a" {
		t.Fatalf("GetJob after a caller changed its copy: epochs %v, participants %v", again.Epochs, again.Config.Participants)
	}
}

func testSeqContinues(t *testing.T, b *bundle) {
	b.putJob("j", config("a", "b"))
	for range 3 {
		b.insert("j", nil)
	}
	b.view("j", func(tx coordinator.JobTx) error {
		if s := tx.Job().Seq; s != 3 {
			t.Errorf("Job().Seq after three inserts: %d, want 3", s)
		}
		return nil
	})
	b.update("j", func(tx coordinator.JobTx) error {
		if err := tx.SetEpoch(b.ctx, "a", 4); err != nil {
			return err
		}
		return tx.SetEpoch(b.ctx, "b", 2)
	})
	b.putJob("j", config("a", "b", "c")) // an update keeps Seq
	if s := b.getJob("j").Seq; s != 3 {
		t.Fatalf("Seq after PutJob updated the job: %d, want 3", s)
	}
	b.update("j", func(tx coordinator.JobTx) error { return tx.DeleteJob(b.ctx) })
	_, err := b.store.GetJob(b.ctx, "j")
	wantNotFound(t, "GetJob after DeleteJob", err)

	job, created, err := b.store.PutJob(b.ctx, "j", config("a"))
	if err != nil || !created {
		t.Fatalf("PutJob after DeleteJob: created %v, err %v; want true, nil", created, err)
	}
	job = b.getJob("j")
	if job.Seq != 3 || job.Epochs["a"] != 4 || job.Epochs["b"] != 2 {
		t.Fatalf("job created again: Seq %d, Epochs %v; want 3, a=4 b=2 (kept across delete)", job.Seq, job.Epochs)
	}
	if job.LastCheckpoint != nil || job.LastCommitted != nil {
		t.Fatalf("job created again: LastCheckpoint %s, LastCommitted %s; want null (its checkpoints were deleted)",
			fmtIDPtr(job.LastCheckpoint), fmtIDPtr(job.LastCommitted))
	}
	b.view("j", func(tx coordinator.JobTx) error {
		for id := int64(1); id <= 3; id++ {
			if _, err := tx.Checkpoint(b.ctx, id); err != coordinator.ErrNotFound {
				t.Errorf("checkpoint %d of the deleted job: %v, want ErrNotFound", id, err)
			}
		}
		return nil
	})
	if cps, err := b.store.ListCheckpoints(b.ctx, coordinator.CheckpointQuery{Job: "j", Limit: 10}); err != nil || len(cps) != 0 {
		t.Fatalf("ListCheckpoints of the job created again: %v, %v; want none", ids(cps), err)
	}
	cp := b.insert("j", nil)
	if cp.ID != 4 {
		t.Fatalf("first checkpoint after delete and create has id %d, want 4", cp.ID)
	}
	if s := b.getJob("j").Seq; s != 4 {
		t.Fatalf("Seq after that insert: %d, want 4", s)
	}
}

func testSetEpoch(t *testing.T, b *bundle) {
	b.putJob("j", config("p1", "p2"))
	b.update("j", func(tx coordinator.JobTx) error {
		for _, e := range []struct {
			p string
			n int64
		}{{"p1", 1}, {"p2", 7}, {"p1", 2}, {"gone", 3}} {
			if err := tx.SetEpoch(b.ctx, e.p, e.n); err != nil {
				return err
			}
		}
		return nil
	})
	want := map[string]int64{"p1": 2, "p2": 7, "gone": 3}
	b.view("j", func(tx coordinator.JobTx) error {
		if got := tx.Job().Epochs; !maps.Equal(got, want) {
			t.Errorf("Job().Epochs in a new transaction: %v, want %v", got, want)
		}
		if e := tx.Job().Epoch("never"); e != 0 {
			t.Errorf("Epoch of a participant that never registered: %d, want 0", e)
		}
		return nil
	})
	b.putJob("j", config("p1"))
	if got := b.getJob("j").Epochs; !maps.Equal(got, want) {
		t.Fatalf("GetJob Epochs after p2 left the configuration: %v, want %v (every participant that ever registered)", got, want)
	}
	b.update("j", func(tx coordinator.JobTx) error { return tx.SetEpoch(b.ctx, "p1", 3) })
	if e := b.getJob("j").Epochs["p1"]; e != 3 {
		t.Fatalf("epoch of p1 after SetEpoch 3: %d", e)
	}
}

func testPreparing(t *testing.T, b *bundle) {
	b.putJob("j", config("a", "b"))
	b.putJob("other", config("a"))
	b.insert("other", nil)
	for range 6 {
		b.insert("j", nil)
	}
	b.decide("j", 2, coordinator.StatusAborted, "x")
	b.decide("j", 4, coordinator.StatusCommitting, "")
	b.decide("j", 6, coordinator.StatusCommitted, "")
	b.saveVote("j", 3, "b", coordinator.VotePrepared, `[{"k":3}]`)
	b.update("j", func(tx coordinator.JobTx) error {
		ps, err := tx.Preparing(b.ctx)
		if err != nil {
			return err
		}
		wantIDs(t, "Preparing", ps, "j/1", "j/3", "j/5")
		// They are whole checkpoints: the rules decide on their votes and deadlines.
		for _, cp := range ps {
			want, err := tx.Checkpoint(b.ctx, cp.ID)
			if err != nil {
				return err
			}
			wantCheckpoint(t, fmt.Sprintf("Preparing's checkpoint %d", cp.ID), want, cp)
		}
		if v := ps[1].Participant("b"); v == nil || v.Vote != coordinator.VotePrepared || string(v.Committables) != `[{"k":3}]` {
			t.Errorf("Preparing's checkpoint 3 lacks b's vote: %+v", v)
		}
		return nil
	})
}

// testCheckpointHint: the checkpoint named to Update is read as any other, whatever its
// status, also after this update wrote to it, and naming one changes nothing else.
func testCheckpointHint(t *testing.T, b *bundle) {
	b.putJob("j", config("a", "b"))
	for range 3 {
		b.insert("j", nil)
	}
	b.decide("j", 1, coordinator.StatusCommitting, "")
	b.saveVote("j", 2, "a", coordinator.VotePrepared, `["two"]`)
	b.decide("j", 3, coordinator.StatusAborted, "no")
	update := func(hint int64, fn func(tx coordinator.JobTx) error) {
		t.Helper()
		if err := b.store.Update(b.ctx, "j", hint, fn); err != nil {
			t.Fatalf("Update(j, %d): %v", hint, err)
		}
	}
	want := map[int64]*coordinator.Checkpoint{}
	for id := int64(1); id <= 3; id++ {
		want[id] = b.checkpoint("j", id)
	}
	for _, hint := range []int64{0, 1, 2, 3, 99} {
		update(hint, func(tx coordinator.JobTx) error {
			ps, err := tx.Preparing(b.ctx)
			if err != nil {
				return err
			}
			wantIDs(t, fmt.Sprintf("Preparing with hint %d", hint), ps, "j/2")
			for id := int64(1); id <= 3; id++ {
				got, err := tx.Checkpoint(b.ctx, id)
				if err != nil {
					return err
				}
				wantCheckpoint(t, fmt.Sprintf("Checkpoint(%d) with hint %d", id, hint), want[id], got)
			}
			if _, err := tx.Checkpoint(b.ctx, 99); err != coordinator.ErrNotFound {
				t.Errorf("Checkpoint(99) with hint %d: %v, want ErrNotFound", hint, err)
			}
			return nil
		})
	}
	// Written first (reached another way), read after: the read shows the write.
	update(1, func(tx coordinator.JobTx) error {
		owing, err := tx.Owing(b.ctx, "a")
		if err != nil {
			return err
		}
		var cp *coordinator.Checkpoint
		for _, o := range owing {
			if o.ID == 1 {
				cp = o
			}
		}
		if cp == nil {
			t.Fatalf("Owing(a) lacks committing checkpoint 1: %v", owing)
		}
		now := tx.Now()
		p := cp.Participant("a")
		p.AckedAt = &now
		if err := tx.SaveAck(b.ctx, cp, p); err != nil {
			return err
		}
		again, err := tx.Checkpoint(b.ctx, 1)
		if err != nil {
			return err
		}
		if again == cp || again.Participant("a").AckedAt == nil {
			t.Errorf("Checkpoint(1) after SaveAck in the same update: acked_at %v, want the ack (a fresh read)", again.Participant("a").AckedAt)
		}
		return nil
	})
	update(3, func(tx coordinator.JobTx) error {
		cp, err := tx.Checkpoint(b.ctx, 2)
		if err != nil {
			return err
		}
		cp.Status = coordinator.StatusAborted
		now := tx.Now()
		cp.DecidedAt, cp.AbortReason = &now, "by hand"
		if err := tx.SaveStatus(b.ctx, cp); err != nil {
			return err
		}
		ps, err := tx.Preparing(b.ctx)
		if err != nil {
			return err
		}
		wantIDs(t, "Preparing after aborting 2 in the same update", ps)
		return nil
	})
	if err := b.store.Update(b.ctx, "nope", 1, func(coordinator.JobTx) error { return nil }); err != coordinator.ErrNotFound {
		t.Fatalf("Update of a missing job with a hint: %v, want ErrNotFound", err)
	}
}

// testUpdateManyJobsAtOnce runs updates on many jobs, two per checkpoint, at once, so that
// a store that commits several together sees jobs with one and with several updates, some
// of a missing job, in one go: each must see its own job, and every write must land.
func testUpdateManyJobsAtOnce(t *testing.T, b *bundle) {
	const jobs, rounds = 12, 4
	for j := range jobs {
		b.putJob(fmt.Sprintf("m%02d", j), config("a", "b"))
	}
	var wg sync.WaitGroup
	errs := make(chan error, jobs*rounds*3)
	for j := range jobs {
		name := fmt.Sprintf("m%02d", j)
		wg.Go(func() {
			for r := int64(1); r <= rounds; r++ {
				err := b.store.Update(b.ctx, name, 0, func(tx coordinator.JobTx) error {
					return tx.InsertCheckpoint(b.ctx, newCheckpoint(tx, name), nil)
				})
				if err != nil {
					errs <- fmt.Errorf("insert %s/%d: %w", name, r, err)
					return
				}
				var inner sync.WaitGroup
				for _, p := range []string{"a", "b"} {
					inner.Go(func() {
						err := b.store.Update(b.ctx, name, r, func(tx coordinator.JobTx) error {
							if tx.Job().Name != name {
								return fmt.Errorf("update of %s saw job %s", name, tx.Job().Name)
							}
							cp, err := tx.Checkpoint(b.ctx, r)
							if err != nil {
								return err
							}
							ps := cp.Participant(p)
							now := tx.Now()
							ps.Epoch, ps.Vote, ps.VotedAt = 1, coordinator.VotePrepared, &now
							ps.Committables = json.RawMessage(fmt.Sprintf(`["%s/%d/%s"]`, name, r, p))
							return tx.SaveVote(b.ctx, cp, ps)
						})
						if err != nil {
							errs <- fmt.Errorf("vote %s/%d/%s: %w", name, r, p, err)
						}
					})
				}
				wg.Go(func() {
					if err := b.store.Update(b.ctx, "missing", r, func(coordinator.JobTx) error { return nil }); err != coordinator.ErrNotFound {
						errs <- fmt.Errorf("update of a missing job: %v, want ErrNotFound", err)
					}
				})
				inner.Wait()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for j := range jobs {
		name := fmt.Sprintf("m%02d", j)
		for r := int64(1); r <= rounds; r++ {
			cp := b.checkpoint(name, r)
			for _, p := range []string{"a", "b"} {
				want := fmt.Sprintf(`["%s/%d/%s"]`, name, r, p)
				if got := cp.Participant(p); got.Vote != coordinator.VotePrepared || string(got.Committables) != want {
					t.Errorf("%s/%d: %s's vote %q %s, want prepared %s", name, r, p, got.Vote, got.Committables, want)
				}
			}
		}
	}
}

func testOwing(t *testing.T, b *bundle) {
	b.putJob("j", config("p1", "p2"))
	b.putJob("other", config("p1", "p2"))
	b.insert("other", nil) // another job's debts are not this job's
	// 1 committed and fully acked: nothing owed.
	b.insert("j", nil)
	b.saveAck("j", 1, "p1")
	b.saveAck("j", 1, "p2")
	b.decide("j", 1, coordinator.StatusCommitted, "")
	// 2 committing, p1 acked.
	b.insert("j", nil)
	b.decide("j", 2, coordinator.StatusCommitting, "")
	b.saveAck("j", 2, "p1")
	// 3 aborted, p1 voted prepared and has not acked, p2 acked.
	b.insert("j", nil)
	b.saveVote("j", 3, "p1", coordinator.VotePrepared, `["t3"]`)
	b.decide("j", 3, coordinator.StatusAborted, "x")
	b.saveAck("j", 3, "p2")
	// 4 preparing, p2 voted.
	b.insert("j", nil)
	b.saveVote("j", 4, "p2", coordinator.VotePrepared, `["t4"]`)
	// 5 committed with p2 unacked: committed is excluded whatever the acks say.
	b.insert("j", nil)
	b.saveAck("j", 5, "p1")
	b.decide("j", 5, coordinator.StatusCommitted, "")
	// 6 aborted, both acked.
	b.insert("j", nil)
	b.saveVote("j", 6, "p1", coordinator.VotePrepared, `["t6"]`)
	b.decide("j", 6, coordinator.StatusAborted, "x")
	b.saveAck("j", 6, "p1")
	b.saveAck("j", 6, "p2")

	b.view("j", func(tx coordinator.JobTx) error {
		for _, c := range []struct {
			participant string
			want        []string
		}{
			{"p1", []string{"j/3", "j/4"}},
			{"p2", []string{"j/2", "j/4"}},
			{"", []string{"j/2", "j/3", "j/4"}},
			{"stranger", nil},
		} {
			owing, err := tx.Owing(b.ctx, c.participant)
			if err != nil {
				return err
			}
			wantIDs(t, fmt.Sprintf("Owing(%q)", c.participant), owing, c.want...)
			if c.participant == "p1" {
				if got := owing[0].Participant("p1"); string(got.Committables) != `["t3"]` || got.Vote != coordinator.VotePrepared {
					t.Errorf("Owing(p1) checkpoint 3: vote %q committables %s, want prepared [\"t3\"]", got.Vote, got.Committables)
				}
			}
		}
		return nil
	})
}

// testOwingAbortedWithoutPreparedVote: JobTx.Owing leaves out aborted checkpoints without
// an unacked prepared vote (nothing can be owed there, by coordinator.Owed), so its cost does
// not grow with history, and keeps those where a prepared vote still waits for its rollback.
func testOwingAbortedWithoutPreparedVote(t *testing.T, b *bundle) {
	b.putJob("j", config("p1", "p2"))
	b.insert("j", nil)
	b.saveVote("j", 1, "p1", coordinator.VoteAbort, "")
	b.decide("j", 1, coordinator.StatusAborted, "p1 voted abort")
	b.insert("j", nil)
	b.saveVote("j", 2, "p1", coordinator.VotePrepared, `["t"]`)
	b.saveVote("j", 2, "p2", coordinator.VoteAbort, "")
	b.decide("j", 2, coordinator.StatusAborted, "p2 voted abort")
	want := map[string][]string{"p1": {"j/2"}, "p2": nil, "": {"j/2"}}
	b.view("j", func(tx coordinator.JobTx) error {
		for _, p := range []string{"p1", "p2", ""} {
			owing, err := tx.Owing(b.ctx, p)
			if err != nil {
				return err
			}
			wantIDs(t, fmt.Sprintf("Owing(%q) with checkpoints 1 (no prepared vote) and 2 (p1 prepared) aborted, unacked", p), owing, want[p]...)
		}
		return nil
	})
}

func testIdempotencyRoundTrip(t *testing.T, b *bundle) {
	b.putJob("j", config("a"))
	b.putJob("other", config("a"))
	key := `retry-1 /x?=&"'`
	b.view("j", func(tx coordinator.JobTx) error {
		rec, ok, err := tx.Idempotency(b.ctx, key)
		if ok || err != nil {
			t.Errorf("Idempotency of an unknown key: %+v, %v, %v; want not ok, nil", rec, ok, err)
		}
		return nil
	})
	want := coordinator.IdempotencyRecord{Key: key, Fingerprint: "sha256:abc", Checkpoint: 1}
	b.update("j", func(tx coordinator.JobTx) error {
		return tx.InsertCheckpoint(b.ctx, newCheckpoint(tx, "j"), &want)
	})
	b.insert("j", nil)
	b.view("j", func(tx coordinator.JobTx) error {
		rec, ok, err := tx.Idempotency(b.ctx, key)
		if !ok || err != nil || rec != want {
			t.Errorf("Idempotency(%q) = %+v, %v, %v; want %+v", key, rec, ok, err, want)
		}
		return nil
	})
	b.view("other", func(tx coordinator.JobTx) error {
		if rec, ok, err := tx.Idempotency(b.ctx, key); ok || err != nil {
			t.Errorf("another job's Idempotency(%q) = %+v, %v, %v; want unknown (keys belong to a job)", key, rec, ok, err)
		}
		return nil
	})
	// The same key may open a checkpoint of another job.
	b.update("other", func(tx coordinator.JobTx) error {
		return tx.InsertCheckpoint(b.ctx, newCheckpoint(tx, "other"), &coordinator.IdempotencyRecord{Key: key, Fingerprint: "f2", Checkpoint: 1})
	})
	b.view("other", func(tx coordinator.JobTx) error {
		if rec, ok, err := tx.Idempotency(b.ctx, key); !ok || err != nil || rec.Fingerprint != "f2" {
			t.Errorf("other's Idempotency(%q) = %+v, %v, %v; want fingerprint f2", key, rec, ok, err)
		}
		return nil
	})
}

func testExpiredJobs(t *testing.T, b *bundle) {
	if jobs, err := b.store.ExpiredJobs(b.ctx); err != nil || len(jobs) != 0 {
		t.Fatalf("ExpiredJobs on an empty store: %v, %v", jobs, err)
	}
	past := func(d time.Duration) func(tx coordinator.JobTx, cp *coordinator.Checkpoint) {
		return func(tx coordinator.JobTx, cp *coordinator.Checkpoint) {
			cp.CreatedAt = tx.Now().Add(-time.Hour)
			cp.Deadline = tx.Now().Add(-d)
		}
	}
	for _, name := range []string{"exp-a", "exp-now", "exp-twice", "fresh", "decided", "gone"} {
		b.putJob(name, config("p"))
	}
	b.insert("exp-a", past(time.Second))
	b.insert("exp-now", past(0)) // deadline == the transaction's now: expired by the time we ask
	b.insert("exp-twice", past(time.Minute))
	b.insert("exp-twice", past(time.Second))
	b.insert("fresh", nil)
	b.insert("decided", past(time.Second))
	b.decide("decided", 1, coordinator.StatusAborted, "x")
	b.insert("decided", nil)
	b.insert("gone", past(time.Second))
	b.decide("gone", 1, coordinator.StatusAborted, "x")
	b.update("gone", func(tx coordinator.JobTx) error { return tx.DeleteJob(b.ctx) })

	jobs, err := b.store.ExpiredJobs(b.ctx)
	if err != nil {
		t.Fatalf("ExpiredJobs: %v", err)
	}
	sorted := slices.Clone(jobs)
	slices.Sort(sorted)
	if want := []string{"exp-a", "exp-now", "exp-twice"}; !slices.Equal(sorted, want) {
		t.Fatalf("ExpiredJobs = %v, want %v, each once", jobs, want)
	}
	// A deadline a little ahead is not expired yet, and is once the database's clock passes it.
	b.putJob("soon", config("p"))
	b.insert("soon", func(tx coordinator.JobTx, cp *coordinator.Checkpoint) {
		cp.Deadline = tx.Now().Add(300 * time.Millisecond)
	})
	if jobs, _ := b.store.ExpiredJobs(b.ctx); slices.Contains(jobs, "soon") {
		t.Fatalf("ExpiredJobs = %v names soon, whose deadline is 300ms ahead", jobs)
	}
	time.Sleep(400 * time.Millisecond)
	if jobs, _ := b.store.ExpiredJobs(b.ctx); !slices.Contains(jobs, "soon") {
		t.Fatalf("ExpiredJobs = %v lacks soon, whose deadline passed 100ms ago", jobs)
	}
}

// testListCheckpointsPerJob: with Job set, newest first; After is an id, exclusive, and the
// next page holds lower ids.
func testListCheckpointsPerJob(t *testing.T, b *bundle) {
	b.putJob("lc", config("a"))
	b.putJob("other", config("a"))
	statuses := []coordinator.Status{"", coordinator.StatusCommitted, coordinator.StatusAborted, coordinator.StatusCommitting,
		coordinator.StatusAborted, coordinator.StatusPreparing, coordinator.StatusPreparing}
	for id := 1; id <= 6; id++ {
		b.insert("lc", nil)
		b.insert("other", nil)
		if s := statuses[id]; s != coordinator.StatusPreparing {
			b.decide("lc", int64(id), s, "")
		}
	}
	list := func(q coordinator.CheckpointQuery) []*coordinator.Checkpoint {
		t.Helper()
		q.Job = "lc"
		cps, err := b.store.ListCheckpoints(b.ctx, q)
		if err != nil {
			t.Fatalf("ListCheckpoints(%+v): %v", q, err)
		}
		return cps
	}
	aborted := []coordinator.Status{coordinator.StatusAborted}
	decided := []coordinator.Status{coordinator.StatusAborted, coordinator.StatusCommitting}
	cases := []struct {
		q    coordinator.CheckpointQuery
		want []string
	}{
		{coordinator.CheckpointQuery{Limit: 100}, []string{"lc/6", "lc/5", "lc/4", "lc/3", "lc/2", "lc/1"}},
		{coordinator.CheckpointQuery{Limit: 2}, []string{"lc/6", "lc/5"}},
		{coordinator.CheckpointQuery{Limit: 2, After: 5}, []string{"lc/4", "lc/3"}},
		{coordinator.CheckpointQuery{Limit: 2, After: 3}, []string{"lc/2", "lc/1"}},
		{coordinator.CheckpointQuery{Limit: 2, After: 1}, nil},
		{coordinator.CheckpointQuery{Limit: 100, Statuses: aborted}, []string{"lc/4", "lc/2"}},
		{coordinator.CheckpointQuery{Limit: 100, Statuses: decided}, []string{"lc/4", "lc/3", "lc/2"}},
		{coordinator.CheckpointQuery{Limit: 1, Statuses: decided}, []string{"lc/4"}},
		{coordinator.CheckpointQuery{Limit: 100, Statuses: decided, After: 4}, []string{"lc/3", "lc/2"}},
		{coordinator.CheckpointQuery{Limit: 100, Statuses: []coordinator.Status{coordinator.StatusCommitted}}, []string{"lc/1"}},
	}
	for _, c := range cases {
		wantIDs(t, fmt.Sprintf("ListCheckpoints(%+v)", c.q), list(c.q), c.want...)
	}
	// Listed checkpoints are whole, as Checkpoint reads them.
	for _, cp := range list(coordinator.CheckpointQuery{Limit: 100}) {
		wantCheckpoint(t, fmt.Sprintf("listed checkpoint %d", cp.ID), b.checkpoint("lc", cp.ID), cp)
	}
	if cps, err := b.store.ListCheckpoints(b.ctx, coordinator.CheckpointQuery{Job: "nope", Limit: 10}); err != nil || len(cps) != 0 {
		t.Fatalf("ListCheckpoints of a missing job: %v, %v; want none", ids(cps), err)
	}
}

// testListCheckpointsGlobal: without Job, every job's checkpoints oldest first by Seq; After
// is a Seq, exclusive.
func testListCheckpointsGlobal(t *testing.T, b *bundle) {
	if cps, err := b.store.ListCheckpoints(b.ctx, coordinator.CheckpointQuery{Limit: 10}); err != nil || len(cps) != 0 {
		t.Fatalf("ListCheckpoints on an empty store: %v, %v", ids(cps), err)
	}
	b.putJob("beta", config("a"))
	b.putJob("alpha", config("a"))
	b.putJob("gone", config("a"))
	b.insert("gone", nil)
	b.decide("gone", 1, coordinator.StatusCommitting, "")
	// Created alternately, so creation order is neither by job nor by id.
	order := []struct {
		job    string
		status coordinator.Status
	}{
		{"alpha", coordinator.StatusCommitted}, {"beta", coordinator.StatusPreparing},
		{"alpha", coordinator.StatusCommitting}, {"beta", coordinator.StatusAborted},
		{"beta", coordinator.StatusCommitting}, {"alpha", coordinator.StatusPreparing},
	}
	var seqs []int64
	for _, o := range order {
		cp := b.insert(o.job, nil)
		seqs = append(seqs, cp.Seq)
		if o.status != coordinator.StatusPreparing {
			b.decide(o.job, cp.ID, o.status, "")
		}
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			t.Fatalf("Seq of checkpoints in creation order: %v, want increasing", seqs)
		}
	}
	b.update("gone", func(tx coordinator.JobTx) error { return tx.DeleteJob(b.ctx) })

	list := func(q coordinator.CheckpointQuery) []*coordinator.Checkpoint {
		t.Helper()
		cps, err := b.store.ListCheckpoints(b.ctx, q)
		if err != nil {
			t.Fatalf("ListCheckpoints(%+v): %v", q, err)
		}
		return cps
	}
	open := []coordinator.Status{coordinator.StatusPreparing, coordinator.StatusCommitting}
	all := list(coordinator.CheckpointQuery{Limit: 100})
	wantIDs(t, "global list", all, "alpha/1", "beta/1", "alpha/2", "beta/2", "beta/3", "alpha/3")
	for i, cp := range all {
		if cp.Seq != seqs[i] {
			t.Fatalf("global list item %d (%s/%d) has Seq %d, InsertCheckpoint assigned %d", i, cp.Job, cp.ID, cp.Seq, seqs[i])
		}
		wantCheckpoint(t, "listed checkpoint", b.checkpoint(cp.Job, cp.ID), cp)
	}
	wantIDs(t, "global list of preparing and committing", list(coordinator.CheckpointQuery{Limit: 100, Statuses: open}),
		"beta/1", "alpha/2", "beta/3", "alpha/3")
	page := list(coordinator.CheckpointQuery{Limit: 2, Statuses: open})
	wantIDs(t, "global page 1", page, "beta/1", "alpha/2")
	page = list(coordinator.CheckpointQuery{Limit: 2, Statuses: open, After: page[1].Seq})
	wantIDs(t, "global page 2 (After = Seq of alpha/2)", page, "beta/3", "alpha/3")
	page = list(coordinator.CheckpointQuery{Limit: 2, Statuses: open, After: page[1].Seq})
	wantIDs(t, "global page 3", page)
	wantIDs(t, "global list after alpha/1's Seq", list(coordinator.CheckpointQuery{Limit: 3, After: seqs[0]}), "beta/1", "alpha/2", "beta/2")
}

func testSubscribeWoken(t *testing.T, b *bundle) {
	b.putJob("j", config("a"))
	b.insert("j", nil)
	b.saveVote("j", 1, "a", coordinator.VotePrepared, `["one"]`)
	sub := b.store.Subscribe("j", 1)
	defer sub.Cancel()
	b.decide("j", 1, coordinator.StatusAborted, "x")
	if !waitClosed(sub.Done(), time.Second) {
		t.Fatal("a waiter subscribed before a decision committed was not woken within 1s")
	}
	wantPublished(t, sub, b.checkpoint("j", 1))
	// A commit decision wakes too, and a second round of waiting works.
	b.insert("j", nil)
	sub2 := b.store.Subscribe("j", 2)
	defer sub2.Cancel()
	b.decide("j", 2, coordinator.StatusCommitting, "")
	if !waitClosed(sub2.Done(), time.Second) {
		t.Fatal("a waiter on checkpoint 2 was not woken within 1s by its commit decision")
	}
	wantPublished(t, sub2, b.checkpoint("j", 2))
}

// wantPublished checks what a waiter woken by a decision this store took is handed: the
// checkpoint as committed (a store may hand nothing, then the waiter reads it; these
// stores all hand it), and a copy of its own.
func wantPublished(t *testing.T, sub *coordinator.Subscription, committed *coordinator.Checkpoint) {
	t.Helper()
	got := sub.Decided()
	if got == nil {
		t.Fatalf("a waiter woken by a decision this process committed was handed no checkpoint")
	}
	wantCheckpoint(t, "the checkpoint handed to a waiter", committed, got)
	got.Status = "scribbled"
	if again := sub.Decided(); again.Status != committed.Status {
		t.Fatalf("a waiter's change to the checkpoint it was handed shows in the next one: %s", again.Status)
	}
}

func testSubscribeWokenOnRejection(t *testing.T, b *bundle) {
	b.putJob("j", config("a"))
	b.insert("j", nil)
	sub := b.store.Subscribe("j", 1)
	defer sub.Cancel()
	err := b.store.Update(b.ctx, "j", 0, func(tx coordinator.JobTx) error {
		cp, err := tx.Checkpoint(b.ctx, 1)
		if err != nil {
			return err
		}
		now := tx.Now()
		cp.Status, cp.DecidedAt, cp.CompletedAt, cp.AbortReason = coordinator.StatusAborted, &now, &now, "expired"
		if err := tx.SaveStatus(b.ctx, cp); err != nil {
			return err
		}
		// Changed after it was saved: not what committed, so not what a waiter gets.
		cp.AbortReason = "not saved"
		return &coordinator.Error{Code: coordinator.CodeAlreadyDecided}
	})
	wantErr(t, "Update", err, coordinator.ErrAlreadyDecided)
	if !waitClosed(sub.Done(), time.Second) {
		t.Fatal("a decision saved in an Update that returned a rejection (so committed) did not wake its waiter within 1s")
	}
	wantPublished(t, sub, b.checkpoint("j", 1))
}

func testSubscribeCancel(t *testing.T, b *bundle) {
	b.putJob("j", config("a"))
	b.insert("j", nil)
	cancelled := b.store.Subscribe("j", 1)
	kept := b.store.Subscribe("j", 1)
	defer kept.Cancel()
	cancelled.Cancel()
	// Many waiters that come and go leave the store working.
	for range 100 {
		b.store.Subscribe("j", 1).Cancel()
	}
	b.decide("j", 1, coordinator.StatusAborted, "x")
	if !waitClosed(kept.Done(), time.Second) {
		t.Fatal("cancelling one waiter kept another on the same checkpoint from being woken")
	}
}

func testReady(t *testing.T, b *bundle) {
	if err := b.store.Ready(b.ctx); err != nil {
		t.Fatalf("Ready on a migrated store: %v", err)
	}
}

// testGetCheckpoint: the read outside a transaction tells a missing job (ErrNotFound) from a
// missing checkpoint (nil, nil) and returns the checkpoint as a transaction reads it.
func testGetCheckpoint(t *testing.T, b *bundle) {
	if cp, err := b.store.GetCheckpoint(b.ctx, "nope", 1); err != coordinator.ErrNotFound || cp != nil {
		t.Fatalf("GetCheckpoint on a missing job: %v, %v; want nil, ErrNotFound itself", cp, err)
	}
	b.putJob("j", config("a", "b"))
	if cp, err := b.store.GetCheckpoint(b.ctx, "j", 1); err != nil || cp != nil {
		t.Fatalf("GetCheckpoint of a missing checkpoint: %v, %v; want nil, nil", cp, err)
	}
	b.insert("j", nil)
	b.saveVote("j", 1, "a", coordinator.VotePrepared, `[{"z":1,"a":2}]`)
	var want *coordinator.Checkpoint
	b.view("j", func(tx coordinator.JobTx) (err error) {
		want, err = tx.Checkpoint(b.ctx, 1)
		return err
	})
	got, err := b.store.GetCheckpoint(b.ctx, "j", 1)
	if err != nil || got == nil {
		t.Fatalf("GetCheckpoint: %v, %v", got, err)
	}
	if got.ID != 1 || got.Status != want.Status || len(got.Participants) != 2 ||
		string(got.Participants[0].Committables) != `[{"z":1,"a":2}]` || got.Participants[0].Vote != coordinator.VotePrepared ||
		!got.Deadline.Equal(want.Deadline) || got.Seq != want.Seq {
		t.Fatalf("GetCheckpoint returned %+v, want %+v", got, want)
	}
}
