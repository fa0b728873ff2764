package postgres_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/pgtest"
	"github.com/twophase/coordinator/store/postgres"
)

// Deleting a job deletes the rows of its checkpoints' participants and Idempotency-Keys
// with its checkpoints (no foreign key cascades them), and nothing of another job.
func TestDeleteJobLeavesNoParticipantsOrKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	st, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	svc := coordinator.NewService(st, nil)
	cfg := coordinator.JobConfig{Participants: []string{"a", "b"}, CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 1, AutoCommit: true}
	for _, job := range []string{"gone", "kept"} {
		if _, _, err := svc.PutJob(ctx, job, cfg); err != nil {
			t.Fatal(err)
		}
		ra, _ := svc.Register(ctx, job, "a")
		rb, _ := svc.Register(ctx, job, "b")
		for i := range 3 {
			cp, _, err := svc.Prepare(ctx, job, coordinator.PrepareRequest{IdempotencyKey: "k" + strconv.Itoa(i), Fingerprint: "f"})
			if err != nil {
				t.Fatal(err)
			}
			svc.Vote(ctx, job, cp.ID, "a", coordinator.Vote{Epoch: ra.Epoch, Kind: coordinator.VotePrepared})
			if _, err := svc.Vote(ctx, job, cp.ID, "b", coordinator.Vote{Epoch: rb.Epoch, Kind: coordinator.VotePrepared}); err != nil {
				t.Fatal(err)
			}
			svc.Ack(ctx, job, cp.ID, "a", ra.Epoch)
			if _, err := svc.Ack(ctx, job, cp.ID, "b", rb.Epoch); err != nil {
				t.Fatal(err)
			}
		}
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows := func(job string) (cps, parts, keys int) {
		t.Helper()
		if err := conn.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM checkpoints WHERE job = $1),
			(SELECT count(*) FROM checkpoint_participants WHERE job = $1),
			(SELECT count(*) FROM idempotency_keys WHERE job = $1)`, job).Scan(&cps, &parts, &keys); err != nil {
			t.Fatal(err)
		}
		return cps, parts, keys
	}
	if c, p, k := rows("gone"); c != 3 || p != 6 || k != 3 {
		t.Fatalf("before the deletion: %d checkpoints, %d participant rows, %d keys; want 3, 6, 3", c, p, k)
	}
	if err := svc.DeleteJob(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if c, p, k := rows("gone"); c != 0 || p != 0 || k != 0 {
		t.Errorf("after the deletion: %d checkpoints, %d participant rows, %d keys of the deleted job are left", c, p, k)
	}
	if c, p, k := rows("kept"); c != 3 || p != 6 || k != 3 {
		t.Errorf("the other job has %d checkpoints, %d participant rows, %d keys; want 3, 6, 3", c, p, k)
	}
}
