package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/pgtest"
	"github.com/twophase/coordinator/store/postgres"
)

// benchService opens a service on a fresh database with jobs jobs of two participants,
// both registered.
func benchService(b *testing.B, jobs int) (*coordinator.Service, []string) {
	b.Helper()
	ctx := context.Background()
	st, err := postgres.Open(ctx, pgtest.URL(b), postgres.Options{MaxConns: 32})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(st.Close)
	svc := coordinator.NewService(st, nil)
	names := make([]string, jobs)
	for i := range names {
		names[i] = fmt.Sprintf("job-%d", i)
		cfg := coordinator.JobConfig{Participants: []string{"a", "b"}, CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 1, AutoCommit: true}
		if _, _, err := svc.PutJob(ctx, names[i], cfg); err != nil {
			b.Fatal(err)
		}
		for _, p := range []string{"a", "b"} {
			if _, err := svc.Register(ctx, names[i], p); err != nil {
				b.Fatal(err)
			}
		}
	}
	return svc, names
}

// round runs one full round on job, whose participants a and b registered once (epoch 1):
// prepare (with req), two prepared votes, two acks.
func round(ctx context.Context, svc *coordinator.Service, job string, req coordinator.PrepareRequest) error {
	cp, _, err := svc.Prepare(ctx, job, req)
	if err != nil {
		return err
	}
	for _, p := range []string{"a", "b"} {
		if cp, err = svc.Vote(ctx, job, cp.ID, p, coordinator.Vote{Epoch: 1, Kind: coordinator.VotePrepared, Committables: []byte(`[{"txn":"t"}]`)}); err != nil {
			return err
		}
	}
	if cp.Status != coordinator.StatusCommitting {
		return fmt.Errorf("checkpoint %d is %s after every prepared vote", cp.ID, cp.Status)
	}
	for _, p := range []string{"a", "b"} {
		if cp, err = svc.Ack(ctx, job, cp.ID, p, 1); err != nil {
			return err
		}
	}
	if cp.Status != coordinator.StatusCommitted {
		return fmt.Errorf("checkpoint %d is %s after every ack", cp.ID, cp.Status)
	}
	return nil
}

// BenchmarkRound measures full two-participant rounds through the service on Postgres,
// one job at a time (Serial) and on 16 jobs at once (Jobs16).
func BenchmarkRound(b *testing.B) {
	for _, jobs := range []int{1, 16} {
		b.Run(fmt.Sprintf("jobs=%d", jobs), func(b *testing.B) {
			svc, names := benchService(b, jobs)
			ctx := context.Background()
			// One goroutine per job, sharing b.N rounds.
			var done atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			b.ResetTimer()
			for _, job := range names {
				wg.Go(func() {
					for done.Add(1) <= int64(b.N) {
						if err := round(ctx, svc, job, coordinator.PrepareRequest{}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "rounds/s")
		})
	}
}

// The hot paths one at a time, on one job of two registered participants. Each iteration
// prepares its own checkpoint with the timer stopped; `go test -bench 'Path' -count 6` output
// feeds benchstat.
func BenchmarkPath(b *testing.B) {
	ctx := context.Background()
	prepared := coordinator.Vote{Epoch: 1, Kind: coordinator.VotePrepared, Committables: []byte(`[{"txn":"t"}]`)}
	// open prepares a checkpoint and brings it to the given stage: 0 none, 1 a voted,
	// 2 both voted (committing), 3 a acked.
	open := func(b *testing.B, svc *coordinator.Service, stage int) int64 {
		if stage < 0 {
			return 0
		}
		cp, _, err := svc.Prepare(ctx, "job-0", coordinator.PrepareRequest{})
		if err != nil {
			b.Fatal(err)
		}
		for i, p := range []string{"a", "b"} {
			if stage > i {
				if _, err := svc.Vote(ctx, "job-0", cp.ID, p, prepared); err != nil {
					b.Fatal(err)
				}
			}
		}
		if stage > 2 {
			if _, err := svc.Ack(ctx, "job-0", cp.ID, "a", 1); err != nil {
				b.Fatal(err)
			}
		}
		return cp.ID
	}
	// finish completes or aborts whatever the iteration left open, timer stopped.
	finish := func(b *testing.B, svc *coordinator.Service, id int64) {
		cp, err := svc.GetCheckpoint(ctx, "job-0", id, 0)
		if err != nil {
			b.Fatal(err)
		}
		switch cp.Status {
		case coordinator.StatusPreparing:
			_, err = svc.Abort(ctx, "job-0", id, "benchmark")
		case coordinator.StatusCommitting:
			for _, p := range []string{"a", "b"} {
				if _, err = svc.Ack(ctx, "job-0", id, p, 1); err != nil {
					break
				}
			}
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	run := func(name string, stage int, timed func(b *testing.B, svc *coordinator.Service, id int64) int64) {
		b.Run(name, func(b *testing.B) {
			svc, _ := benchService(b, 1)
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				id := open(b, svc, stage)
				b.StartTimer()
				id = timed(b, svc, id)
				b.StopTimer()
				finish(b, svc, id)
				b.StartTimer()
			}
		})
	}
	run("prepare", -1, func(b *testing.B, svc *coordinator.Service, _ int64) int64 {
		cp, _, err := svc.Prepare(ctx, "job-0", coordinator.PrepareRequest{})
		if err != nil {
			b.Fatal(err)
		}
		return cp.ID
	})
	run("vote", 0, func(b *testing.B, svc *coordinator.Service, id int64) int64 {
		if _, err := svc.Vote(ctx, "job-0", id, "a", prepared); err != nil {
			b.Fatal(err)
		}
		return id
	})
	run("decision", 1, func(b *testing.B, svc *coordinator.Service, id int64) int64 {
		cp, err := svc.Vote(ctx, "job-0", id, "b", prepared)
		if err != nil || cp.Status != coordinator.StatusCommitting {
			b.Fatal(cp, err)
		}
		return id
	})
	run("ack", 2, func(b *testing.B, svc *coordinator.Service, id int64) int64 {
		if _, err := svc.Ack(ctx, "job-0", id, "a", 1); err != nil {
			b.Fatal(err)
		}
		return id
	})
	// What a participant owes, read: a committing checkpoint (each participant a row).
	run("pending", 2, func(b *testing.B, svc *coordinator.Service, id int64) int64 {
		p, err := svc.Pending(ctx, "job-0", "a", 0, 0)
		if err != nil || len(p.Items) != 1 {
			b.Fatal(p, err)
		}
		return id
	})
	// The time from the deciding vote's request to a waiting long-poll's answer.
	run("long-poll-wake-up", 1, func(b *testing.B, svc *coordinator.Service, id int64) int64 {
		b.StopTimer()
		woken := make(chan time.Time, 1)
		go func() {
			cp, err := svc.GetCheckpoint(ctx, "job-0", id, 10*time.Second)
			if err != nil || cp.Status != coordinator.StatusCommitting {
				b.Error(cp, err)
			}
			woken <- time.Now()
		}()
		time.Sleep(2 * time.Millisecond) // let the waiter subscribe
		b.StartTimer()
		if _, err := svc.Vote(ctx, "job-0", id, "b", prepared); err != nil {
			b.Fatal(err)
		}
		<-woken
		return id
	})
}
