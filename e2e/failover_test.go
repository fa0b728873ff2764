package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twophase/coordinator/e2e/harness"
)

// TestFailoverUnderPatroni runs two coordinators on PostgreSQL under Patroni (a local etcd,
// a primary and a synchronous standby, synchronous_mode on), reached through a multi-host
// URL with target_session_attrs=read-write, with the fault tests' workload and ledger
// under load. It kills the primary's PostgreSQL twice (Patroni brings it back, or fails
// over) and once the whole primary node, Patroni and PostgreSQL (Patroni fails over to the
// standby, and the node rejoins as a standby). Asserted: no acknowledged write lost and no
// decision reversed (the ledger), every refusal meanwhile a 503 problem with Retry-After,
// writes served again within 10 s of a primary answering, a long-poll held across a
// failover answered by its wait_ms, a waiter on one coordinator woken by a decision through
// the other after the failovers, tokens created and revoked after them reaching both
// coordinators, and an event stream resumed after the failovers missing no status change.
func TestFailoverUnderPatroni(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Patroni")
	}
	t.Parallel()
	const requestTimeout = 2 * time.Second
	pc := harness.StartPatroni(t, true)
	adminFile, _ := harness.AdminTokenFile(t)
	args := []string{"--admin-token-file", adminFile, "--sweep-interval", "100ms", "--request-timeout", requestTimeout.String()}
	coord := harness.StartCoordinator(t, pc.URL, args...)
	other := harness.StartCoordinator(t, pc.URL, args...)
	jobs := faultJobs("failover")
	tokens := jobParticipants(jobs)
	tokens["probe"] = []string{"p"}
	cred := newCredentials(t, coord, tokens, other)
	a, b := cred.api(coord), cred.api(other)
	w := newWorkload(t, []*api{a, b}, requestTimeout+5*time.Second, jobs...)
	probe := a.setupJob(t, "probe", `{"participants":["p"],"max_concurrent_checkpoints":10,"checkpoint_timeout_ms":600000}`, "p")

	// Every job's event stream, followed through the failovers (resumed on the other
	// coordinator whenever it ends).
	stream := collectStatuses(t, []*harness.Coordinator{coord, other})
	w.start()

	for kill := 1; kill <= 3; kill++ {
		time.Sleep(1500 * time.Millisecond)
		leader, err := pc.WaitLeader(30 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// A long-poll held across the failover: answered by its wait_ms, whatever happens.
		cp := a.prepare(t, "probe", "")
		held := make(chan time.Duration, 1)
		go func() {
			start := time.Now()
			_, _ = b.do(context.Background(), "GET", fmt.Sprintf("%s?wait_ms=4000", cpPath("probe", cp.Id)), "")
			held <- time.Since(start)
		}()
		time.Sleep(200 * time.Millisecond)

		whole := kill == 2
		killed := time.Now()
		if whole {
			leader.KillNode()
		} else {
			leader.KillPostgres()
		}
		// Until a primary answers, every refusal is a 503 problem with Retry-After.
		refused := 0
		for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			rep, err := a.do(context.Background(), "PUT", jobPath(fmt.Sprintf("during-%d-%d", kill, refused)), `{"participants":["p"]}`)
			if err != nil {
				t.Errorf("kill %d: a write while the primary is gone: %v", kill, err)
				continue
			}
			if rep.status == http.StatusCreated {
				break
			}
			if err := problemError(rep, http.StatusServiceUnavailable, "unavailable"); err != nil {
				t.Errorf("kill %d: %v", kill, err)
			}
			refused++
		}
		newLeader, err := pc.WaitLeader(60 * time.Second)
		if err != nil {
			t.Fatalf("kill %d: %v", kill, err)
		}
		primaryAt := time.Now()
		for i, via := range []*api{a, b} {
			recovered := waitRecovered(t, via, 40*time.Second)
			t.Logf("kill %d (%s of %s; primary now %s, %s after the kill): coordinator %d served writes %s after the primary answered; %d refusals seen",
				kill, map[bool]string{true: "the whole node", false: "PostgreSQL"}[whole], leader.Name, newLeader.Name,
				primaryAt.Sub(killed).Round(time.Millisecond), i+1, recovered.Round(time.Millisecond), refused)
			if recovered > 10*time.Second {
				t.Errorf("kill %d: coordinator %d took %s to serve writes after the primary answered", kill, i+1, recovered)
			}
		}
		select {
		case d := <-held:
			if d > 4*time.Second+requestTimeout+3*time.Second {
				t.Errorf("kill %d: a long-poll of wait_ms 4000 held across the failover answered after %s", kill, d)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("kill %d: a long-poll of wait_ms 4000 held across the failover is still waiting after 20 s", kill)
		}
		if whole {
			leader.Start() // it rejoins as the standby
		}
		if err := pc.WaitReplicaStreaming(120 * time.Second); err != nil {
			t.Fatalf("kill %d: %v", kill, err)
		}
	}
	time.Sleep(time.Second)
	w.stop()
	w.ledger.verify(t, a, jobNames(jobs)...)
	w.checkHistory(t, a)
	t.Logf("%s; %d retries, %d answers 503", w.ledger.stats(), w.retries.Load(), w.got503.Load())
	if opened, votes, _, commits := w.ledger.counts(); opened < 10 || votes < 20 || commits < 5 {
		t.Errorf("too little progress across the failovers to prove anything: %s", w.ledger.stats())
	}

	// After the failovers, a waiter on one coordinator is woken by a decision through the
	// other (both LISTEN on the new primary). The probe's checkpoints of the long-polls are
	// aborted first: a commit waits for every lower checkpoint to be decided.
	for id := int64(1); id <= 3; id++ {
		a.mustDo(t, "POST", cpPath("probe", id)+"/abort", `{"reason":"the long-poll probes are done"}`, http.StatusOK, nil)
	}
	last := a.prepare(t, "probe", "")
	checkWokenAcross(t, a, b, "probe", last.Id, probe["p"])

	// Tokens created and revoked after the failovers reach both coordinators.
	secret := coord.CreateToken(t, harness.TokenSpec{Name: "after-failover", Scopes: []string{"read"}})
	harness.AwaitTokens(t, []*harness.Coordinator{other}, secret)
	coord.RevokeToken(t, "after-failover")
	revoked := time.Now()
	for {
		ok, err := other.Accepts(secret)
		if err == nil && !ok {
			t.Logf("a token revoked after the failovers was refused by the other coordinator %s later", time.Since(revoked).Round(time.Millisecond))
			break
		}
		if time.Since(revoked) > 5*time.Second {
			t.Errorf("a token revoked after the failovers is still accepted by the other coordinator after 5 s")
			break
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The event stream showed every status change of every checkpoint, once, in order.
	stream.check(t, a, append(jobNames(jobs), "probe")...)
	if w.got503.Load() == 0 {
		t.Errorf("the workload never saw a 503: the failovers did not reach it")
	}
}

// statusCollector follows /v1/events as a watcher would: it keeps each checkpoint's status
// changes as shown, and when the stream ends, reconnects (to the next coordinator) with
// the last id it got.
type statusCollector struct {
	mu       sync.Mutex
	changes  map[string][]string // "job/id" -> statuses in the order shown
	resumes  int
	cancel   context.CancelFunc
	finished chan struct{}
}

func collectStatuses(t *testing.T, coords []*harness.Coordinator) *statusCollector {
	ctx, cancel := context.WithCancel(context.Background())
	c := &statusCollector{changes: map[string][]string{}, cancel: cancel, finished: make(chan struct{})}
	first := follow(t, coords[0], "/v1/events", "")
	go func() {
		defer close(c.finished)
		s, lastID := first, ""
		for i := 1; ; i++ {
			for e := range s.events {
				var cp checkpoint
				if err := json.Unmarshal([]byte(e.data), &cp); err != nil {
					continue
				}
				key := fmt.Sprintf("%s/%d", cp.Job, cp.Id)
				c.mu.Lock()
				if l := c.changes[key]; len(l) == 0 || l[len(l)-1] != string(cp.Status) {
					c.changes[key] = append(l, string(cp.Status))
				}
				c.mu.Unlock()
				lastID = e.id
			}
			if ctx.Err() != nil {
				return
			}
			time.Sleep(200 * time.Millisecond)
			c.mu.Lock()
			c.resumes++
			c.mu.Unlock()
			s = followQuietly(ctx, coords[i%len(coords)], lastID)
			if s == nil {
				time.Sleep(500 * time.Millisecond)
				s = &sse{events: make(chan sseEvent)}
				close(s.events)
			}
		}
	}()
	t.Cleanup(func() { cancel(); first.cancel() })
	return c
}

// followQuietly is follow without failing the test: nil when the stream cannot be opened.
func followQuietly(ctx context.Context, c *harness.Coordinator, lastID string) *sse {
	req, err := http.NewRequestWithContext(ctx, "GET", c.BaseURL+"/v1/events", nil)
	if err != nil {
		return nil
	}
	req.Header.Set("Last-Event-ID", lastID)
	if c.AdminToken != "" {
		req.Header.Set("Authorization", "Bearer "+c.AdminToken)
	}
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		return nil
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		return nil
	}
	s := &sse{events: make(chan sseEvent, 10000), cancel: func() {}}
	go readEvents(resp, s.events)
	return s
}

// check compares what the stream showed with every checkpoint of jobs as they stand:
// each checkpoint's status changes, all of them, once each, in order. A change made just
// before the checkpoints are listed may still be on its way, so the comparison is made
// again, with a fresh list, until it holds or 10 s have passed.
func (c *statusCollector) check(t *testing.T, a *api, jobs ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		checked, wrong := c.compare(t, a, jobs)
		if len(wrong) == 0 || time.Now().After(deadline) {
			for i, w := range wrong {
				if i == 10 {
					break
				}
				t.Errorf("the event stream showed %s", w)
			}
			c.mu.Lock()
			resumes := c.resumes
			c.mu.Unlock()
			t.Logf("the event stream showed the status changes of %d checkpoints (%d wrong), reconnecting %d times", checked, len(wrong), resumes)
			if checked < 10 {
				t.Errorf("only %d checkpoints to check the event stream against", checked)
			}
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// compare lists the checkpoints of jobs and returns how many there are and, for each
// whose status changes the stream did not show exactly, what it showed and what it should.
func (c *statusCollector) compare(t *testing.T, a *api, jobs []string) (checked int, wrong []string) {
	t.Helper()
	for _, job := range jobs {
		for _, cp := range a.mustListAll(t, job) {
			want := []string{"preparing"}
			switch cp.Status {
			case "committing":
				want = append(want, "committing")
			case "committed":
				want = append(want, "committing", "committed")
			case "aborted":
				want = append(want, "aborted")
			}
			key := fmt.Sprintf("%s/%d", job, cp.Id)
			c.mu.Lock()
			got := slices.Clone(c.changes[key])
			c.mu.Unlock()
			checked++
			if strings.Join(got, " ") != strings.Join(want, " ") {
				wrong = append(wrong, fmt.Sprintf("%s as %v, want %v", key, got, want))
			}
		}
	}
	return checked, wrong
}

// TestFailoverAsynchronousLosesAcknowledgedWrites is the same setup with asynchronous
// replication (synchronous_mode off), to show what it costs: the standby is made to fall
// behind (the primary's WAL senders paused while it acknowledges at least ten votes and
// acks), then the whole primary node is lost and Patroni
// promotes the standby. Writes the old primary acknowledged meanwhile are gone from
// the new one: the ledger's findings are logged, and the test fails if none is found (then
// it showed nothing). With synchronous_mode on (TestFailoverUnderPatroni) the standby
// cannot lag behind what was acknowledged.
func TestFailoverAsynchronousLosesAcknowledgedWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Patroni")
	}
	t.Parallel()
	const requestTimeout = 2 * time.Second
	pc := harness.StartPatroni(t, false)
	args := []string{"--sweep-interval", "100ms", "--request-timeout", requestTimeout.String()}
	coord := harness.StartCoordinator(t, pc.URL, args...)
	a := newAPI(coord)
	jobs := faultJobs("async")
	w := newWorkload(t, []*api{a}, requestTimeout+5*time.Second, jobs...)
	w.start()
	time.Sleep(2 * time.Second)

	leader, err := pc.WaitLeader(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The old primary acknowledges writes the standby does not get: at least ten votes
	// and acks after the pause, however slowly the machine runs.
	_, votes0, acks0, _ := w.ledger.counts()
	resume := leader.PauseWALSenders()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, votes, acks, _ := w.ledger.counts(); votes+acks >= votes0+acks0+10 {
			break
		}
		if time.Now().After(deadline) {
			resume()
			t.Fatalf("fewer than ten votes and acks acknowledged in 30 s: %s", w.ledger.stats())
		}
	}
	// The workload stops before the loss, so that nothing it would do again afterwards (a
	// vote pending asks for once more) hides what was lost.
	w.stop()
	leader.KillNode()
	resume() // gone with the node; nothing to send any more
	newLeader, err := pc.WaitLeader(60 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if newLeader == leader {
		t.Fatalf("%s is still the leader", leader.Name)
	}
	waitRecovered(t, a, 40*time.Second)

	rec := &recordingTB{TB: t}
	w.ledger.verify(rec, a, jobNames(jobs)...)
	t.Logf("asynchronous replication, the standby behind by ten votes and acks or more, the primary lost: %d findings of the ledger (acknowledged writes lost or changed, decisions seen reversed), e.g.:", len(rec.errors))
	for i, e := range rec.errors {
		if i == 8 {
			break
		}
		t.Logf("  %s", e)
	}
	if len(rec.errors) == 0 {
		t.Errorf("no acknowledged write was lost: the run showed nothing (%s)", w.ledger.stats())
	}
	// The history check sees the loss too: answers the rules cannot explain. Logged, not
	// required: the ledger's findings above are what this test is about. Proving that no
	// order explains a history can take the search long, so it gets 10 s.
	w.history.timeout = 10 * time.Second
	hrec := &recordingTB{TB: t}
	w.checkHistory(hrec, a)
	t.Logf("the history check: %q", hrec.errors)
}

// recordingTB records the errors reported to it instead of failing the test.
type recordingTB struct {
	testing.TB
	errors []string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Error(args ...any) { r.errors = append(r.errors, fmt.Sprint(args...)) }

func (r *recordingTB) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
