package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/pgtest"
	"github.com/twophase/coordinator/store/postgres"
	"github.com/twophase/coordinator/store/storetest"
)

// TestConformance runs the stores' conformance suite on PostgreSQL, each test on a fresh
// database cloned from the migrated template.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) coordinator.Store {
		st, err := postgres.Open(context.Background(), pgtest.URL(t), postgres.Options{})
		if err != nil {
			t.Fatalf("open the Postgres store: %v", err)
		}
		if !postgres.WaitListening(st, 10*time.Second) {
			t.Fatal("the store's decision listener did not listen within 10 s")
		}
		return st
	})
}
