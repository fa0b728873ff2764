package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/pgtest"
	"github.com/twophase/coordinator/store/postgres"
)

func TestSmokeRound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := postgres.Open(ctx, pgtest.URL(t), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	svc := coordinator.NewService(st, nil)
	if _, created, err := svc.PutJob(ctx, "orders", coordinator.JobConfig{Participants: []string{"a", "b"}, CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 1, AutoCommit: true}); err != nil || !created {
		t.Fatal(created, err)
	}
	ra, err := svc.Register(ctx, "orders", "a")
	if err != nil {
		t.Fatal(err)
	}
	rb, _ := svc.Register(ctx, "orders", "b")
	cp, _, err := svc.Prepare(ctx, "orders", coordinator.PrepareRequest{})
	if err != nil || cp.ID != 1 {
		t.Fatal(cp, err)
	}
	if _, err := svc.Vote(ctx, "orders", 1, "a", coordinator.Vote{Epoch: ra.Epoch, Kind: coordinator.VotePrepared, Committables: []byte(`[{"b":1, "a":2}]`)}); err != nil {
		t.Fatal(err)
	}
	cp, err = svc.Vote(ctx, "orders", 1, "b", coordinator.Vote{Epoch: rb.Epoch, Kind: coordinator.VotePrepared})
	if err != nil || cp.Status != coordinator.StatusCommitting {
		t.Fatal(cp, err)
	}
	got, err := svc.GetCheckpoint(ctx, "orders", 1, 0)
	if err != nil || string(got.Participants[0].Committables) != `[{"b":1,"a":2}]` {
		t.Fatalf("%+v %v", got, err)
	}
	svc.Ack(ctx, "orders", 1, "a", ra.Epoch)
	cp, err = svc.Ack(ctx, "orders", 1, "b", rb.Epoch)
	if err != nil || cp.Status != coordinator.StatusCommitted {
		t.Fatal(cp, err)
	}
}
