package postgres_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/postgres"
)

// TestOwingReadsDoNotWalkHistory: what a participant owes is found among the job's open
// work, however much settled history the job has. Behind a job of two participants are
// 50,000 committed checkpoints; with a checkpoint committing (pb owes its ack) and the
// next one preparing, each read of what is owed must touch a few dozen pages, not the
// job's history (a read that checks every checkpoint of the job touches over a thousand),
// and still find both.
func TestOwingReadsDoNotWalkHistory(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	stores, url := openStoresURL(t, 2)
	epochs := setUpJob(t, coordinator.NewService(stores[0], nil), time.Minute)

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	const history = 50000
	for _, stmt := range []string{
		`INSERT INTO checkpoints (job, id, status, auto_commit, created_at, deadline, decided_at, completed_at)
		 SELECT 'j', g, 'committed', true, now() - interval '1 hour', now(), now() - interval '1 hour', now() - interval '1 hour'
		 FROM generate_series(1, 50000) AS g`,
		`INSERT INTO checkpoint_participants (job, checkpoint_id, position, participant, epoch, vote, committables, voted_at, acked_at)
		 SELECT 'j', g, p.ord::integer, p.name, 1, 'prepared', '[]', now() - interval '1 hour', now() - interval '1 hour'
		 FROM generate_series(1, 50000) AS g CROSS JOIN unnest(ARRAY['pa', 'pb']) WITH ORDINALITY AS p(name, ord)`,
		`UPDATE jobs SET seq = 50000, version = version + 1 WHERE name = 'j'`,
		`ANALYZE checkpoints`,
		`ANALYZE checkpoint_participants`,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	// A coordinator that has not cached the job since the history was written under it.
	fresh := coordinator.NewService(stores[1], nil)
	vote := func(id int64, p string) {
		t.Helper()
		if _, err := fresh.Vote(ctx, "j", id, p, coordinator.Vote{Epoch: epochs[p], Kind: coordinator.VotePrepared, Committables: []byte(`[]`)}); err != nil {
			t.Fatal(err)
		}
	}
	cp, _, err := fresh.Prepare(ctx, "j", coordinator.PrepareRequest{})
	if err != nil || cp.ID != history+1 {
		t.Fatalf("prepare after the history: %v, %v; want checkpoint %d", cp, err, history+1)
	}
	vote(cp.ID, "pa")
	vote(cp.ID, "pb")
	if _, err := fresh.Ack(ctx, "j", cp.ID, "pa", epochs["pa"]); err != nil {
		t.Fatal(err)
	}
	// The job allows one checkpoint preparing at a time: the committing one is decided.
	next, _, err := fresh.Prepare(ctx, "j", coordinator.PrepareRequest{})
	if err != nil {
		t.Fatal(err)
	}

	p, err := fresh.Pending(ctx, "j", "pb", 0, 0)
	if err != nil || len(p.Items) != 2 || p.Items[0].Checkpoint != cp.ID || p.Items[1].Checkpoint != next.ID {
		t.Fatalf("pending of pb: %+v, %v; want the ack of %d and the vote on %d", p, err, cp.ID, next.ID)
	}

	for name, stmt := range postgres.OwingStatements("j") {
		var out []byte
		if err := conn.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+stmt[0].(string), stmt[1:]...).Scan(&out); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var plans []struct {
			Plan struct {
				ActualRows int64 `json:"Actual Rows"`
				Hit        int64 `json:"Shared Hit Blocks"`
				Read       int64 `json:"Shared Read Blocks"`
			}
		}
		if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
			t.Fatalf("%s: the plan %s: %v", name, out, err)
		}
		pl := plans[0].Plan
		t.Logf("%s: %d pages, %d rows", name, pl.Hit+pl.Read, pl.ActualRows)
		if pages := pl.Hit + pl.Read; pages > 200 {
			t.Errorf("%s touched %d pages for %d rows behind %d checkpoints of history; want a few dozen", name, pages, pl.ActualRows, history)
		}
		if pl.ActualRows != 4 { // two checkpoints, two participants each
			t.Errorf("%s returned %d rows; want 4", name, pl.ActualRows)
		}
	}
}
