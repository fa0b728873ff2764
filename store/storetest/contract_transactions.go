package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
)

func testUpdateMissingJob(t *testing.T, b *bundle) {
	called := false
	err := b.store.Update(b.ctx, "nope", 0, func(tx coordinator.JobTx) error { called = true; return nil })
	wantNotFound(t, "Update of a missing job", err)
	if called {
		t.Fatal("Update of a missing job called fn")
	}
	// A deleted job is missing too.
	b.putJob("gone", config("a"))
	b.update("gone", func(tx coordinator.JobTx) error { return deleteJob(b.ctx, tx) })
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
		{"SetEpoch", func(tx coordinator.JobTx) error { return setEpoch(b.ctx, tx, "a", 9) }},
		{"InsertCheckpoint", func(tx coordinator.JobTx) error {
			return insertCheckpoint(b.ctx, tx, newCheckpoint(tx, "j"), &coordinator.IdempotencyRecord{Key: "k", Fingerprint: "f", Checkpoint: 2})
		}},
		{"SaveStatus", func(tx coordinator.JobTx) error {
			cp, err := tx.Checkpoint(b.ctx, 1)
			if err != nil {
				return fmt.Errorf("read: %w", err)
			}
			now := tx.Now()
			cp.Status, cp.DecidedAt, cp.CompletedAt, cp.AbortReason = coordinator.StatusAborted, &now, &now, "x"
			return saveStatus(b.ctx, tx, cp)
		}},
		{"SaveVote", func(tx coordinator.JobTx) error {
			cp, err := tx.Checkpoint(b.ctx, 1)
			if err != nil {
				return fmt.Errorf("read: %w", err)
			}
			now := tx.Now()
			p := cp.Participant("b")
			p.Epoch, p.Vote, p.VotedAt, p.Committables = 1, coordinator.VotePrepared, &now, json.RawMessage(`[2]`)
			return saveVote(b.ctx, tx, cp, p)
		}},
		{"SaveAck", func(tx coordinator.JobTx) error {
			cp, err := tx.Checkpoint(b.ctx, 1)
			if err != nil {
				return fmt.Errorf("read: %w", err)
			}
			now := tx.Now()
			p := cp.Participant("a")
			p.AckedAt = &now
			return saveAck(b.ctx, tx, cp, p)
		}},
		{"DeleteJob", func(tx coordinator.JobTx) error { return deleteJob(b.ctx, tx) }},
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
	if err := setEpoch(b.ctx, tx, "a", 7); err != nil {
		return err
	}
	cp1, err := tx.Checkpoint(b.ctx, 1)
	if err != nil {
		return err
	}
	now := tx.Now()
	p := cp1.Participant("a")
	p.Epoch, p.Vote, p.VotedAt, p.Committables = 7, coordinator.VotePrepared, &now, json.RawMessage(`["x"]`)
	if err := saveVote(b.ctx, tx, cp1, p); err != nil {
		return err
	}
	cp1.Status, cp1.DecidedAt, cp1.CompletedAt, cp1.AbortReason = coordinator.StatusAborted, &now, &now, "test"
	if err := saveStatus(b.ctx, tx, cp1); err != nil {
		return err
	}
	p.AckedAt = &now
	if err := saveAck(b.ctx, tx, cp1, p); err != nil {
		return err
	}
	return insertCheckpoint(b.ctx, tx, newCheckpoint(tx, "j"), &coordinator.IdempotencyRecord{Key: "k", Fingerprint: "f", Checkpoint: 2})
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
		if err := setEpoch(b.ctx, tx, "a", 3); err != nil {
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
				return setEpoch(b.ctx, tx, "a", e+1)
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
		if err := insertCheckpoint(b.ctx, tx, newCheckpoint(tx, "j"), nil); err != nil {
			return err
		}
		if err := setEpoch(b.ctx, tx, "a", 5); err != nil {
			return err
		}
		if s, e := tx.Job().Seq, tx.Job().Epoch("a"); s != 1 || e != 5 {
			t.Errorf("in the transaction that wrote them: Job().Seq %d, Epoch(a) %d; want 1, 5", s, e)
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
		if err := saveAck(b.ctx, tx, cp, p); err != nil {
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
		if err := saveStatus(b.ctx, tx, cp); err != nil {
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
					return insertCheckpoint(b.ctx, tx, newCheckpoint(tx, name), nil)
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
							return saveVote(b.ctx, tx, cp, ps)
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
