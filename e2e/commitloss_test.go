package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/twophase/coordinator/clients/go/coordinatorclient"
	"github.com/twophase/coordinator/e2e/harness"
)

// Statements the proxy is armed for: a prepare opens a checkpoint, a registration writes
// an epoch (the schema's tables, as migrations/ creates them).
var (
	insertCheckpointSQL = regexp.MustCompile(`(?i)\bINSERT\s+INTO\s+checkpoints\b`)
	writeEpochSQL       = regexp.MustCompile(`(?i)\b(INSERT\s+INTO|UPDATE)\s+participant_epochs\b`)
)

// TestCommitOutcomeUnknown runs the coordinator through a proxy (harness.PGProxy) that
// loses the answer to one COMMIT: it passes the COMMIT on, waits until PostgreSQL has
// answered it, and closes the connection instead of passing the answer back. The
// coordinator cannot know whether the transaction committed; it must not run its requests
// again. In each round six jobs get one prepare each, without Idempotency-Key, at once
// (alternately the first transaction that opens a checkpoint is cut, and the first that
// opens at least two, so that a group commit of several is cut too), then six
// registrations the same way. For every request, reading the database directly: a 201
// names the one checkpoint that exists (last_checkpoint grew by exactly one, ids never
// skip), a 200 the epoch the database holds (moved by exactly one); a 503 says its
// outcome is unknown (the request may have been applied) and exactly one checkpoint was
// opened, or one epoch moved, by it; or says it was not applied, and nothing was. Then the
// coordinator's other connections, its LISTEN connection included, still work.
func TestCommitOutcomeUnknown(t *testing.T) {
	t.Parallel()
	cluster := harness.StartCluster(t)
	dbURL := cluster.NewDatabase(t)
	proxy := harness.StartPGProxy(t, fmt.Sprintf("127.0.0.1:%d", cluster.Port()))
	coord := harness.StartCoordinator(t, proxy.URL(dbURL), "--request-timeout", "10s")
	a, long := newAPI(coord), longAPI(coord)
	db := openStoreDB(t, dbURL)

	const jobsPerRound = 6
	var jobs []string
	for i := range jobsPerRound {
		job := fmt.Sprintf("loss-%d", i)
		jobs = append(jobs, job)
		a.setupJob(t, job, `{"participants":["p"],"max_concurrent_checkpoints":50,"checkpoint_timeout_ms":600000}`, "p")
	}

	cutPrepares, cutRegistrations := 0, 0
	const rounds = 4
	for round := 1; round <= rounds; round++ {
		atLeast := 1 + (round+1)%2 // 1, 2, 1, 2
		// Prepares.
		before := map[string][2]int64{}
		for _, job := range jobs {
			n, last := db.checkpoints(job)
			before[job] = [2]int64{n, last}
		}
		cutsBefore := len(proxy.Cuts())
		proxy.ArmCommitLoss(insertCheckpointSQL, atLeast)
		answers := concurrently(long, jobs, func(job string) request {
			return request{method: "POST", path: jobPath(job) + "/checkpoints"}
		})
		proxy.Disarm()
		if cuts := proxy.Cuts()[cutsBefore:]; len(cuts) > 0 {
			cutPrepares++
			t.Logf("round %d: cut the COMMIT of a transaction opening %d checkpoint(s) (server answered: %v), %d statements",
				round, cuts[0].Matches, cuts[0].ServerAnswered, len(cuts[0].Statements))
		} else {
			t.Logf("round %d: no transaction opened %d checkpoint(s): no prepare cut", round, atLeast)
		}
		for _, job := range jobs {
			checkPrepareAnswer(t, db, round, job, before[job], answers[job])
		}
		a.mustDo(t, "GET", "/readyz", "", http.StatusOK, nil)

		// Registrations.
		epochs := map[string]int64{}
		for _, job := range jobs {
			epochs[job] = db.epoch(job, "p")
		}
		cutsBefore = len(proxy.Cuts())
		proxy.ArmCommitLoss(writeEpochSQL, atLeast)
		answers = concurrently(long, jobs, func(job string) request {
			return request{method: "POST", path: registerPath(job, "p")}
		})
		proxy.Disarm()
		if cuts := proxy.Cuts()[cutsBefore:]; len(cuts) > 0 {
			cutRegistrations++
			t.Logf("round %d: cut the COMMIT of a transaction writing %d epoch(s) (server answered: %v), %d statements",
				round, cuts[0].Matches, cuts[0].ServerAnswered, len(cuts[0].Statements))
		} else {
			t.Logf("round %d: no transaction wrote %d epoch(s): no registration cut", round, atLeast)
		}
		for _, job := range jobs {
			checkRegisterAnswer(t, db, round, job, epochs[job], answers[job])
		}
		a.mustDo(t, "GET", "/readyz", "", http.StatusOK, nil)
	}
	if cutPrepares == 0 || cutRegistrations == 0 {
		t.Errorf("in %d rounds the proxy cut %d prepare and %d registration commits: the test proved nothing", rounds, cutPrepares, cutRegistrations)
	}
	accepted, open := proxy.Connections()
	t.Logf("%d connections through the proxy, %d open; %d commits cut", accepted, open, len(proxy.Cuts()))

	// The connections the proxy did not cut are unharmed: a decision taken by another
	// coordinator (straight on the database) wakes a waiter on this one, through its LISTEN
	// connection (rule 8), before the wait runs out.
	other := newAPI(harness.StartCoordinator(t, dbURL))
	cp := a.prepare(t, jobs[0], "")
	woken := make(chan reply, 1)
	go func() {
		rep, err := long.do(context.Background(), "GET", cpPath(jobs[0], cp.Id)+"?wait_ms=60000", "")
		if err != nil {
			rep = reply{status: -1, body: []byte(err.Error())}
		}
		woken <- rep
	}()
	time.Sleep(200 * time.Millisecond) // let the waiter subscribe; if it has not, it reads the decision
	other.vote(t, jobs[0], cp.Id, "p", db.epoch(jobs[0], "p"), "")
	select {
	case rep := <-woken:
		var got checkpoint
		decode(t, rep, &got)
		if got.Status != "committing" {
			t.Errorf("the waiter through the proxy: %v", rep)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("a waiter on the coordinator behind the proxy was not woken within 30 s of a decision taken on another coordinator")
	}
}

// concurrently sends one request per job at once and returns the answers by job.
func concurrently(a *api, jobs []string, req func(job string) request) map[string]heldAnswer {
	var mu sync.Mutex
	answers := map[string]heldAnswer{}
	var wg, start sync.WaitGroup
	start.Add(1)
	for _, job := range jobs {
		wg.Go(func() {
			r := req(job)
			start.Wait()
			rep, err := a.send(context.Background(), r)
			mu.Lock()
			answers[job] = heldAnswer{what: r.method + " " + r.path, rep: rep, err: err}
			mu.Unlock()
		})
	}
	start.Done()
	wg.Wait()
	return answers
}

// checkPrepareAnswer checks one prepare, sent once without Idempotency-Key, against the
// database: before is the job's checkpoint count and highest id before it.
func checkPrepareAnswer(t *testing.T, db *storeDB, round int, job string, before [2]int64, ans heldAnswer) {
	t.Helper()
	n, last := db.checkpoints(job)
	opened := n - before[0]
	ids := func() []int64 { return db.checkpointIDs(job) }
	if ans.err != nil {
		t.Errorf("round %d: %s: no answer: %v (%d checkpoint(s) opened)", round, ans.what, ans.err, opened)
		return
	}
	if opened > 1 {
		t.Errorf("round %d: %s, sent once: %d checkpoints opened (ids %v), answered %v", round, ans.what, opened, ids(), ans.rep)
	}
	if opened == 1 && last != before[1]+1 {
		t.Errorf("round %d: %s: the new checkpoint is %d after %d: ids skip (%v)", round, ans.what, last, before[1], ids())
	}
	switch ans.rep.status {
	case http.StatusCreated:
		var cp checkpoint
		decode(t, ans.rep, &cp)
		if opened != 1 || cp.Id != last {
			t.Errorf("round %d: %s: 201 with checkpoint %d, but %d checkpoint(s) opened, ids %v: a 201 names the one checkpoint its request opened",
				round, ans.what, cp.Id, opened, ids())
		}
	case http.StatusServiceUnavailable:
		if err := problemError(ans.rep, 503, "unavailable"); err != nil {
			t.Error(err)
		}
		meaning, detail := meaning503(ans.rep)
		t.Logf("round %d: %s: 503 that %s (%q); %d checkpoint(s) opened", round, ans.what, meaning, detail, opened)
		switch meaning {
		case saysMayHaveApplied:
			if opened != 1 {
				t.Errorf("round %d: %s: 503 outcome unknown, and %d checkpoint(s) opened, want exactly 1 (its COMMIT reached the database)", round, ans.what, opened)
			}
		case saysNotApplied:
			if opened != 0 {
				t.Errorf("round %d: %s: 503 saying it was not applied, and %d checkpoint(s) opened", round, ans.what, opened)
			}
		default:
			t.Errorf("round %d: %s: a 503 whose detail %q does not say that the outcome is unknown (%d checkpoint(s) opened)", round, ans.what, detail, opened)
		}
	default:
		t.Errorf("round %d: %v, want 201 or 503 (%d checkpoint(s) opened, ids %v)", round, ans.rep, opened, ids())
	}
}

// checkRegisterAnswer checks one registration of p, sent once, against the database: old
// is p's epoch before it.
func checkRegisterAnswer(t *testing.T, db *storeDB, round int, job string, old int64, ans heldAnswer) {
	t.Helper()
	now := db.epoch(job, "p")
	if ans.err != nil {
		t.Errorf("round %d: %s: no answer: %v (epoch %d, was %d)", round, ans.what, ans.err, now, old)
		return
	}
	if now > old+1 {
		t.Errorf("round %d: %s, sent once: the epoch moved from %d to %d, answered %v", round, ans.what, old, now, ans.rep)
	}
	switch ans.rep.status {
	case http.StatusOK:
		var reg coordinatorclient.Registration
		decode(t, ans.rep, &reg)
		if reg.Epoch != old+1 || now != old+1 {
			t.Errorf("round %d: %s: 200 with epoch %d, the database holds %d, want both %d", round, ans.what, reg.Epoch, now, old+1)
		}
	case http.StatusServiceUnavailable:
		if err := problemError(ans.rep, 503, "unavailable"); err != nil {
			t.Error(err)
		}
		meaning, detail := meaning503(ans.rep)
		t.Logf("round %d: %s: 503 that %s (%q); epoch %d, was %d", round, ans.what, meaning, detail, now, old)
		switch meaning {
		case saysMayHaveApplied:
			if now != old+1 {
				t.Errorf("round %d: %s: 503 outcome unknown, and epoch %d after %d, want exactly %d (its COMMIT reached the database)", round, ans.what, now, old, old+1)
			}
		case saysNotApplied:
			if now != old {
				t.Errorf("round %d: %s: 503 saying it was not applied, and the epoch moved from %d to %d", round, ans.what, old, now)
			}
		default:
			t.Errorf("round %d: %s: a 503 whose detail %q does not say that the outcome is unknown (epoch %d, was %d)", round, ans.what, detail, now, old)
		}
	default:
		t.Errorf("round %d: %v, want 200 or 503 (epoch %d, was %d)", round, ans.rep, now, old)
	}
}
