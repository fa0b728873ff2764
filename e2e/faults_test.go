package e2e_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/twophase/coordinator/e2e/harness"
)

// envInt returns the integer in the environment variable name, or def.
func envInt(t testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a count", name, v)
	}
	return n
}

// newRand returns a generator seeded from the clock, or from COORDINATOR_TEST_E2E_SEED,
// and logs the seed so that a failing run can be replayed.
func newRand(t testing.TB) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("COORDINATOR_TEST_E2E_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("COORDINATOR_TEST_E2E_SEED=%q", v)
		}
		seed = s
	}
	t.Logf("seed %d (COORDINATOR_TEST_E2E_SEED replays it)", seed)
	return rand.New(rand.NewPCG(seed, 0))
}

func faultJobs(prefix string) []workloadJob {
	return []workloadJob{
		{name: prefix + "-auto", participants: []string{"sink-a", "sink-b", "source"}, autoCommit: true, maxConcurrent: 2, timeoutMs: 5000},
		{name: prefix + "-manual", participants: []string{"sink-x", "sink-y"}, autoCommit: false, maxConcurrent: 1, timeoutMs: 5000},
	}
}

func jobNames(jobs []workloadJob) []string {
	var out []string
	for _, j := range jobs {
		out = append(out, j.name)
	}
	return out
}

// TestFaultCoordinatorKills kills the coordinator with SIGKILL at random moments while
// clients vote, ack, prepare, commit and abort, and restarts it at once; the clients
// retry every request unchanged (the same body, the same Idempotency-Key) until they get a
// definitive answer. Afterwards every answer any of them received must still hold.
func TestFaultCoordinatorKills(t *testing.T) {
	t.Parallel()
	cluster := harness.StartCluster(t)
	coord := harness.StartCoordinator(t, cluster.NewDatabase(t), "--sweep-interval", "100ms", "--request-timeout", "3s")
	a := newAPI(coord)
	jobs := faultJobs("kill")
	w := newWorkload(t, a, 8*time.Second, jobs...)
	w.start()

	kills := envInt(t, "COORDINATOR_TEST_E2E_KILLS", 25)
	rng := newRand(t)
	start := time.Now()
	for i := 0; i < kills && !w.ledger.failed(); i++ {
		time.Sleep(time.Duration(20+rng.IntN(280)) * time.Millisecond)
		coord.Kill()
		time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
		coord.Restart()
	}
	t.Logf("%d SIGKILLs in %s", kills, time.Since(start).Round(time.Millisecond))
	time.Sleep(500 * time.Millisecond)
	w.stop()
	coord.Stop() // a graceful stop exits 0
	coord.Restart()

	w.ledger.verify(t, a, jobNames(jobs)...)
	t.Logf("%s; %d retries", w.ledger.stats(), w.retries.Load())
	if opened, votes, acks, commits := w.ledger.counts(); opened < 10 || votes < 20 || acks < 5 || commits < 3 {
		t.Errorf("too little progress under kills to prove anything: %s", w.ledger.stats())
	}
}

// TestFaultDatabaseCrash crashes PostgreSQL (pg_ctl stop -m immediate) twice under load.
// While it is down every request that needs it is answered 503 problem+json with
// Retry-After within the request timeout, /readyz is 503 and /healthz 200; once it is back
// the coordinator recovers by itself within seconds; nothing acknowledged before the crash
// is lost, and nothing answered 503 during the outage happened.
func TestFaultDatabaseCrash(t *testing.T) {
	t.Parallel()
	const requestTimeout = 2 * time.Second
	cluster := harness.StartCluster(t)
	coord := harness.StartCoordinator(t, cluster.NewDatabase(t), "--sweep-interval", "100ms", "--request-timeout", requestTimeout.String())
	a := newAPI(coord)
	jobs := faultJobs("crash")
	w := newWorkload(t, a, requestTimeout+3*time.Second, jobs...)

	// A job the probes write to during the outages: nothing may change in it.
	probe := a.setupJob(t, "probe", `{"participants":["p"],"max_concurrent_checkpoints":5}`, "p")
	a.prepare(t, "probe", "")
	probeBefore := rawGet(t, a, jobPath("probe")) + rawGet(t, a, jobPath("probe")+"/checkpoints")
	w.start()

	for crash := 1; crash <= 2; crash++ {
		time.Sleep(800 * time.Millisecond)
		cluster.Crash()
		probeOutage(t, a, requestTimeout, 1500*time.Millisecond, probe["p"])
		cluster.Start()
		recovered := waitRecovered(t, a, 20*time.Second)
		t.Logf("crash %d: the coordinator served writes %s after the database accepted connections again",
			crash, recovered.Round(time.Millisecond))
		if recovered > 10*time.Second {
			t.Errorf("crash %d: recovery took %s", crash, recovered)
		}
	}
	time.Sleep(800 * time.Millisecond)
	w.stop()

	if after := rawGet(t, a, jobPath("probe")) + rawGet(t, a, jobPath("probe")+"/checkpoints"); after != probeBefore {
		t.Errorf("requests answered 503 while the database was down changed the state:\nbefore %s\nafter  %s", probeBefore, after)
	}
	w.ledger.verify(t, a, jobNames(jobs)...)
	t.Logf("%s; %d retries, %d answers 503", w.ledger.stats(), w.retries.Load(), w.got503.Load())
	if w.got503.Load() == 0 {
		t.Errorf("the workload never saw a 503: the outages did not reach it")
	}
	if opened, votes, _, commits := w.ledger.counts(); opened < 5 || votes < 10 || commits < 2 {
		t.Errorf("too little progress across the crashes to prove anything: %s", w.ledger.stats())
	}
}

// probeOutage sends every kind of request for d while the database is down: each must be
// answered within the request timeout (plus slack) by 503 problem+json with Retry-After,
// except /healthz (200: the process is alive).
func probeOutage(t *testing.T, a *api, requestTimeout, d time.Duration, epoch int64) {
	t.Helper()
	probes := []request{
		{method: "GET", path: "/readyz"},
		{method: "GET", path: jobPath("probe")},
		{method: "PUT", path: votePath("probe", 1, "p"), body: voteBody(epoch, `["lost?"]`)},
		{method: "POST", path: jobPath("probe") + "/checkpoints", header: map[string]string{"Idempotency-Key": "outage"}},
		{method: "POST", path: cpPath("probe", 1) + "/abort", body: `{"reason":"outage"}`},
		{method: "POST", path: registerPath("probe", "p")},
		{method: "PUT", path: jobPath("probe"), body: `{"participants":["p","q"]}`},
		{method: "GET", path: pendingPath("probe", "p")},
		{method: "GET", path: cpPath("probe", 1) + "?wait_ms=500"},
		{method: "GET", path: "/v1/checkpoints"},
		{method: "GET", path: "/healthz"},
	}
	slack := 1500 * time.Millisecond
	n := 0
	for end := time.Now().Add(d); time.Now().Before(end); {
		for _, r := range probes {
			n++
			ctx, cancel := context.WithTimeout(context.Background(), requestTimeout+10*time.Second)
			rep, err := a.send(ctx, r)
			cancel()
			if err != nil {
				t.Errorf("database down: %s %s: %v", r.method, r.path, err)
				continue
			}
			limit := requestTimeout + slack
			if r.path == cpPath("probe", 1)+"?wait_ms=500" {
				limit += 500 * time.Millisecond
			}
			if rep.elapsed > limit {
				t.Errorf("database down: %v answered after %s, more than the request timeout %s", rep, rep.elapsed, requestTimeout)
			}
			if r.path == "/healthz" {
				if rep.status != http.StatusOK {
					t.Errorf("database down: %v, want 200: the process is alive", rep)
				}
				continue
			}
			if err := problemError(rep, http.StatusServiceUnavailable, "unavailable"); err != nil {
				t.Errorf("database down: %v", err)
			}
		}
	}
	t.Logf("%d probes while the database was down", n)
}

// waitRecovered waits until /readyz answers 200 and a write succeeds, and returns how long
// that took. Meanwhile every answer must be 2xx or a proper 503.
func waitRecovered(t *testing.T, a *api, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for i := 0; ; i++ {
		ready, err1 := a.do(context.Background(), "GET", "/readyz", "")
		write, err2 := a.do(context.Background(), "PUT", jobPath(fmt.Sprintf("recovered-%d", i)), `{"participants":["p"]}`)
		if err1 == nil && err2 == nil && ready.status == http.StatusOK && write.status == http.StatusCreated {
			return time.Since(start)
		}
		for _, rep := range []reply{ready, write} {
			if rep.status != 0 && rep.status >= 300 {
				if err := problemError(rep, http.StatusServiceUnavailable, "unavailable"); err != nil {
					t.Errorf("recovering: %v", err)
				}
			}
		}
		if time.Since(start) > limit {
			t.Fatalf("the coordinator did not recover within %s of the database's return: %v %v %v %v", limit, ready, err1, write, err2)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
