package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/sqlite"
	"github.com/twophase/coordinator/store/storetest"
)

// TestConformance runs the stores' conformance suite on the embedded store, each test on
// a fresh, migrated data directory of its own.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) coordinator.Store {
		st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "data"), sqlite.Options{Migrate: true})
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
}
