package postgres

import (
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
)

// cachedTx is the last update of a batch on job j, which left checkpoint 1 preparing.
func cachedTx() *jobTx {
	cp := &coordinator.Checkpoint{Job: "j", ID: 1, Status: coordinator.StatusPreparing,
		Participants: []coordinator.ParticipantState{{Name: "a"}, {Name: "b"}}}
	return &jobTx{job: &coordinator.Job{Name: "j"}, now: time.Now(), canCache: true,
		checkpoints: map[int64]*coordinator.Checkpoint{1: cp}}
}

// TestKnownPreparingOnlyWhatCannotBeStale: knownPreparing, which lets a long-poll wait
// without reading, answers true only from a state the listener would have had to drop:
// never while the listener is down, nothing cached before it started listening, nothing
// heard of from another process, and no state from a batch begun before such news.
func TestKnownPreparingOnlyWhatCannotBeStale(t *testing.T) {
	c := newStateCache()
	began := time.Now()
	c.put(cachedTx(), 7, began)
	if c.knownPreparing("j", 1) {
		t.Fatal("known preparing while the listener has not started")
	}
	c.listen(true)
	if c.knownPreparing("j", 1) {
		t.Fatal("a state cached before the listener started is trusted")
	}
	c.put(cachedTx(), 7, time.Now())
	if !c.knownPreparing("j", 1) || c.knownPreparing("j", 2) || c.knownPreparing("k", 1) {
		t.Fatal("knownPreparing answers other than for the cached preparing checkpoint")
	}
	began = time.Now()
	c.heardForeign("j")
	if c.knownPreparing("j", 1) {
		t.Fatal("still known preparing after another process decided on the job")
	}
	c.put(cachedTx(), 8, began)
	if c.knownPreparing("j", 1) {
		t.Fatal("a state from a batch begun before another process's decision was cached")
	}
	c.put(cachedTx(), 9, time.Now())
	if !c.knownPreparing("j", 1) {
		t.Fatal("a state from a batch begun after the news is not cached")
	}
	// A batch takes the state: until it puts back or releases, the state it began from
	// answers (it publishes its decisions only after that); news from another process
	// drops it like a cached one.
	if c.take("j") == nil || !c.knownPreparing("j", 1) {
		t.Fatal("the state a batch took is not known preparing")
	}
	c.release("j")
	if c.knownPreparing("j", 1) {
		t.Fatal("still known preparing after the batch that took the state failed")
	}
	c.put(cachedTx(), 10, time.Now())
	c.take("j")
	c.heardForeign("j")
	if c.knownPreparing("j", 1) {
		t.Fatal("a state a batch took is still known preparing after another process decided on the job")
	}
	c.put(cachedTx(), 11, time.Now())
	c.take("j")
	c.listen(false)
	if c.knownPreparing("j", 1) {
		t.Fatal("known preparing while the listener is down")
	}
}

// TestClockEstimateNeverAhead: the estimate of the database's clock keeps, of the readings
// of the last second, the one that puts the database furthest ahead (the least late), and
// never goes before the job's last clock.
func TestClockEstimateNeverAhead(t *testing.T) {
	c := newStateCache()
	if _, ok := c.estimate(time.Time{}); ok {
		t.Fatal("an estimate without any reading")
	}
	db := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := time.Now()
	c.observe(db, at)
	c.observe(db.Add(-time.Millisecond), at.Add(time.Microsecond)) // a later, later-arriving reading
	now, ok := c.estimate(time.Time{})
	if !ok || now.Before(db) || now.After(db.Add(time.Since(at))) {
		t.Fatalf("estimate %s from a reading of %s %s ago", now, db, time.Since(at))
	}
	last := db.Add(time.Hour)
	if now, _ := c.estimate(last); !now.Equal(last) {
		t.Fatalf("estimate %s before the job's last clock %s", now, last)
	}
}

// A state a batch took stays what pending is told of the job (knownOwing, knownVersion)
// until the batch puts back what it left, or releases the job because it failed; another
// batch cannot take it meanwhile. News from another process, or the listener stopping,
// drops it as it drops what is cached.
func TestBusyStateToldUntilPutOrReleased(t *testing.T) {
	c := newStateCache()
	c.listen(true)
	tx := cachedTx()
	tx.knowsOwed = true
	c.put(tx, 7, time.Now())
	told := func() int64 {
		t.Helper()
		job, _, _, ok := c.knownOwing("j")
		v, vok := c.knownVersion("j")
		if ok != vok || ok && job.Version != v {
			t.Fatalf("knownOwing (%v) and knownVersion (%d, %v) disagree", ok, v, vok)
		}
		if !ok {
			return 0
		}
		return v
	}
	if got := told(); got != 7 {
		t.Fatalf("cached at version 7, told %d", got)
	}
	if c.take("j") == nil {
		t.Fatal("nothing to take")
	}
	if got := told(); got != 7 {
		t.Fatalf("taken by a batch, told %d; want the state it began from, 7", got)
	}
	if c.take("j") != nil {
		t.Fatal("a state taken by one batch was taken again")
	}
	c.put(tx, 8, time.Now())
	if got := told(); got != 8 {
		t.Fatalf("put back at version 8, told %d", got)
	}
	c.take("j")
	c.release("j")
	if got := told(); got != 0 {
		t.Fatalf("released by a failed batch, still told version %d", got)
	}
	c.put(tx, 9, time.Now())
	c.take("j")
	c.heardForeign("j")
	if got := told(); got != 0 {
		t.Fatalf("taken, then changed by another process: still told version %d", got)
	}
	c.put(tx, 10, time.Now())
	c.take("j")
	c.listen(false)
	if got := told(); got != 0 {
		t.Fatalf("taken, with the listener down: still told version %d", got)
	}
}

// TestKnownDecidedOnlyWhatCannotBeStale: knownDecided, which answers a vote that waits for
// its checkpoint's decision without a read, answers a copy of a decided checkpoint, never
// a preparing one, and trusts what knownPreparing trusts.
func TestKnownDecidedOnlyWhatCannotBeStale(t *testing.T) {
	c := newStateCache()
	c.listen(true)
	c.put(cachedTx(), 7, time.Now())
	if c.knownDecided("j", 1) != nil {
		t.Fatal("a preparing checkpoint is known decided")
	}
	decided := cachedTx()
	decided.checkpoints[1].Status = coordinator.StatusCommitting
	c.put(decided, 8, time.Now())
	cp := c.knownDecided("j", 1)
	if cp == nil || cp.Status != coordinator.StatusCommitting || c.knownDecided("j", 2) != nil || c.knownDecided("k", 1) != nil {
		t.Fatalf("knownDecided answers %+v, want the cached committing checkpoint only", cp)
	}
	cp.Status = coordinator.StatusAborted
	if again := c.knownDecided("j", 1); again.Status != coordinator.StatusCommitting {
		t.Fatal("knownDecided hands out the cached checkpoint itself, not a copy")
	}
	c.take("j") // a batch holds the job: the state it began from answers
	if c.knownDecided("j", 1) == nil {
		t.Fatal("the state a batch took is not known decided")
	}
	c.heardForeign("j")
	if c.knownDecided("j", 1) != nil {
		t.Fatal("known decided after another process decided on the job")
	}
	c.put(decided, 9, time.Now())
	c.listen(false)
	if c.knownDecided("j", 1) != nil {
		t.Fatal("known decided while the listener is down")
	}
}
