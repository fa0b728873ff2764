package postgres_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twophase/coordinator/coordinator"
)

// Deleting a job deletes the rows of its checkpoints' participants and Idempotency-Keys
// with its checkpoints (no foreign key cascades them), and nothing of another job.
func TestDeleteJobLeavesNoParticipantsOrKeys(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	stores, url := openStoresURL(t, 1)
	svc := coordinator.NewService(stores[0], nil)
	cfg := coordinator.JobConfig{Participants: []string{"a", "b"}, CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 1, AutoCommit: true}
	for _, job := range []string{"gone", "kept"} {
		if _, _, err := svc.PutJob(ctx, job, cfg); err != nil {
			t.Fatal(err)
		}
		for _, p := range cfg.Participants {
			if _, err := svc.Register(ctx, job, p); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 3 {
			if err := round(ctx, svc, job, coordinator.PrepareRequest{IdempotencyKey: "k" + strconv.Itoa(i), Fingerprint: "f"}); err != nil {
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
