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

// round runs one full round on job: prepare, two prepared votes, two acks.
func round(ctx context.Context, svc *coordinator.Service, job string) error {
	cp, _, err := svc.Prepare(ctx, job, coordinator.PrepareRequest{})
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
						if err := round(ctx, svc, job); err != nil {
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
