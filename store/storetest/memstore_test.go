package storetest

import (
	"testing"

	"github.com/twophase/coordinator/coordinator"
)

// TestRunOnReferenceStore runs the suite on memStore, a plain in-memory implementation of the
// contract, so that a failure against a real store is the store's and not the suite's.
func TestRunOnReferenceStore(t *testing.T) {
	Run(t, func(t *testing.T) coordinator.Store { return newMemStore() })
}
