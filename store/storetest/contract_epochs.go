package storetest

import (
	"maps"
	"testing"

	"github.com/twophase/coordinator/coordinator"
)

func testSetEpoch(t *testing.T, b *bundle) {
	b.putJob("j", config("p1", "p2"))
	b.update("j", func(tx coordinator.JobTx) error {
		for _, e := range []struct {
			p string
			n int64
		}{{"p1", 1}, {"p2", 7}, {"p1", 2}, {"gone", 3}} {
			if err := setEpoch(b.ctx, tx, e.p, e.n); err != nil {
				return err
			}
		}
		return nil
	})
	want := map[string]int64{"p1": 2, "p2": 7, "gone": 3}
	b.view("j", func(tx coordinator.JobTx) error {
		if got := tx.Job().Epochs; !maps.Equal(got, want) {
			t.Errorf("Job().Epochs in a new transaction: %v, want %v", got, want)
		}
		if e := tx.Job().Epoch("never"); e != 0 {
			t.Errorf("Epoch of a participant that never registered: %d, want 0", e)
		}
		return nil
	})
	b.putJob("j", config("p1"))
	if got := b.getJob("j").Epochs; !maps.Equal(got, want) {
		t.Fatalf("GetJob Epochs after p2 left the configuration: %v, want %v (every participant that ever registered)", got, want)
	}
	b.update("j", func(tx coordinator.JobTx) error { return setEpoch(b.ctx, tx, "p1", 3) })
	if e := b.getJob("j").Epochs["p1"]; e != 3 {
		t.Fatalf("epoch of p1 after SetEpoch 3: %d", e)
	}
}
