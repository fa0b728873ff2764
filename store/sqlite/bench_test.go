package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/sqlite"
)

// round runs one full round of job through svc: prepare, two prepared votes (the second
// decides commit), two acks. Each step is one durable transaction (an fsync).
func round(ctx context.Context, svc *coordinator.Service, job string, epoch int64) error {
	cp, _, err := svc.Prepare(ctx, job, coordinator.PrepareRequest{})
	if err != nil {
		return err
	}
	for _, p := range []string{"a", "b"} {
		v := coordinator.Vote{Epoch: epoch, Kind: coordinator.VotePrepared, Committables: []byte(`[{"txn":"` + p + `"}]`)}
		if cp, err = svc.Vote(ctx, job, cp.ID, p, v); err != nil {
			return err
		}
	}
	if cp.Status != coordinator.StatusCommitting {
		return fmt.Errorf("checkpoint %d is %s after both votes", cp.ID, cp.Status)
	}
	for _, p := range []string{"a", "b"} {
		if cp, err = svc.Ack(ctx, job, cp.ID, p, epoch); err != nil {
			return err
		}
	}
	if cp.Status != coordinator.StatusCommitted {
		return fmt.Errorf("checkpoint %d is %s after both acks", cp.ID, cp.Status)
	}
	return nil
}

func benchSetup(b *testing.B, jobs int) *coordinator.Service {
	b.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "data"), sqlite.Options{Migrate: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(st.Close)
	svc := coordinator.NewService(st, nil)
	for i := range jobs {
		job := fmt.Sprintf("job-%d", i)
		cfg := coordinator.JobConfig{Participants: []string{"a", "b"}, CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 1, AutoCommit: true}
		if _, _, err := svc.PutJob(ctx, job, cfg); err != nil {
			b.Fatal(err)
		}
		for _, p := range cfg.Participants {
			if _, err := svc.Register(ctx, job, p); err != nil {
				b.Fatal(err)
			}
		}
	}
	return svc
}

// BenchmarkRound measures full two-participant rounds through coordinator.Service on the
// embedded store, one after another: 5 durable transactions per round.
func BenchmarkRound(b *testing.B) {
	ctx := context.Background()
	svc := benchSetup(b, 1)
	b.ResetTimer()
	for b.Loop() {
		if err := round(ctx, svc, "job-0", 1); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rounds/s")
}

// BenchmarkRoundParallel runs rounds of several jobs at once (4×GOMAXPROCS goroutines,
// each on its own job). The store serialises every write on one connection, so this shows
// what concurrent clients cost or gain on top of one writer.
func BenchmarkRoundParallel(b *testing.B) {
	const jobs = 64
	ctx := context.Background()
	svc := benchSetup(b, jobs)
	var next atomic.Int64
	b.ResetTimer()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		job := fmt.Sprintf("job-%d", next.Add(1)-1)
		for pb.Next() {
			if err := round(ctx, svc, job, 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rounds/s")
}
