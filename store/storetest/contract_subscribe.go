package storetest

import (
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
)

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
		if err := saveStatus(b.ctx, tx, cp); err != nil {
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
