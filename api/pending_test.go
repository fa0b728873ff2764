package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/pgtest"
	"github.com/twophase/coordinator/store/postgres"
)

// A participant's long-poll on pending is woken by what a coordinator sharing the
// database does: a checkpoint opened, a decision, its own registration elsewhere; and it
// ends at its wait_ms, or at once when something is owed or the coordinator shuts down.
func TestPendingWaitAcrossCoordinators(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	waiter, waiterSvc := coordinatorOn(t, url)
	other, _ := coordinatorOn(t, url)
	other.send(t, "", "PUT", "/v1/jobs/j", `{"participants":["a","b"]}`)
	other.send(t, "", "POST", "/v1/jobs/j/participants/a/register", "")
	other.send(t, "", "POST", "/v1/jobs/j/participants/b/register", "")

	type answer struct {
		p     Pending
		took  time.Duration
		label string
	}
	poll := func(wait string) <-chan answer {
		ch := make(chan answer, 1)
		start := time.Now()
		go func() {
			r := waiter.send(t, "", "GET", "/v1/jobs/j/participants/a/pending?wait_ms="+wait, "")
			var p Pending
			if err := json.Unmarshal(r.body, &p); err != nil || r.status != 200 {
				t.Errorf("pending: %d %s", r.status, r.body)
			}
			ch <- answer{p: p, took: time.Since(start)}
		}()
		return ch
	}
	waitFor := func(what string, ch <-chan answer, atMost time.Duration) answer {
		t.Helper()
		select {
		case a := <-ch:
			return a
		case <-time.After(atMost):
			t.Fatalf("%s: the long-poll did not answer within %s", what, atMost)
			return answer{}
		}
	}
	// Nothing owed, nothing happens: it answers at wait_ms, not before.
	a := waitFor("an idle wait", poll("300"), 5*time.Second)
	if len(a.p.Items) != 0 || a.took < 300*time.Millisecond {
		t.Fatalf("an idle wait answered %+v after %s, want nothing owed after 300 ms", a.p.Items, a.took)
	}
	// A checkpoint opened through the other coordinator wakes it.
	ch := poll("20000")
	time.Sleep(200 * time.Millisecond)
	other.send(t, "", "POST", "/v1/jobs/j/checkpoints", "")
	a = waitFor("a checkpoint opened elsewhere", ch, 5*time.Second)
	if len(a.p.Items) != 1 || a.p.Items[0].Action != PendingActionVote || a.p.Items[0].Checkpoint != 1 {
		t.Fatalf("after a checkpoint opened elsewhere: %+v", a.p.Items)
	}
	// Something owed: it answers at once.
	a = waitFor("something owed", poll("20000"), 2*time.Second)
	if len(a.p.Items) != 1 || a.took > time.Second {
		t.Fatalf("with a vote owed: %+v after %s, want it at once", a.p.Items, a.took)
	}
	// Its vote in, a's waits; the decision elsewhere (b's vote) wakes it with the commit.
	waiter.send(t, "", "PUT", "/v1/jobs/j/checkpoints/1/votes/a", `{"epoch":1,"vote":"prepared"}`)
	ch = poll("20000")
	time.Sleep(200 * time.Millisecond)
	other.send(t, "", "PUT", "/v1/jobs/j/checkpoints/1/votes/b", `{"epoch":1,"vote":"prepared"}`)
	a = waitFor("a decision elsewhere", ch, 5*time.Second)
	if len(a.p.Items) != 1 || a.p.Items[0].Action != PendingActionCommit {
		t.Fatalf("after the decision elsewhere: %+v, want the commit", a.p.Items)
	}
	waiter.send(t, "", "PUT", "/v1/jobs/j/checkpoints/1/acks/a", `{"epoch":1}`)
	other.send(t, "", "PUT", "/v1/jobs/j/checkpoints/1/acks/b", `{"epoch":1}`)
	// Its participant registered again elsewhere: it answers with the new epoch.
	ch = poll("20000")
	time.Sleep(200 * time.Millisecond)
	other.send(t, "", "POST", "/v1/jobs/j/participants/a/register", "")
	a = waitFor("a registration elsewhere", ch, 5*time.Second)
	if a.p.Epoch != 2 || len(a.p.Items) != 0 {
		t.Fatalf("after a registration elsewhere: epoch %d, %+v; want epoch 2, nothing owed", a.p.Epoch, a.p.Items)
	}
	// A caller that says its epoch (1) learns at once that it was fenced, though the new
	// registration (epoch 2) came before its request; with the current epoch it waits.
	a = waitFor("a fenced caller's wait", poll("20000&epoch=1"), 2*time.Second)
	if a.p.Epoch != 2 || a.took > time.Second {
		t.Fatalf("a caller of epoch 1, re-registered before it asked: epoch %d after %s, want epoch 2 at once", a.p.Epoch, a.took)
	}
	a = waitFor("a current caller's wait", poll("300&epoch=2"), 5*time.Second)
	if a.p.Epoch != 2 || a.took < 300*time.Millisecond {
		t.Fatalf("a caller of the current epoch: epoch %d after %s, want it to wait 300 ms", a.p.Epoch, a.took)
	}
	// Shutdown answers it at once.
	ch = poll("20000")
	time.Sleep(200 * time.Millisecond)
	waiterSvc.EndWaits()
	if a = waitFor("a shutdown", ch, 3*time.Second); a.took > 3*time.Second {
		t.Fatalf("after EndWaits it answered after %s", a.took)
	}
	// Bounds.
	for _, bad := range []string{"-1", "60001", "x", "100&epoch=0", "100&epoch=-3", "100&epoch=x"} {
		if r := other.send(t, "", "GET", "/v1/jobs/j/participants/a/pending?wait_ms="+bad, ""); r.status != 400 {
			t.Errorf("wait_ms=%s: %d %s, want 400", bad, r.status, r.body)
		}
	}
}

// coordinatorOn serves a coordinator on the PostgreSQL database at url as a process of its
// own would: its own store, service and HTTP server.
func coordinatorOn(t *testing.T, url string) (*authBundle, *coordinator.Service) {
	t.Helper()
	store, err := postgres.Open(context.Background(), url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	svc := coordinator.NewService(store, nil)
	srv := httptest.NewServer(NewHandler(svc, Options{Logger: slog.New(slog.DiscardHandler), RequestTimeout: time.Minute}))
	t.Cleanup(srv.Close)
	return &authBundle{url: srv.URL, store: store}, svc
}
