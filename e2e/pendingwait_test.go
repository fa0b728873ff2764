package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/twophase/coordinator/e2e/harness"
	"github.com/twophase/coordinator/store/pgtest"
)

// pendingWaitAnswer is what a long-poll on pending got, and when.
type pendingWaitAnswer struct {
	rep      reply
	err      error
	answered time.Time
}

// pendingWaitStart sends GET pending?wait_ms=waitMS to a in the background and waits
// settle, so that the request is held by the coordinator when pendingWaitStart returns.
func pendingWaitStart(a *api, job, p string, waitMS int, settle time.Duration) <-chan pendingWaitAnswer {
	done := make(chan pendingWaitAnswer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(waitMS)*time.Millisecond+20*time.Second)
		defer cancel()
		rep, err := a.do(ctx, "GET", fmt.Sprintf("%s?wait_ms=%d", pendingPath(job, p), waitMS), "")
		done <- pendingWaitAnswer{rep: rep, err: err, answered: time.Now()}
	}()
	time.Sleep(settle)
	return done
}

// pendingWaitGet waits up to limit for the answer of a long-poll, fails the test unless it
// is 200 with a pending document, and decodes it.
func pendingWaitGet(t *testing.T, what string, done <-chan pendingWaitAnswer, limit time.Duration) (pending, pendingWaitAnswer) {
	t.Helper()
	var ans pendingWaitAnswer
	select {
	case ans = <-done:
	case <-time.After(limit):
		t.Fatalf("%s: the long-poll did not answer within %s", what, limit)
	}
	if ans.err != nil {
		t.Fatalf("%s: the long-poll failed: %v", what, ans.err)
	}
	if ans.rep.status != http.StatusOK {
		t.Fatalf("%s: %v, want 200", what, ans.rep)
	}
	checkAnswer(t, ans.rep)
	var pe pending
	if err := json.Unmarshal(ans.rep.body, &pe); err != nil {
		t.Fatalf("%s: %v: decode: %v", what, ans.rep, err)
	}
	return pe, ans
}

// TestPendingWokenAcrossProcesses checks README's promise about the pending long-poll
// ("In any language: the HTTP flow"): the request held by one coordinator answers as soon
// as something is owed or the participant registered again, whichever coordinator on the
// database it happened through; with nothing happening it answers after wait_ms with no
// items; and a coordinator shutting down (SIGTERM) answers it at once.
func TestPendingWokenAcrossProcesses(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	coordA := harness.StartCoordinator(t, dbURL)
	coordB := harness.StartCoordinator(t, dbURL)
	a, b := newAPI(coordA), newAPI(coordB)
	epochs := b.setupJob(t, "j", `{"participants":["p"]}`, "p")
	epoch := epochs["p"]

	// Woken by a checkpoint opened through the other process.
	done := pendingWaitStart(a, "j", "p", 20000, 300*time.Millisecond)
	select {
	case ans := <-done:
		t.Fatalf("the long-poll answered before anything happened: %v %v", ans.rep, ans.err)
	default:
	}
	opening := time.Now()
	cp := b.prepare(t, "j", `{}`)
	opened := time.Now()
	pe, ans := pendingWaitGet(t, "checkpoint opened through B", done, 5*time.Second)
	delay := ans.answered.Sub(opened)
	t.Logf("A's long-poll answered %s after B's POST checkpoints answered (%s after it was sent)",
		delay.Round(time.Microsecond), ans.answered.Sub(opening).Round(time.Microsecond))
	if delay > 2*time.Second {
		t.Errorf("A's long-poll answered %s after the checkpoint opened through B, want within 2 s", delay)
	}
	if pe.Epoch != epoch || len(pe.Items) != 1 || pe.Items[0].Checkpoint != cp.Id || pe.Items[0].Action != "vote" || pe.Items[0].Status != "preparing" {
		t.Fatalf("A's long-poll answered %s, want the vote on checkpoint %d at epoch %d", ans.rep.body, cp.Id, epoch)
	}

	// Settle it: nothing owed any more.
	if got := b.vote(t, "j", cp.Id, "p", epoch, `[{"txn":1}]`); got.Status != "committing" {
		t.Fatalf("after the vote: %s, want committing", got.Status)
	}
	if got := a.ack(t, "j", cp.Id, "p", epoch); got.Status != "committed" {
		t.Fatalf("after the ack: %s, want committed", got.Status)
	}

	// Nothing happening: the answer comes after wait_ms, with no items.
	sent := time.Now()
	done = pendingWaitStart(a, "j", "p", 500, 0)
	pe, ans = pendingWaitGet(t, "idle", done, 5*time.Second)
	held := ans.answered.Sub(sent)
	t.Logf("an idle long-poll (wait_ms=500) answered after %s", held.Round(time.Microsecond))
	if held < 500*time.Millisecond || held > 2*time.Second {
		t.Errorf("an idle long-poll with wait_ms=500 answered after %s, want 500 ms or a little more", held)
	}
	if pe.Epoch != epoch || pe.Items == nil || len(pe.Items) != 0 {
		t.Errorf("an idle long-poll answered %s, want \"items\":[] at epoch %d", ans.rep.body, epoch)
	}

	// Woken by the participant registering again through the other process.
	done = pendingWaitStart(a, "j", "p", 20000, 300*time.Millisecond)
	reg := b.register(t, "j", "p")
	registered := time.Now()
	pe, ans = pendingWaitGet(t, "registration through B", done, 5*time.Second)
	delay = ans.answered.Sub(registered)
	t.Logf("A's long-poll answered %s after p registered again through B (epoch %d -> %d)", delay.Round(time.Microsecond), epoch, reg.Epoch)
	if delay > 2*time.Second {
		t.Errorf("A's long-poll answered %s after the registration through B, want within 2 s", delay)
	}
	if reg.Epoch <= epoch || pe.Epoch != reg.Epoch || len(pe.Items) != 0 {
		t.Errorf("A's long-poll answered %s after the registration through B, want epoch %d (was %d) and no items", ans.rep.body, reg.Epoch, epoch)
	}

	// SIGTERM to A answers its waiting long-poll at once: an answer, not a dropped connection.
	done = pendingWaitStart(a, "j", "p", 20000, 300*time.Millisecond)
	stopping := time.Now()
	coordA.Stop() // SIGTERM, then waits for the process to exit (status 0)
	exited := time.Since(stopping)
	pe, ans = pendingWaitGet(t, "SIGTERM to A", done, 5*time.Second)
	delay = ans.answered.Sub(stopping)
	t.Logf("A's long-poll answered %s after SIGTERM (A exited after %s): %v", delay.Round(time.Microsecond), exited.Round(time.Millisecond), ans.rep)
	if delay > 2*time.Second {
		t.Errorf("A's long-poll answered %s after SIGTERM, want at once", delay)
	}
	if pe.Epoch != reg.Epoch || len(pe.Items) != 0 {
		t.Errorf("A's long-poll answered %s at SIGTERM, want epoch %d and no items", ans.rep.body, reg.Epoch)
	}
	// B still serves: the waiters of one process are its own.
	if pe := b.pending(t, "j", "p"); pe.Epoch != reg.Epoch {
		t.Errorf("B: pending at epoch %d, want %d", pe.Epoch, reg.Epoch)
	}
}
