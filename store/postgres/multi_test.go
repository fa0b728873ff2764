package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/pgtest"
	"github.com/twophase/coordinator/store/postgres"
)

// openStores opens n stores (n coordinators) on one fresh database.
func openStores(t *testing.T, n int) []*postgres.Store {
	t.Helper()
	stores, _ := openStoresURL(t, n)
	return stores
}

// openStoresURL is openStores, and returns the database's URL.
func openStoresURL(t *testing.T, n int) ([]*postgres.Store, string) {
	t.Helper()
	url := pgtest.URL(t)
	stores := make([]*postgres.Store, n)
	for i := range stores {
		st, err := postgres.Open(t.Context(), url, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		stores[i] = st
	}
	return stores, url
}

// setUpJob creates job j with participants pa and pb on s and registers them.
func setUpJob(t *testing.T, s *coordinator.Service, timeout time.Duration) map[string]int64 {
	t.Helper()
	cfg := coordinator.JobConfig{Participants: []string{"pa", "pb"}, CheckpointTimeout: timeout, MaxConcurrentCheckpoints: 1, AutoCommit: true}
	if _, _, err := s.PutJob(t.Context(), "j", cfg); err != nil {
		t.Fatal(err)
	}
	epochs := map[string]int64{}
	for _, p := range cfg.Participants {
		pending, err := s.Register(t.Context(), "j", p)
		if err != nil {
			t.Fatal(err)
		}
		epochs[p] = pending.Epoch
	}
	return epochs
}

// TestTwoCoordinatorsOneTruth runs two stores (two coordinators) on one database: a
// long-poll on one is woken by a decision taken on the other (rule 8), with every vote kept.
func TestTwoCoordinatorsOneTruth(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	stores := openStores(t, 2)
	a, b := coordinator.NewService(stores[0], nil), coordinator.NewService(stores[1], nil)
	participants := make([]string, 8)
	for i := range participants {
		participants[i] = fmt.Sprintf("p%d", i)
	}
	cfg := coordinator.JobConfig{Participants: participants, CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 1, AutoCommit: true}
	if _, _, err := a.PutJob(ctx, "j", cfg); err != nil {
		t.Fatal(err)
	}
	for _, p := range participants {
		if _, err := b.Register(ctx, "j", p); err != nil {
			t.Fatal(err)
		}
	}
	cp, _, err := a.Prepare(ctx, "j", coordinator.PrepareRequest{})
	if err != nil {
		t.Fatal(err)
	}

	waited := make(chan *coordinator.Checkpoint, 1)
	start := time.Now()
	go func() {
		got, err := a.GetCheckpoint(ctx, "j", cp.ID, 30*time.Second)
		if err != nil {
			t.Error(err)
		}
		waited <- got
	}()
	time.Sleep(100 * time.Millisecond) // let the waiter subscribe and find it preparing

	var wg sync.WaitGroup
	// Every vote goes to b: the waiter on a can only learn of the decision from the database.
	for _, p := range participants {
		wg.Go(func() {
			_, err := b.Vote(ctx, "j", cp.ID, p, coordinator.Vote{Epoch: 1, Kind: coordinator.VotePrepared, Committables: []byte(fmt.Sprintf(`["%s"]`, p))})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	select {
	case got := <-waited:
		if got.Status != coordinator.StatusCommitting {
			t.Fatalf("waiter on coordinator a saw %s after %v, want committing", got.Status, time.Since(start))
		}
		for _, p := range got.Participants {
			if p.Vote != coordinator.VotePrepared || string(p.Committables) != fmt.Sprintf(`["%s"]`, p.Name) {
				t.Errorf("participant %s: vote %q committables %s", p.Name, p.Vote, p.Committables)
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter on coordinator a was not woken by the decision taken on b")
	}
}

// TestLongPollOutlastsSpuriousWakeUps cuts the store's LISTEN connection while a long-poll
// waits: the store wakes every waiter when it reconnects (it may have missed a decision),
// and the waiter must go on waiting for the real decision rather than answer "preparing".
func TestLongPollOutlastsSpuriousWakeUps(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.URL(t)
	st, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	svc := coordinator.NewService(st, nil)
	cfg := coordinator.JobConfig{Participants: []string{"a"}, CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 1, AutoCommit: true}
	if _, _, err := svc.PutJob(ctx, "j", cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Register(ctx, "j", "a"); err != nil {
		t.Fatal(err)
	}
	cp, _, err := svc.Prepare(ctx, "j", coordinator.PrepareRequest{})
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan *coordinator.Checkpoint, 1)
	go func() {
		got, err := svc.GetCheckpoint(ctx, "j", cp.ID, 20*time.Second)
		if err != nil {
			t.Error(err)
		}
		waited <- got
	}()
	time.Sleep(200 * time.Millisecond)
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	var cut int
	if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()`).Scan(&cut); err != nil || cut != 1 {
		t.Fatalf("terminated %d LISTEN connections (%v), want 1", cut, err)
	}
	time.Sleep(700 * time.Millisecond) // the listener reconnects and wakes every waiter
	select {
	case got := <-waited:
		t.Fatalf("the long-poll answered %s after a spurious wake-up, before any decision", got.Status)
	default:
	}
	if _, err := svc.Vote(ctx, "j", cp.ID, "a", coordinator.Vote{Epoch: 1, Kind: coordinator.VotePrepared}); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-waited:
		if got.Status != coordinator.StatusCommitting {
			t.Fatalf("the long-poll answered %s, want committing", got.Status)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the long-poll was not woken by the decision")
	}
}

// TestUpdateWaitsForAnotherCoordinatorsChanges: an update that had to wait for the job's
// lock, held by another coordinator's transaction that changed the job, decides on those
// changes, not on what it read before the lock was granted. Here the other coordinator
// records a's vote while b's vote waits: b's vote must see a's and decide commit.
func TestUpdateWaitsForAnotherCoordinatorsChanges(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	stores := openStores(t, 2)
	a, b := coordinator.NewService(stores[0], nil), coordinator.NewService(stores[1], nil)
	epochs := setUpJob(t, a, time.Minute)
	for round := int64(1); round <= 3; round++ {
		if _, _, err := a.Prepare(ctx, "j", coordinator.PrepareRequest{}); err != nil {
			t.Fatal(err)
		}
		holding, release := make(chan struct{}), make(chan struct{})
		held := make(chan error, 1)
		go func() {
			held <- stores[0].Update(ctx, "j", round, func(tx coordinator.JobTx) error {
				cp, err := tx.Checkpoint(ctx, round)
				if err != nil {
					return err
				}
				p := cp.Participant("pa")
				now := tx.Now()
				p.Epoch, p.Vote, p.VotedAt, p.Committables = epochs["pa"], coordinator.VotePrepared, &now, []byte(`["a"]`)
				if err := tx.Apply(ctx, &coordinator.Mutation{Votes: []coordinator.ParticipantChange{{Checkpoint: cp.ID, Participant: *p}}}); err != nil {
					return err
				}
				close(holding)
				<-release
				return nil
			})
		}()
		<-holding
		voted := make(chan *coordinator.Checkpoint, 1)
		go func() {
			cp, err := b.Vote(ctx, "j", round, "pb", coordinator.Vote{Epoch: epochs["pb"], Kind: coordinator.VotePrepared, Committables: []byte(`["b"]`)})
			if err != nil {
				t.Error(err)
			}
			voted <- cp
		}()
		time.Sleep(150 * time.Millisecond) // b's vote is waiting for the lock by now
		close(release)
		if err := <-held; err != nil {
			t.Fatal(err)
		}
		cp := <-voted
		if cp == nil || cp.Status != coordinator.StatusCommitting {
			t.Fatalf("round %d: b's vote, which waited for the lock while a's vote was recorded, answered %+v; want committing", round, cp)
		}
		if got := cp.Participant("pa"); got.Vote != coordinator.VotePrepared || string(got.Committables) != `["a"]` {
			t.Fatalf("round %d: b's answer shows a's vote as %q %s", round, got.Vote, got.Committables)
		}
		for _, p := range []string{"pa", "pb"} {
			if _, err := a.Ack(ctx, "j", round, p, epochs[p]); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestRetentionByTwoCoordinators: two coordinators deleting one job's history at once take
// turns (one at a time) and delete every expired checkpoint exactly once, while the job goes
// on with rounds.
func TestRetentionByTwoCoordinators(t *testing.T) {
	t.Parallel()
	stores, url := openStoresURL(t, 2)
	svc := coordinator.NewService(stores[0], nil)
	cfg := coordinator.JobConfig{Participants: []string{"pa"}, CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 1,
		AutoCommit: true, Retention: coordinator.MinRetention}
	if _, _, err := svc.PutJob(t.Context(), "j", cfg); err != nil {
		t.Fatal(err)
	}
	// 2,000 settled checkpoints that completed a minute ago, by SQL.
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	const old = 2000
	if _, err := conn.Exec(t.Context(), `
		WITH c AS (INSERT INTO checkpoints (job, id, status, auto_commit, created_at, deadline, decided_at, completed_at)
			SELECT 'j', g, 'committed', true, now() - interval '1 minute', now(), now() - interval '1 minute', now() - interval '1 minute'
			FROM generate_series(1, $1) g RETURNING id)
		INSERT INTO checkpoint_participants (job, checkpoint_id, position, participant, epoch, vote, committables, voted_at, acked_at)
			SELECT 'j', id, 1, 'pa', 1, 'prepared', '[]', now(), now() - interval '1 minute' FROM c`, old); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), "UPDATE jobs SET seq = $1, version = version + 1 WHERE name = 'j'", old); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Register(t.Context(), "j", "pa"); err != nil {
		t.Fatal(err)
	}
	// Until every expired one is deleted (the last of them, 2000, is the last committed
	// checkpoint until the rounds below commit one more), or 20 s.
	var deleted, skipped [2]atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	deadline := time.Now().Add(20 * time.Second)
	for i, st := range stores {
		wg.Go(func() {
			for deleted[0].Load()+deleted[1].Load() < old && time.Now().Before(deadline) {
				n, _, skip, err := st.DeleteExpired(t.Context(), []string{"j"}, 100)
				if err != nil {
					t.Errorf("store %d: %v", i, err)
					return
				}
				deleted[i].Add(int64(n))
				if skip {
					skipped[i].Add(1)
				}
				if n == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	// Rounds go on meanwhile.
	wg.Go(func() {
		for id := int64(old + 1); ; id++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, _, err := svc.Prepare(t.Context(), "j", coordinator.PrepareRequest{}); err != nil {
				t.Errorf("prepare: %v", err)
				return
			}
			if _, err := svc.Vote(t.Context(), "j", id, "pa", coordinator.Vote{Epoch: 1, Kind: coordinator.VotePrepared}); err != nil {
				t.Errorf("vote: %v", err)
				return
			}
		}
	})
	for deleted[0].Load()+deleted[1].Load() < old && !t.Failed() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if got := deleted[0].Load() + deleted[1].Load(); got != old {
		t.Fatalf("deleted %d + %d = %d, want the %d expired checkpoints exactly once", deleted[0].Load(), deleted[1].Load(), got, old)
	}
	var left int
	if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM checkpoints WHERE job = 'j' AND id <= $1", old).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d expired checkpoints left, %v", left, err)
	}
	t.Logf("deleted %d and %d, skipped %d and %d times", deleted[0].Load(), deleted[1].Load(), skipped[0].Load(), skipped[1].Load())
}
