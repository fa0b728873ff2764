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
	waiter, waiterSvc, other := sharingJobJ(t)

	poll := func(wait string) <-chan timed[Pending] {
		return sendTimed[Pending](t, waiter, "GET", "/v1/jobs/j/participants/a/pending?wait_ms="+wait, "")
	}
	// Nothing owed, nothing happens: it answers at wait_ms, not before.
	a := within(t, "an idle wait", poll("300"), 5*time.Second)
	if len(a.v.Items) != 0 || a.took < 300*time.Millisecond {
		t.Fatalf("an idle wait answered %+v after %s, want nothing owed after 300 ms", a.v.Items, a.took)
	}
	// A checkpoint opened through the other coordinator wakes it.
	ch := poll("20000")
	time.Sleep(200 * time.Millisecond)
	other.send(t, "", "POST", "/v1/jobs/j/checkpoints", "")
	a = within(t, "a checkpoint opened elsewhere", ch, 5*time.Second)
	if len(a.v.Items) != 1 || a.v.Items[0].Action != PendingActionVote || a.v.Items[0].Checkpoint != 1 {
		t.Fatalf("after a checkpoint opened elsewhere: %+v", a.v.Items)
	}
	// Something owed: it answers at once.
	a = within(t, "something owed", poll("20000"), 2*time.Second)
	if len(a.v.Items) != 1 || a.took > time.Second {
		t.Fatalf("with a vote owed: %+v after %s, want it at once", a.v.Items, a.took)
	}
	// Its vote in, a's waits; the decision elsewhere (b's vote) wakes it with the commit.
	waiter.send(t, "", "PUT", "/v1/jobs/j/checkpoints/1/votes/a", `{"epoch":1,"vote":"prepared"}`)
	ch = poll("20000")
	time.Sleep(200 * time.Millisecond)
	other.send(t, "", "PUT", "/v1/jobs/j/checkpoints/1/votes/b", `{"epoch":1,"vote":"prepared"}`)
	a = within(t, "a decision elsewhere", ch, 5*time.Second)
	if len(a.v.Items) != 1 || a.v.Items[0].Action != PendingActionCommit {
		t.Fatalf("after the decision elsewhere: %+v, want the commit", a.v.Items)
	}
	waiter.send(t, "", "PUT", "/v1/jobs/j/checkpoints/1/acks/a", `{"epoch":1}`)
	other.send(t, "", "PUT", "/v1/jobs/j/checkpoints/1/acks/b", `{"epoch":1}`)
	// Its participant registered again elsewhere: it answers with the new epoch.
	ch = poll("20000")
	time.Sleep(200 * time.Millisecond)
	other.send(t, "", "POST", "/v1/jobs/j/participants/a/register", "")
	a = within(t, "a registration elsewhere", ch, 5*time.Second)
	if a.v.Epoch != 2 || len(a.v.Items) != 0 {
		t.Fatalf("after a registration elsewhere: epoch %d, %+v; want epoch 2, nothing owed", a.v.Epoch, a.v.Items)
	}
	// A caller that says its epoch (1) learns at once that it was fenced, though the new
	// registration (epoch 2) came before its request; with the current epoch it waits.
	a = within(t, "a fenced caller's wait", poll("20000&epoch=1"), 2*time.Second)
	if a.v.Epoch != 2 || a.took > time.Second {
		t.Fatalf("a caller of epoch 1, re-registered before it asked: epoch %d after %s, want epoch 2 at once", a.v.Epoch, a.took)
	}
	a = within(t, "a current caller's wait", poll("300&epoch=2"), 5*time.Second)
	if a.v.Epoch != 2 || a.took < 300*time.Millisecond {
		t.Fatalf("a caller of the current epoch: epoch %d after %s, want it to wait 300 ms", a.v.Epoch, a.took)
	}
	// Shutdown answers it at once.
	ch = poll("20000")
	time.Sleep(200 * time.Millisecond)
	waiterSvc.EndWaits()
	if a = within(t, "a shutdown", ch, 3*time.Second); a.took > 3*time.Second {
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
// sharingJobJ serves two coordinators on one new database: the waiter (with its service)
// and the other, through which job j of participants a and b is created and both are
// registered (epoch 1).
func sharingJobJ(t *testing.T) (waiter *authBundle, waiterSvc *coordinator.Service, other *authBundle) {
	t.Helper()
	url := pgtest.URL(t)
	waiter, waiterSvc = coordinatorOn(t, url)
	other, _ = coordinatorOn(t, url)
	other.send(t, "", "PUT", "/v1/jobs/j", `{"participants":["a","b"]}`)
	other.send(t, "", "POST", "/v1/jobs/j/participants/a/register", "")
	other.send(t, "", "POST", "/v1/jobs/j/participants/b/register", "")
	return waiter, waiterSvc, other
}

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

// timed is a request's decoded answer and how long the request took.
type timed[T any] struct {
	v    T
	took time.Duration
}

// sendTimed sends a request in the background; it must answer 200 with a T, which the
// channel gives with the time the request took.
func sendTimed[T any](t *testing.T, b *authBundle, method, path, body string) <-chan timed[T] {
	ch := make(chan timed[T], 1)
	start := time.Now()
	go func() {
		r := b.send(t, "", method, path, body)
		var v T
		if err := json.Unmarshal(r.body, &v); err != nil || r.status != 200 {
			t.Errorf("%s %s: %d %s", method, path, r.status, r.body)
		}
		ch <- timed[T]{v: v, took: time.Since(start)}
	}()
	return ch
}
