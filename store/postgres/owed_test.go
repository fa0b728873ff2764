package postgres_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twophase/coordinator/coordinator"
)

// An aborted checkpoint is owed a rollback while a participant that voted prepared has not
// acked the abort. The store keeps that on the checkpoint (owes_rollback), from which a
// coordinator that never cached the job finds what is owed: the rollback until the ack
// (by the participant, or settled by an operator), nothing after. The status tells the
// rest: a committing checkpoint owes its commit, an aborted one without prepared votes
// owes nothing.
func TestRollbackOwedFoundByAnotherCoordinator(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	stores, url := openStoresURL(t, 4)
	svc := coordinator.NewService(stores[0], nil)
	epochs := setUpJob(t, svc, time.Minute)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	owes := func(id int64) bool {
		t.Helper()
		var owes bool
		if err := conn.QueryRow(ctx, "SELECT owes_rollback FROM checkpoints WHERE job = 'j' AND id = $1", id).Scan(&owes); err != nil {
			t.Fatal(err)
		}
		return owes
	}
	vote := func(id int64, p string, kind coordinator.VoteKind) {
		t.Helper()
		v := coordinator.Vote{Epoch: epochs[p], Kind: kind, Committables: []byte(`["tx-` + p + `"]`)}
		if kind == coordinator.VoteAbort {
			v.Committables, v.Reason = nil, "disk full"
		}
		if _, err := svc.Vote(ctx, "j", id, p, v); err != nil {
			t.Fatal(err)
		}
	}
	// pending asks a coordinator that has not cached the job what p owes.
	pending := func(s int, p string) []coordinator.PendingItem {
		t.Helper()
		got, err := coordinator.NewService(stores[s], nil).Pending(ctx, "j", p, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		return got.Items
	}

	// Checkpoint 1: pa prepared, pb voted abort.
	first, _, err := svc.Prepare(ctx, "j", coordinator.PrepareRequest{})
	if err != nil {
		t.Fatal(err)
	}
	vote(first.ID, "pa", coordinator.VotePrepared)
	vote(first.ID, "pb", coordinator.VoteAbort)
	if !owes(first.ID) {
		t.Errorf("checkpoint %d aborted with pa's prepared vote unacked: owes_rollback is false", first.ID)
	}
	if items := pending(1, "pa"); len(items) != 1 || items[0].Checkpoint != first.ID || items[0].Action != coordinator.ActionAbort {
		t.Fatalf("pending of pa on another coordinator: %+v; want the abort of %d", items, first.ID)
	}
	if items := pending(1, "pb"); len(items) != 0 {
		t.Fatalf("pending of pb, which voted abort: %+v; want nothing", items)
	}

	// Checkpoint 2: committing, pa has acked, pb owes its commit.
	second, _, err := svc.Prepare(ctx, "j", coordinator.PrepareRequest{})
	if err != nil {
		t.Fatal(err)
	}
	vote(second.ID, "pa", coordinator.VotePrepared)
	vote(second.ID, "pb", coordinator.VotePrepared)
	if _, err := svc.Ack(ctx, "j", second.ID, "pa", epochs["pa"]); err != nil {
		t.Fatal(err)
	}
	if owes(second.ID) {
		t.Errorf("committing checkpoint %d: owes_rollback is true", second.ID)
	}
	if items := pending(2, "pb"); len(items) != 1 || items[0].Checkpoint != second.ID || items[0].Action != coordinator.ActionCommit {
		t.Fatalf("pending of pb on another coordinator: %+v; want the commit of %d", items, second.ID)
	}

	// pa acks the abort: nothing is owed on checkpoint 1 any more.
	if _, err := svc.Ack(ctx, "j", first.ID, "pa", epochs["pa"]); err != nil {
		t.Fatal(err)
	}
	if owes(first.ID) {
		t.Errorf("checkpoint %d: owes_rollback still true after pa acked the abort", first.ID)
	}
	if items := pending(3, "pa"); len(items) != 0 {
		t.Errorf("pending of pa after its ack, on another coordinator: %+v; want nothing", items)
	}

	// Checkpoint 3, aborted by an operator after pa prepared; the operator then settles
	// pa's ack, as for a participant gone for good.
	if _, err := svc.Ack(ctx, "j", second.ID, "pb", epochs["pb"]); err != nil {
		t.Fatal(err)
	}
	third, _, err := svc.Prepare(ctx, "j", coordinator.PrepareRequest{})
	if err != nil {
		t.Fatal(err)
	}
	vote(third.ID, "pa", coordinator.VotePrepared)
	if _, err := svc.Abort(ctx, "j", third.ID, "operator"); err != nil {
		t.Fatal(err)
	}
	if !owes(third.ID) {
		t.Fatalf("checkpoint %d aborted by an operator with pa's prepared vote unacked: owes_rollback is false", third.ID)
	}
	if _, err := svc.Complete(ctx, "j", third.ID, "pa is gone"); err != nil {
		t.Fatal(err)
	}
	if owes(third.ID) {
		t.Errorf("checkpoint %d: owes_rollback still true after the operator settled pa's ack", third.ID)
	}

	// Checkpoint 4, aborted before any vote: nothing to roll back.
	fourth, _, err := svc.Prepare(ctx, "j", coordinator.PrepareRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Abort(ctx, "j", fourth.ID, "operator"); err != nil {
		t.Fatal(err)
	}
	if owes(fourth.ID) {
		t.Errorf("checkpoint %d aborted with no prepared vote: owes_rollback is true", fourth.ID)
	}
	for _, p := range []string{"pa", "pb"} {
		if items := pending(3, p); len(items) != 0 {
			t.Errorf("pending of %s at the end: %+v; want nothing", p, items)
		}
	}
}
