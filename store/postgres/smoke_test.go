package postgres_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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

// Large committables are stored compressed with lz4 where the server has it (the PostgreSQL
// the tests run on does), and read back byte for byte.
func TestLargeCommittablesCompressWithLZ4(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	st, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	svc := coordinator.NewService(st, nil)
	if _, _, err := svc.PutJob(ctx, "files", coordinator.JobConfig{Participants: []string{"a"}, CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 1, AutoCommit: true}); err != nil {
		t.Fatal(err)
	}
	reg, err := svc.Register(ctx, "files", "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.Prepare(ctx, "files", coordinator.PrepareRequest{}); err != nil {
		t.Fatal(err)
	}
	committables := []byte(`["` + strings.Repeat("part-00042.parquet ", 1000) + `"]`)
	if _, err := svc.Vote(ctx, "files", 1, "a", coordinator.Vote{Epoch: reg.Epoch, Kind: coordinator.VotePrepared, Committables: committables}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var method *string
	if err := conn.QueryRow(ctx, "SELECT pg_column_compression(committables) FROM checkpoint_participants WHERE job = 'files'").Scan(&method); err != nil {
		t.Fatal(err)
	}
	if method == nil || *method != "lz4" {
		t.Errorf("committables of %d bytes stored with compression %v, want lz4", len(committables), method)
	}
	got, err := svc.GetCheckpoint(ctx, "files", 1, 0)
	if err != nil || !bytes.Equal(got.Participants[0].Committables, committables) {
		t.Fatalf("read back %d bytes, %v; want the %d sent", len(got.Participants[0].Committables), err, len(committables))
	}
}
