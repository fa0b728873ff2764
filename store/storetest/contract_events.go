package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
)

// testEventsInOrder: every status change is recorded in the transaction that made it and
// read back in order, after any position, of one job or of all, never twice; a position
// before what pruning deleted is reset.
func testEventsInOrder(t *testing.T, b *bundle) {
	es, ok := b.store.(coordinator.EventStore)
	if !ok {
		t.Fatal("the store records no events (coordinator.EventStore)")
	}
	head, err := es.EventHead(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.putJob("j", config("p1", "p2"))
	b.putJob("k", config("p1"))
	b.insert("j", nil)                                 // j/1 preparing
	b.insert("k", nil)                                 // k/1 preparing
	b.decide("j", 1, coordinator.StatusCommitting, "") // j/1 committing
	b.insert("j", nil)                                 // j/2 preparing
	b.decide("j", 2, coordinator.StatusAborted, "x")   // j/2 aborted
	b.decide("j", 1, coordinator.StatusCommitted, "")  // j/1 committed
	b.saveAck("k", 1, "p1")                            // no status change: no event

	all := []string{"j/1 preparing", "k/1 preparing", "j/1 committing", "j/2 preparing", "j/2 aborted", "j/1 committed"}
	read := func(job string, after coordinator.EventPosition, limit int) ([]coordinator.StatusEvent, coordinator.EventPage) {
		t.Helper()
		// A store may hold changes back while a transaction that could precede them runs
		// (another test's, on the same server): ask again.
		for deadline := time.Now().Add(10 * time.Second); ; {
			page, err := es.Events(b.ctx, job, after, limit)
			if err != nil {
				t.Fatal(err)
			}
			if !page.Held || len(page.Events) == limit || time.Now().After(deadline) {
				return page.Events, page
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	names := func(events []coordinator.StatusEvent) []string {
		var out []string
		for i, e := range events {
			out = append(out, fmt.Sprintf("%s/%d %s", e.Job, e.Checkpoint, e.Status))
			if e.Rank != coordinator.StatusRank(e.Status) || e.At.IsZero() {
				t.Errorf("event %+v: rank or time wrong", e)
			}
			if i > 0 && !events[i-1].EventPosition.Less(e.EventPosition) {
				t.Errorf("event %d %+v does not come after %+v", i, e.EventPosition, events[i-1].EventPosition)
			}
		}
		return out
	}
	got, page := read("", head, 100)
	if strings.Join(names(got), ", ") != strings.Join(all, ", ") || page.Reset {
		t.Fatalf("every job's events after the head:\n got %v (reset %v)\nwant %v", names(got), page.Reset, all)
	}
	// Of one job: the same, without the other job's.
	if js, _ := read("j", head, 100); strings.Join(names(js), ", ") != "j/1 preparing, j/1 committing, j/2 preparing, j/2 aborted, j/1 committed" {
		t.Errorf("job j's events: %v", names(js))
	}
	// From every position: exactly the rest, page by page.
	for i := range got {
		rest, _ := read("", got[i].EventPosition, 100)
		if strings.Join(names(rest), ", ") != strings.Join(all[i+1:], ", ") {
			t.Errorf("after event %d: %v, want %v", i, names(rest), all[i+1:])
		}
	}
	var paged []coordinator.StatusEvent
	for pos := head; ; {
		p, _ := read("", pos, 2)
		if len(p) == 0 {
			break
		}
		paged = append(paged, p...)
		pos = p[len(p)-1].EventPosition
	}
	if strings.Join(names(paged), ", ") != strings.Join(all, ", ") {
		t.Errorf("read two at a time: %v", names(paged))
	}
	// A new head comes after all of them.
	later, err := es.EventHead(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rest, _ := read("", later, 100); len(rest) != 0 {
		t.Errorf("events after a later head: %v", names(rest))
	}

	// Pruning deletes the oldest; a position before them is reset, one after is not.
	n, err := es.PruneEvents(b.ctx, time.Now().Add(time.Hour), 3)
	if err != nil || n != 3 {
		t.Fatalf("PruneEvents deleted %d (%v), want 3", n, err)
	}
	if _, page := read("", head, 100); !page.Reset {
		t.Error("a position before the pruned events is not reset")
	}
	if rest, page := read("", got[2].EventPosition, 100); page.Reset || strings.Join(names(rest), ", ") != strings.Join(all[3:], ", ") {
		t.Errorf("after the last pruned event: %v, reset %v; want %v", names(rest), page.Reset, all[3:])
	}
	if n, err := es.PruneEvents(b.ctx, time.Now().Add(-time.Hour), 100); err != nil || n != 0 {
		t.Errorf("PruneEvents before the oldest deleted %d (%v)", n, err)
	}
}
