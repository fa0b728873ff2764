package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twophase/coordinator/clients/go/coordinatorclient"
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

// jobParticipants is what newCredentials makes participant tokens for.
func jobParticipants(jobs []workloadJob) map[string][]string {
	out := map[string][]string{}
	for _, j := range jobs {
		out[j.name] = j.participants
	}
	return out
}

// checkLogsHoldNoSecret fails the test if a secret of cr appears in what the coordinators
// logged (the last lines each keeps).
func checkLogsHoldNoSecret(t testing.TB, cr *credentials, coords ...*harness.Coordinator) {
	t.Helper()
	for i, c := range coords {
		checkNoSecrets(t, fmt.Sprintf("the log of coordinator %d", i+1), c.Logs(), cr.secrets())
	}
}

func jobNames(jobs []workloadJob) []string {
	var out []string
	for _, j := range jobs {
		out = append(out, j.name)
	}
	return out
}

// TestFaultCoordinatorKills kills coordinators with SIGKILL at random moments while
// clients vote, ack, prepare, commit and abort, and restarts them at once. Two coordinator
// processes share the database and each attempt of a request goes to either (as behind a
// load balancer), so rule 8 is under fire too. The clients retry every request unchanged
// (the same body, the same Idempotency-Key) until they get a definitive answer. Afterwards
// every answer any of them received must still hold, and each job's history of requests
// and answers must fit the rules (history.check).
//
// Authentication is on, as in the fault tests below: each participant sends its own
// participant token, the driver the trigger's to open checkpoints and the operator's to
// decide them (credentials). A restarted coordinator must accept them all at once.
func TestFaultCoordinatorKills(t *testing.T) {
	t.Parallel()
	cluster := harness.StartCluster(t)
	dbURL := cluster.NewDatabase(t)
	adminFile, _ := harness.AdminTokenFile(t)
	coords := []*harness.Coordinator{
		harness.StartCoordinator(t, dbURL, "--admin-token-file", adminFile, "--sweep-interval", "100ms", "--request-timeout", "3s"),
		harness.StartCoordinator(t, dbURL, "--admin-token-file", adminFile, "--sweep-interval", "100ms", "--request-timeout", "3s"),
	}
	jobs := faultJobs("kill")
	cred := newCredentials(t, coords[0], jobParticipants(jobs), coords[1])
	a := cred.api(coords[0])
	w := newWorkload(t, []*api{a, cred.api(coords[1])}, 8*time.Second, jobs...)
	w.start()

	kills := envInt(t, "COORDINATOR_TEST_E2E_KILLS", 25)
	rng := newRand(t)
	start := time.Now()
	var settling []time.Duration // how long each killed process's database sessions took to end
	for i := 0; i < kills && !w.ledger.failed(); i++ {
		time.Sleep(time.Duration(20+rng.IntN(280)) * time.Millisecond)
		victims := coords[rng.IntN(2):][:1]
		if rng.IntN(4) == 0 {
			victims = coords // both at once: nobody answers for a moment
		}
		for _, c := range victims {
			// Once the killed process's database sessions are gone, what it was doing is
			// done: the history then knows when its lost requests took effect, if at all.
			killed := time.Now()
			c.KillSettled()
			w.history.ended(c.BaseURL)
			settling = append(settling, time.Since(killed))
		}
		time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
		for _, c := range victims {
			c.Restart()
		}
	}
	t.Logf("%d rounds of SIGKILL (%d processes killed) in %s", kills, coords[0].Starts()+coords[1].Starts()-2,
		time.Since(start).Round(time.Millisecond))
	if len(settling) > 0 {
		slices.Sort(settling)
		t.Logf("a killed process's database sessions ended %s after the kill (median; longest %s)",
			settling[len(settling)/2].Round(time.Millisecond), settling[len(settling)-1].Round(time.Millisecond))
	}
	time.Sleep(500 * time.Millisecond)
	w.stop()
	for _, c := range coords {
		c.Stop() // a graceful stop exits 0
	}
	coords[0].Restart()

	w.ledger.verify(t, a, jobNames(jobs)...)
	w.checkHistory(t, a)
	t.Logf("%s; %d retries", w.ledger.stats(), w.retries.Load())
	if opened, votes, acks, commits := w.ledger.counts(); opened < 10 || votes < 20 || acks < 5 || commits < 3 {
		t.Errorf("too little progress under kills to prove anything: %s", w.ledger.stats())
	}
	for _, j := range jobs {
		checkDecidedBy(t, cred, j.name, a.mustListAll(t, j.name))
	}
	checkLogsHoldNoSecret(t, cred, coords...)
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
	dbURL := cluster.NewDatabase(t)
	adminFile, _ := harness.AdminTokenFile(t)
	coord := harness.StartCoordinator(t, dbURL, "--admin-token-file", adminFile, "--sweep-interval", "100ms", "--request-timeout", requestTimeout.String())
	other := harness.StartCoordinator(t, dbURL, "--admin-token-file", adminFile, "--sweep-interval", "100ms", "--request-timeout", requestTimeout.String())
	jobs := faultJobs("crash")
	tokens := jobParticipants(jobs)
	tokens["probe"] = []string{"p"}
	// Tokens are kept in memory: while the database is down they still authenticate, and
	// requests get as far as the database (503), not 401.
	cred := newCredentials(t, coord, tokens, other)
	a, b := cred.api(coord), cred.api(other)
	w := newWorkload(t, []*api{a, b}, requestTimeout+3*time.Second, jobs...)

	// A job the probes write to during the outages: nothing may change in it.
	probe := a.setupJob(t, "probe", `{"participants":["p"],"max_concurrent_checkpoints":5}`, "p")
	a.prepare(t, "probe", "")
	probeBefore := rawGet(t, a, jobPath("probe")) + rawGet(t, a, jobPath("probe")+"/checkpoints")
	w.start()

	for crash := 1; crash <= 2; crash++ {
		time.Sleep(800 * time.Millisecond)
		cluster.Crash()
		probeOutage(t, []*api{a, b}, requestTimeout, 1500*time.Millisecond, probe["p"])
		cluster.Start()
		for i, via := range []*api{a, b} {
			recovered := waitRecovered(t, via, 20*time.Second)
			t.Logf("crash %d: coordinator %d served writes %s after the database accepted connections again",
				crash, i+1, recovered.Round(time.Millisecond))
			if recovered > 10*time.Second {
				t.Errorf("crash %d: coordinator %d took %s to recover", crash, i+1, recovered)
			}
		}
	}
	time.Sleep(800 * time.Millisecond)
	w.stop()

	if after := rawGet(t, a, jobPath("probe")) + rawGet(t, a, jobPath("probe")+"/checkpoints"); after != probeBefore {
		t.Errorf("requests answered 503 while the database was down changed the state:\nbefore %s\nafter  %s", probeBefore, after)
	}
	w.ledger.verify(t, a, jobNames(jobs)...)
	w.checkHistory(t, a)
	t.Logf("%s; %d retries, %d answers 503", w.ledger.stats(), w.retries.Load(), w.got503.Load())

	// After the outages, a waiter on one coordinator is still woken by a decision taken
	// on the other (their LISTEN connections were cut; rule 8).
	checkWokenAcross(t, a, b, "probe", 1, probe["p"])
	if w.got503.Load() == 0 {
		t.Errorf("the workload never saw a 503: the outages did not reach it")
	}
	if opened, votes, _, commits := w.ledger.counts(); opened < 5 || votes < 10 || commits < 2 {
		t.Errorf("too little progress across the crashes to prove anything: %s", w.ledger.stats())
	}
	for _, j := range append(jobNames(jobs), "probe") {
		checkDecidedBy(t, cred, j, a.mustListAll(t, j))
	}
	checkLogsHoldNoSecret(t, cred, coord, other)
}

// checkWokenAcross long-polls checkpoint id of job (preparing, its one participant p
// registered with epoch) on b, votes it prepared through a, and checks that the waiter on b
// is woken with the decision within 5 s.
func checkWokenAcross(t *testing.T, a, b *api, job string, id, epoch int64) {
	t.Helper()
	woken := make(chan reply, 1)
	go func() {
		rep, _ := b.do(context.Background(), "GET", fmt.Sprintf("%s?wait_ms=20000", cpPath(job, id)), "")
		woken <- rep
	}()
	time.Sleep(300 * time.Millisecond)
	a.vote(t, job, id, "p", epoch, "")
	decided := time.Now()
	select {
	case rep := <-woken:
		var cp checkpoint
		decode(t, rep, &cp)
		if cp.Status != "committing" {
			t.Errorf("the waiter on the other coordinator got %v", rep)
		}
		t.Logf("the waiter on the other coordinator was woken %s after the decision", time.Since(decided).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Errorf("the waiter on the other coordinator was not woken within 5 s of the decision")
	}
}

// probeOutage sends every kind of request for d while the database is down: each must be
// answered within the request timeout (plus slack) by 503 problem+json with Retry-After,
// except /healthz (200: the process is alive).
func probeOutage(t *testing.T, apis []*api, requestTimeout, d time.Duration, epoch int64) {
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
		for i, r := range probes {
			n++
			ctx, cancel := context.WithTimeout(context.Background(), requestTimeout+10*time.Second)
			rep, err := apis[(n+i)%len(apis)].send(ctx, r)
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

// TestFaultCoordinatorDownAcrossDeadlines stops the coordinator (gracefully, then with
// SIGKILL) while checkpoints are preparing, waits past their deadlines, and starts it
// again: every expired preparing checkpoint must be aborted before the coordinator serves
// anything (decided no later than its "listening" line, at or after its deadline), with a
// reason naming who did not vote; nothing else may change.
func TestFaultCoordinatorDownAcrossDeadlines(t *testing.T) {
	t.Parallel()
	cluster := harness.StartCluster(t)
	// The longest sweep interval, so that the periodic sweeper cannot be what aborts them.
	coord := harness.StartAuthCoordinator(t, cluster.NewDatabase(t), "--sweep-interval", "1s")
	const lateJobs = 8
	tokens := map[string][]string{}
	for _, name := range []string{"cascade", "manual", "decided", "keep"} {
		tokens[name] = []string{"sink-alpha", "sink-bravo"}
	}
	for i := range lateJobs {
		tokens[fmt.Sprintf("late-%d", i)] = []string{"sink-alpha", "sink-bravo"}
	}
	cred := newCredentials(t, coord, tokens)
	a := cred.api(coord)
	// Every request is recorded, and the history checked against the rules at the end
	// (history.check): the aborts the deadlines take while no coordinator runs included.
	hist := newHistory()
	for name := range tokens {
		auto, maxConcurrent := name != "manual", 1
		if name == "cascade" {
			maxConcurrent = 3
		}
		hist.addJob(name, tokens[name], auto, maxConcurrent)
	}
	a.hist = hist
	epochs := map[string]map[string]int64{}
	for i := range lateJobs {
		name := fmt.Sprintf("late-%d", i)
		epochs[name] = a.setupJob(t, name, `{"participants":["sink-alpha","sink-bravo"]}`, "sink-alpha", "sink-bravo")
	}
	epochs["cascade"] = a.setupJob(t, "cascade", `{"participants":["sink-alpha","sink-bravo"],"max_concurrent_checkpoints":3}`, "sink-alpha", "sink-bravo")
	epochs["manual"] = a.setupJob(t, "manual", `{"participants":["sink-alpha","sink-bravo"],"auto_commit":false}`, "sink-alpha", "sink-bravo")
	epochs["decided"] = a.setupJob(t, "decided", `{"participants":["sink-alpha","sink-bravo"]}`, "sink-alpha", "sink-bravo")
	epochs["keep"] = a.setupJob(t, "keep", `{"participants":["sink-alpha","sink-bravo"]}`, "sink-alpha", "sink-bravo")

	for round, stop := range []func(){coord.Stop, coord.Kill} {
		const short = 2400 // ms: time to set everything up before the first deadline (a loaded machine took over 900 ms)
		began := time.Now()
		body := fmt.Sprintf(`{"timeout_ms":%d}`, short)
		expiring := map[cpKey]bool{} // aborted by the deadline of its own
		cascaded := map[cpKey]bool{} // aborted because a lower one was
		open := map[cpKey]bool{}     // must stay as they are
		var lastDeadline time.Time   // of the expiring ones
		expire := func(job string, cp checkpoint) {
			expiring[cpKey{job, cp.Id}] = true
			if cp.Deadline.After(lastDeadline) {
				lastDeadline = cp.Deadline
			}
		}
		for i := range lateJobs {
			name := fmt.Sprintf("late-%d", i)
			cp := a.prepare(t, name, body)
			a.vote(t, name, cp.Id, "sink-alpha", epochs[name]["sink-alpha"], `["a"]`)
			expire(name, cp)
		}
		// cascade: a long one, a short one with one vote, a long one above it.
		c1 := a.prepare(t, "cascade", `{"timeout_ms":60000}`)
		c2 := a.prepare(t, "cascade", body)
		a.vote(t, "cascade", c2.Id, "sink-bravo", epochs["cascade"]["sink-bravo"], "")
		c3 := a.prepare(t, "cascade", `{"timeout_ms":60000}`)
		open[cpKey{"cascade", c1.Id}], cascaded[cpKey{"cascade", c3.Id}] = true, true
		expire("cascade", c2)
		// manual: every vote in, no commit (auto_commit off).
		m := a.prepare(t, "manual", body)
		a.vote(t, "manual", m.Id, "sink-alpha", epochs["manual"]["sink-alpha"], "")
		a.vote(t, "manual", m.Id, "sink-bravo", epochs["manual"]["sink-bravo"], "")
		expire("manual", m)
		// decided: committing before its deadline, so the deadline no longer matters.
		d := a.prepare(t, "decided", body)
		a.vote(t, "decided", d.Id, "sink-alpha", epochs["decided"]["sink-alpha"], "")
		if cp := a.vote(t, "decided", d.Id, "sink-bravo", epochs["decided"]["sink-bravo"], ""); cp.Status != "committing" {
			t.Fatalf("decided: %s", cp.Status)
		}
		open[cpKey{"decided", d.Id}] = true
		k := a.prepare(t, "keep", `{"timeout_ms":60000}`)
		open[cpKey{"keep", k.Id}] = true
		if el := time.Since(began); el > short*time.Millisecond*3/4 {
			t.Fatalf("setting up took %s, too close to the %dms deadlines to prove anything", el, short)
		}
		before := map[cpKey]string{}
		for key := range open {
			before[key] = rawGet(t, a, cpPath(key.job, key.id))
		}

		stop()
		// Restart once the last of them has expired (the ones prepared last, on a loaded
		// machine up to 3/4 of short after the first): the start-up sweep must find them all.
		time.Sleep(time.Until(lastDeadline.Add(300 * time.Millisecond)))
		coord.Restart()
		listening := coord.ListeningAt()

		// The first request: nothing expired is still listed as preparing.
		var page struct{ Items []checkpoint }
		a.mustDo(t, "GET", "/v1/checkpoints?status=preparing&limit=1000", "", 200, &page)
		for _, cp := range page.Items {
			if expiring[cpKey{cp.Job, cp.Id}] || cascaded[cpKey{cp.Job, cp.Id}] {
				t.Errorf("round %d: %s/%d is still preparing after the restart, deadline %v", round, cp.Job, cp.Id, cp.Deadline)
			}
		}
		for key := range expiring {
			cp := a.get(t, key.job, key.id)
			if cp.Status != "aborted" || cp.DecidedAt == nil {
				t.Errorf("round %d: %s/%d is %s after a restart past its deadline", round, key.job, key.id, cp.Status)
				continue
			}
			if cp.DecidedAt.Before(cp.Deadline) {
				t.Errorf("round %d: %s/%d aborted at %v, before its deadline %v", round, key.job, key.id, cp.DecidedAt, cp.Deadline)
			}
			if cp.DecidedBy != nil {
				t.Errorf("round %d: %s/%d aborted by its deadline, decided_by %q: no token's request decided it", round, key.job, key.id, *cp.DecidedBy)
			}
			// slog writes times to the millisecond.
			if cp.DecidedAt.After(listening.Add(time.Millisecond)) {
				t.Errorf("round %d: %s/%d aborted at %v, after the coordinator began to serve at %v", round, key.job, key.id, cp.DecidedAt, listening)
			}
			reason := ""
			if cp.AbortReason != nil {
				reason = *cp.AbortReason
			}
			for _, p := range cp.Participants {
				if named := strings.Contains(reason, p.Name); named != (p.Vote == nil) {
					t.Errorf("round %d: %s/%d: reason %q, %s voted %v", round, key.job, key.id, reason, p.Name, p.Vote)
				}
			}
		}
		for key := range cascaded {
			cp := a.get(t, key.job, key.id)
			if cp.Status != "aborted" || cp.DecidedAt == nil || cp.DecidedAt.After(listening.Add(time.Millisecond)) {
				t.Errorf("round %d: %s/%d above an expired checkpoint: %s at %v (serving from %v)", round, key.job, key.id, cp.Status, cp.DecidedAt, listening)
			}
			if cp.DecidedBy != nil {
				t.Errorf("round %d: %s/%d aborted in the cascade of a deadline, decided_by %q", round, key.job, key.id, *cp.DecidedBy)
			}
		}
		for key, was := range before {
			if now := rawGet(t, a, cpPath(key.job, key.id)); now != was {
				t.Errorf("round %d: %s/%d changed across the restart:\n%s\n%s", round, key.job, key.id, was, now)
			}
		}
		// A late vote is refused; new work goes on with the next id.
		p := a.mustProblem(t, request{method: "PUT", path: votePath("late-0", int64(round+1), "sink-bravo"),
			body: voteBody(epochs["late-0"]["sink-bravo"], "")}, 409, "already_decided")
		if p.Checkpoint == nil || participant(*p.Checkpoint, "sink-bravo").Vote != nil {
			t.Errorf("round %d: late vote recorded: %+v", round, p.Checkpoint)
		}
		// Clean up for the next round: settle what is open.
		a.mustDo(t, "POST", cpPath("cascade", c1.Id)+"/abort", "", 200, nil)
		a.mustDo(t, "POST", cpPath("keep", k.Id)+"/abort", "", 200, nil)
	}
	for i := range lateJobs {
		if cp := a.prepare(t, fmt.Sprintf("late-%d", i), ""); cp.Id != 3 {
			t.Errorf("late-%d: next checkpoint %d, want 3", i, cp.Id)
		}
	}
	if cp := a.get(t, "decided", 1); cp.DecidedBy == nil || *cp.DecidedBy != participantTokenName("decided", "sink-bravo") {
		t.Errorf("decided/1 committed by sink-bravo's vote, decided_by %v", cp.DecidedBy)
	}
	for name := range tokens {
		a.mustListAll(t, name)
	}
	hist.check(t)
	checkLogsHoldNoSecret(t, cred, coord)
}

// TestFaultParticipantRestarts restarts a participant (registers it again) while it owes
// a commit, a rollback, a vote it never cast and a vote it did cast: its old epoch is
// fenced (late votes and acks refused, even repeated word for word, changing nothing),
// what it had not voted on is aborted (and everything above it), and pending, from the
// registration itself and from GET, lists exactly what it owes. Then the old and the new
// incarnation race.
func TestFaultParticipantRestarts(t *testing.T) {
	t.Parallel()
	cluster := harness.StartCluster(t)
	coord := harness.StartAuthCoordinator(t, cluster.NewDatabase(t))
	// The old and the new incarnation of a participant send the same token: it is the
	// epoch that fences the old one.
	cred := newCredentials(t, coord, map[string][]string{"restart": {"sink-a", "sink-b", "source"}, "race-restart": {"w", "v"}})
	a := cred.api(coord)
	// Every request of the test is recorded, and the history checked against the rules
	// at the end (history.check).
	hist := newHistory()
	hist.addJob("restart", []string{"sink-a", "sink-b", "source"}, true, 5)
	hist.addJob("race-restart", []string{"w", "v"}, true, 1)
	a.hist = hist

	e := a.setupJob(t, "restart", `{"participants":["sink-a","sink-b","source"],"max_concurrent_checkpoints":5}`, "sink-a", "sink-b", "source")
	old := e["sink-a"]
	a.prepare(t, "restart", "")
	a.prepare(t, "restart", "")
	// 1: committing; sink-a has not applied it.
	a.vote(t, "restart", 1, "sink-a", old, `[{"txn":"a-1"}]`)
	a.vote(t, "restart", 1, "sink-b", e["sink-b"], `[{"txn":"b-1"}]`)
	a.vote(t, "restart", 1, "source", e["source"], `[{"offset":100}]`)
	a.ack(t, "restart", 1, "sink-b", e["sink-b"])
	a.ack(t, "restart", 1, "source", e["source"])
	// 2: aborted by sink-b; sink-a prepared and must roll back.
	a.vote(t, "restart", 2, "sink-a", old, `[{"txn":"a-2"}]`)
	a.mustDo(t, "PUT", votePath("restart", 2, "sink-b"), abortVoteBody(e["sink-b"], "disk full"), 200, nil)
	// 3: the others voted, sink-a did not. 4: sink-a voted, the others did not.
	a.prepare(t, "restart", "")
	a.prepare(t, "restart", "")
	a.vote(t, "restart", 3, "sink-b", e["sink-b"], `[{"txn":"b-3"}]`)
	a.vote(t, "restart", 3, "source", e["source"], `[{"offset":300}]`)
	a.vote(t, "restart", 4, "sink-a", old, `[{"txn":"a-4"}]`)

	reg := a.register(t, "restart", "sink-a")
	if reg.Epoch != old+1 {
		t.Fatalf("new epoch %d after %d", reg.Epoch, old)
	}
	type owed struct {
		id           int64
		action       string
		committables string
	}
	want := []owed{{1, "commit", `[{"txn":"a-1"}]`}, {2, "abort", `[{"txn":"a-2"}]`}, {4, "abort", `[{"txn":"a-4"}]`}}
	check := func(from string, items []coordinatorclient.PendingItem) {
		t.Helper()
		var got []owed
		for _, it := range items {
			got = append(got, owed{it.Checkpoint, string(it.Action), string(it.Committables)})
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: pending %v, want %v", from, got, want)
		}
	}
	check("register", reg.Pending)
	pe := a.pending(t, "restart", "sink-a")
	check("GET pending", pe.Items)
	if pe.Epoch != reg.Epoch {
		t.Errorf("pending epoch %d, want %d", pe.Epoch, reg.Epoch)
	}
	if cp := a.get(t, "restart", 3); cp.Status != "aborted" || cp.AbortReason == nil || !strings.Contains(*cp.AbortReason, "sink-a") {
		t.Errorf("checkpoint 3 (sink-a had not voted): %+v", cp)
	} else if cp.DecidedBy == nil || *cp.DecidedBy != participantTokenName("restart", "sink-a") {
		t.Errorf("checkpoint 3, aborted by sink-a's registration: decided_by %v", cp.DecidedBy)
	}
	if cp := a.get(t, "restart", 4); cp.Status != "aborted" || cp.AbortReason == nil || !strings.Contains(*cp.AbortReason, "3") {
		t.Errorf("checkpoint 4 (above 3): %+v", cp)
	}
	if cp := a.get(t, "restart", 1); cp.Status != "committing" {
		t.Errorf("checkpoint 1: the restart must not touch a decided checkpoint: %s", cp.Status)
	} else if cp.DecidedBy == nil || *cp.DecidedBy != participantTokenName("restart", "source") {
		t.Errorf("checkpoint 1, committed by source's vote: decided_by %v", cp.DecidedBy)
	}
	// The others still owe nothing new; source must roll back 3.
	if pe := a.pending(t, "restart", "source"); len(pe.Items) != 1 || pe.Items[0].Checkpoint != 3 || pe.Items[0].Action != "abort" {
		t.Errorf("source pending: %+v", pe.Items)
	}

	// The old incarnation is fenced, even repeating its own accepted requests.
	a.prepare(t, "restart", "")
	before := rawGet(t, a, jobPath("restart")+"/checkpoints")
	for _, r := range []request{
		{method: "PUT", path: votePath("restart", 4, "sink-a"), body: voteBody(old, `[{"txn":"a-4"}]`)},
		{method: "PUT", path: votePath("restart", 5, "sink-a"), body: voteBody(old, `[{"txn":"a-5"}]`)},
		{method: "PUT", path: votePath("restart", 5, "sink-a"), body: abortVoteBody(old, "late")},
		{method: "PUT", path: ackPath("restart", 1, "sink-a"), body: ackBody(old)},
		{method: "PUT", path: ackPath("restart", 2, "sink-a"), body: ackBody(old)},
	} {
		p := a.mustProblem(t, r, 409, "fenced")
		if p.Checkpoint == nil {
			t.Errorf("%s %s: fenced without the checkpoint", r.method, r.path)
		}
	}
	if after := rawGet(t, a, jobPath("restart")+"/checkpoints"); after != before {
		t.Errorf("fenced requests changed checkpoints:\n%s\n%s", before, after)
	}
	// The new one pays what it owes, and votes.
	if cp := a.ack(t, "restart", 1, "sink-a", reg.Epoch); cp.Status != "committed" {
		t.Errorf("checkpoint 1 after the last ack: %s", cp.Status)
	}
	a.ack(t, "restart", 2, "sink-a", reg.Epoch)
	a.ack(t, "restart", 4, "sink-a", reg.Epoch)
	a.vote(t, "restart", 5, "sink-a", reg.Epoch, `[{"txn":"a-5"}]`)
	a.vote(t, "restart", 5, "sink-b", e["sink-b"], "")
	if cp := a.vote(t, "restart", 5, "source", e["source"], ""); cp.Status != "committing" || *participant(cp, "sink-a").Epoch != reg.Epoch {
		t.Errorf("checkpoint 5: %+v", cp)
	}
	if pe := a.pending(t, "restart", "sink-a"); len(pe.Items) != 1 || pe.Items[0].Checkpoint != 5 {
		t.Errorf("sink-a pending at the end: %+v", pe.Items)
	}

	// The old and the new incarnation race: the old one votes (and then acks) while the
	// new one registers. Either the vote came first (it counts, the checkpoint stays
	// preparing) or the registration did (the vote is fenced, the checkpoint aborted);
	// after the registration answered, the old epoch gets nothing but 409 fenced.
	e = a.setupJob(t, "race-restart", `{"participants":["w","v"]}`, "w", "v")
	epoch := e["w"]
	outcomes := map[string]int{}
	for round := int64(1); round <= 20; round++ {
		a.prepare(t, "race-restart", "")
		body := voteBody(epoch, fmt.Sprintf(`["w-%d"]`, round))
		var vote reply
		var verr error
		var reg coordinatorclient.Registration
		var wg, start sync.WaitGroup
		start.Add(1)
		wg.Go(func() {
			start.Wait()
			vote, verr = a.do(context.Background(), "PUT", votePath("race-restart", round, "w"), body)
		})
		start.Done()
		reg = a.register(t, "race-restart", "w")
		wg.Wait()
		if verr != nil {
			t.Fatal(verr)
		}
		cp := a.get(t, "race-restart", round)
		switch {
		case vote.status == 200:
			outcomes["vote first"]++
			if cp.Status != "preparing" || participant(cp, "w").Vote == nil || *participant(cp, "w").Epoch != epoch {
				t.Errorf("round %d: the vote was accepted but the checkpoint is %s, w %+v", round, cp.Status, participant(cp, "w"))
			}
		case vote.status == 409:
			outcomes["registration first"]++
			checkProblem(t, vote, 409, "fenced")
			if cp.Status != "aborted" || participant(cp, "w").Vote != nil {
				t.Errorf("round %d: the vote was fenced but the checkpoint is %s, w %+v", round, cp.Status, participant(cp, "w"))
			}
		default:
			t.Fatalf("round %d: %v", round, vote)
		}
		a.mustProblem(t, request{method: "PUT", path: votePath("race-restart", round, "w"), body: body}, 409, "fenced")
		epoch = reg.Epoch
		if cp.Status == "preparing" {
			a.vote(t, "race-restart", round, "v", e["v"], "")
			// The old incarnation's ack races nothing now: it is fenced; the new one acks.
			a.mustProblem(t, request{method: "PUT", path: ackPath("race-restart", round, "w"), body: ackBody(epoch - 1)}, 409, "fenced")
			a.ack(t, "race-restart", round, "w", epoch)
			a.ack(t, "race-restart", round, "v", e["v"])
		}
	}
	t.Logf("outcomes: %v", outcomes)
	a.mustListAll(t, "restart")
	a.mustListAll(t, "race-restart")
	hist.check(t)
	checkLogsHoldNoSecret(t, cred, coord)
}

// TestFaultCutRequests cuts requests mid-flight (client timeouts of a few milliseconds,
// connections closed right after the request or in the middle of its body, with and
// without a TCP reset) and then retries them unchanged until they answer: no checkpoint,
// vote or ack is ever duplicated, changed or lost, and a body cut short changes nothing.
func TestFaultCutRequests(t *testing.T) {
	t.Parallel()
	cluster := harness.StartCluster(t)
	coord := harness.StartAuthCoordinator(t, cluster.NewDatabase(t))
	cred := newCredentials(t, coord, map[string][]string{"cut": {"a", "b"}})
	a := cred.api(coord)
	rng := newRand(t)
	a.mustDo(t, "PUT", jobPath("cut"), `{"participants":["a","b"],"checkpoint_timeout_ms":60000}`, http.StatusCreated, nil)
	// Every request is recorded, the cut ones with their outcome unknown, and the history
	// checked against the rules at the end (history.check).
	hist := newHistory()
	hist.addJob("cut", []string{"a", "b"}, true, 1)
	e := map[string]int64{}
	for _, p := range []string{"a", "b"} {
		rep, err := hist.send(context.Background(), a, request{method: "POST", path: registerPath("cut", p)})
		var reg coordinatorclient.Registration
		if err != nil || rep.status != http.StatusOK || json.Unmarshal(rep.body, &reg) != nil {
			t.Fatalf("register %s: %v %v", p, rep, err)
		}
		e[p] = reg.Epoch
	}

	cuts := 0
	// send cuts r a few times, then sends it until it is answered, and returns the answer.
	send := func(r request, want int) reply {
		t.Helper()
		for range 1 + rng.IntN(3) {
			call := hist.now()
			cutRequest(t, a, coord.Addr, r, rng)
			hist.record(r, call, reply{}, errCut, hist.now())
			cuts++
		}
		call := hist.now()
		rep := a.must(t, r, want, nil)
		hist.record(r, call, rep, nil, hist.now())
		return rep
	}
	votedAt := map[partKey]time.Time{}
	ackedAt := map[partKey]time.Time{}
	const rounds = 20
	for round := int64(1); round <= rounds; round++ {
		key := map[string]string{"Idempotency-Key": fmt.Sprintf("cut-%d", round)}
		var cp checkpoint
		decode(t, send(request{method: "POST", path: jobPath("cut") + "/checkpoints", body: `{"timeout_ms":60000}`, header: key}, 201), &cp)
		if cp.Id != round {
			t.Fatalf("round %d: key %s opened checkpoint %d", round, key["Idempotency-Key"], cp.Id)
		}
		if round%5 == 0 {
			decode(t, send(request{method: "POST", path: cpPath("cut", round) + "/abort", body: `{"reason":"cut"}`}, 200), &cp)
			if cp.Status != "aborted" || *cp.AbortReason != "cut" {
				t.Errorf("round %d: abort: %+v", round, cp)
			}
			continue
		}
		for _, p := range []string{"a", "b"} {
			decode(t, send(request{method: "PUT", path: votePath("cut", round, p), body: voteBody(e[p], fmt.Sprintf(`[{"p":%q,"round":%d}]`, p, round))}, 200), &cp)
			votedAt[partKey{"cut", round, p}] = *participant(cp, p).VotedAt
		}
		if cp.Status != "committing" {
			t.Fatalf("round %d: %s after both votes", round, cp.Status)
		}
		for _, p := range []string{"a", "b"} {
			decode(t, send(request{method: "PUT", path: ackPath("cut", round, p), body: ackBody(e[p])}, 200), &cp)
			ackedAt[partKey{"cut", round, p}] = *participant(cp, p).AckedAt
		}
	}
	cps := a.mustListAll(t, "cut")
	if len(cps) != rounds {
		t.Errorf("%d checkpoints for %d Idempotency-Keys", len(cps), rounds)
	}
	for _, cp := range cps {
		for _, p := range cp.Participants {
			k := partKey{"cut", cp.Id, p.Name}
			if at, ok := votedAt[k]; ok && (p.VotedAt == nil || !p.VotedAt.Equal(at) || string(p.Committables) != fmt.Sprintf(`[{"p":%q,"round":%d}]`, p.Name, cp.Id)) {
				t.Errorf("%d/%s: vote %v %s, answered at %v", cp.Id, p.Name, p.VotedAt, p.Committables, at)
			}
			if at, ok := ackedAt[k]; ok && (p.AckedAt == nil || !p.AckedAt.Equal(at)) {
				t.Errorf("%d/%s: acked at %v, answered %v", cp.Id, p.Name, p.AckedAt, at)
			}
		}
		want := "committed"
		if cp.Id%5 == 0 {
			want = "aborted"
		}
		if string(cp.Status) != want {
			t.Errorf("checkpoint %d: %s, want %s", cp.Id, cp.Status, want)
		}
	}
	rep, err := hist.send(context.Background(), a, request{method: "GET", path: jobPath("cut") + "/checkpoints?limit=1000"})
	if err != nil || rep.status != http.StatusOK {
		t.Fatalf("list: %v %v", rep, err)
	}
	hist.check(t)
	// Bodies cut short never reach the protocol.
	a.prepare(t, "cut", "")
	before := rawGet(t, a, jobPath("cut")+"/checkpoints")
	for range 10 {
		cutBody(t, a, coord.Addr, request{method: "PUT", path: votePath("cut", rounds+1, "a"), body: voteBody(e["a"], `["half"]`)})
		cutBody(t, a, coord.Addr, request{method: "POST", path: cpPath("cut", rounds+1) + "/abort", body: `{"reason":"half"}`})
		cutBody(t, a, coord.Addr, request{method: "POST", path: jobPath("cut") + "/checkpoints", body: `{"timeout_ms":1000}`})
	}
	if after := rawGet(t, a, jobPath("cut")+"/checkpoints"); after != before {
		t.Errorf("bodies cut short changed the state:\n%s\n%s", before, after)
	}
	a.mustDo(t, "GET", "/readyz", "", 200, nil)
	t.Logf("%d requests cut", cuts)
	checkDecidedBy(t, cred, "cut", a.mustListAll(t, "cut"))
	checkLogsHoldNoSecret(t, cred, coord)
}

func decode(t testing.TB, rep reply, v any) {
	t.Helper()
	if err := json.Unmarshal(rep.body, v); err != nil {
		t.Fatalf("%v: %v", rep, err)
	}
}

// rawRequest is r as HTTP/1.1 bytes: the head and the body, with the token a sends it with.
func rawRequest(a *api, addr string, r request) (head, body []byte) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", r.method, r.path, addr)
	if token := a.cred.forRoute(r.method, r.path); token != "" {
		fmt.Fprintf(&b, "Authorization: Bearer %s\r\n", token)
	}
	if r.body != "" {
		fmt.Fprintf(&b, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(r.body))
	}
	for k, v := range r.header {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	b.WriteString("\r\n")
	return []byte(b.String()), []byte(r.body)
}

// errCut is the error a history records for a request cutRequest cut: its outcome is
// unknown.
var errCut = errors.New("request cut")

// cutRequest sends r and cuts it: by a client timeout of 0 to 15 ms, or by closing the
// connection (gracefully or with a reset) 0 to 5 ms after the whole request was written,
// before reading any answer.
func cutRequest(t testing.TB, a *api, addr string, r request, rng *rand.Rand) {
	t.Helper()
	if rng.IntN(3) == 0 {
		hc := &http.Client{Timeout: time.Duration(rng.IntN(15000)) * time.Microsecond}
		ctx := context.Background()
		_, _ = (&api{base: "http://" + addr, hc: hc, cred: a.cred}).send(ctx, r)
		return
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	head, body := rawRequest(a, addr, r)
	_, _ = conn.Write(append(head, body...))
	time.Sleep(time.Duration(rng.IntN(5000)) * time.Microsecond)
	if rng.IntN(2) == 0 {
		_ = conn.(*net.TCPConn).SetLinger(0) // RST instead of FIN
	}
	_ = conn.Close()
}

// cutBody sends r's head and half its body, then closes the connection.
func cutBody(t testing.TB, a *api, addr string, r request) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	head, body := rawRequest(a, addr, r)
	_, _ = conn.Write(append(head, body[:len(body)/2]...))
	time.Sleep(2 * time.Millisecond)
	_ = conn.Close()
}
