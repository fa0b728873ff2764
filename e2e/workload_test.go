package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twophase/coordinator/clients/go/coordinatorclient"
)

// A workload is a set of jobs driven by concurrent, retrying clients while the test
// injects faults: per job, one driver opens checkpoints with Idempotency-Keys (and, for
// jobs without auto_commit, commits them; now and then it aborts one), and one goroutine
// per participant works through its pending list, voting and acking, and long-polls it
// (wait_ms) when it owed nothing. Every request is
// retried, unchanged, until its answer is definitive (anything but a transport error or a
// 503). Every answer is written to a ledger, which checks on the way that no decision is
// ever reversed and that commit happens only on unanimity, and at the end that the
// coordinator's state still holds every answer any client received.

// workloadJob is one job of a workload.
type workloadJob struct {
	name          string
	participants  []string
	autoCommit    bool
	maxConcurrent int
	timeoutMs     int
}

type workload struct {
	t              testing.TB
	apis           []*api // every request goes to one of them, chosen afresh for each attempt
	jobs           []workloadJob
	ledger         *ledger
	history        *history      // every request and its answer, for the check of the rules
	requestTimeout time.Duration // a client gives up on one exchange after this
	retryFor       time.Duration // and on a request after this

	epochs   map[string]map[string]int64 // job -> participant -> epoch
	stopping atomic.Bool
	wg       sync.WaitGroup
	retries  atomic.Int64
	got503   atomic.Int64
}

func newWorkload(t testing.TB, apis []*api, requestTimeout time.Duration, jobs ...workloadJob) *workload {
	return &workload{t: t, apis: apis, jobs: jobs, ledger: newLedger(), history: newHistory(), requestTimeout: requestTimeout, retryFor: 45 * time.Second,
		epochs: map[string]map[string]int64{}}
}

// start creates the jobs, registers their participants and starts the clients. It must
// run while the coordinator and the database are up.
func (w *workload) start() {
	w.t.Helper()
	for _, j := range w.jobs {
		cfg, _ := json.Marshal(map[string]any{"participants": j.participants, "auto_commit": j.autoCommit,
			"max_concurrent_checkpoints": j.maxConcurrent, "checkpoint_timeout_ms": j.timeoutMs})
		w.apis[0].mustDo(w.t, "PUT", jobPath(j.name), string(cfg), http.StatusCreated, nil)
		w.history.addJob(j.name, j.participants, j.autoCommit, j.maxConcurrent)
		w.epochs[j.name] = map[string]int64{}
		for _, p := range j.participants {
			call := w.history.now()
			reg := w.apis[0].register(w.t, j.name, p)
			w.history.record(request{method: "POST", path: registerPath(j.name, p)}, call,
				reply{status: http.StatusOK, body: fmt.Appendf(nil, `{"epoch":%d}`, reg.Epoch)}, nil, w.history.now())
			w.epochs[j.name][p] = reg.Epoch
		}
	}
	for _, j := range w.jobs {
		w.wg.Go(func() { w.drive(j) })
		for _, p := range j.participants {
			w.wg.Go(func() { w.participate(j, p, w.epochs[j.name][p]) })
		}
	}
}

// stop asks the clients to stop after the request each is retrying, and waits for them.
func (w *workload) stop() {
	w.stopping.Store(true)
	w.wg.Wait()
}

// checkHistory reads every checkpoint of the jobs through a, recorded as the history's last
// operations, and checks the history (history.check): every answer any client received
// must follow from the protocol's rules, and so must the state the coordinator ends in.
func (w *workload) checkHistory(t testing.TB, a *api) {
	t.Helper()
	for _, j := range w.jobs {
		path := jobPath(j.name) + "/checkpoints?limit=1000"
		for path != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			rep, err := w.history.send(ctx, a, request{method: "GET", path: path})
			cancel()
			var page coordinatorclient.CheckpointList
			if err != nil || rep.status != http.StatusOK || json.Unmarshal(rep.body, &page) != nil {
				t.Fatalf("list checkpoints of %s: %v %v", j.name, rep, err)
			}
			path = ""
			if page.NextCursor != nil {
				path = jobPath(j.name) + "/checkpoints?limit=1000&cursor=" + url.QueryEscape(*page.NextCursor)
			}
		}
	}
	w.history.check(t)
}

// call sends r until its answer is definitive and returns it; false means it gave up
// (already reported as a failure). A 5xx other than a well-formed 503 is a failure, and so
// is an exchange that takes longer than requestTimeout: the coordinator must never hang.
func (w *workload) call(r request) (reply, bool) {
	deadline := time.Now().Add(w.retryFor)
	backoff := 10 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), w.requestTimeout)
		sent := w.ledger.tick()
		rep, err := w.history.send(ctx, w.apis[rand.IntN(len(w.apis))], r)
		cancel()
		rep.sent, rep.received = sent, w.ledger.tick()
		switch {
		case err == nil && rep.status == http.StatusServiceUnavailable:
			w.got503.Add(1)
			if perr := problemError(rep, http.StatusServiceUnavailable, "unavailable"); perr != nil {
				w.ledger.fail("%v", perr)
			}
		case err == nil && rep.status >= 500:
			w.ledger.fail("%v: a 5xx other than 503", rep)
			return rep, false
		case err == nil:
			checkAnswerTo(w.ledger, rep)
			return rep, true
		case isTimeout(err):
			w.ledger.fail("%s %s: no answer within %s: %v", r.method, r.path, w.requestTimeout, err)
		}
		if time.Now().After(deadline) {
			w.ledger.fail("%s %s: gave up after %s: %v %v", r.method, r.path, w.retryFor, rep, err)
			return rep, false
		}
		w.retries.Add(1)
		time.Sleep(backoff)
		backoff = min(backoff*2, 200*time.Millisecond)
	}
}

// checkAnswerTo records a failure when a definitive answer is malformed.
func checkAnswerTo(l *ledger, rep reply) {
	if rep.status >= 400 {
		if err := problemError(rep, rep.status, ""); err != nil {
			l.fail("%v", err)
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// drive opens the job's checkpoints, one Idempotency-Key each, and decides some.
func (w *workload) drive(j workloadJob) {
	rng := rand.New(rand.NewPCG(hash(j.name), 1))
	for n := 1; !w.stopping.Load(); {
		key := fmt.Sprintf("%s-%d", j.name, n)
		rep, ok := w.call(request{method: "POST", path: jobPath(j.name) + "/checkpoints",
			body: fmt.Sprintf(`{"timeout_ms":%d}`, j.timeoutMs), header: map[string]string{"Idempotency-Key": key}})
		if !ok {
			return
		}
		switch {
		case rep.status == http.StatusCreated:
			var cp checkpoint
			if err := json.Unmarshal(rep.body, &cp); err != nil {
				w.ledger.fail("%v: %v", rep, err)
				return
			}
			w.ledger.opened(j.name, key, cp.Id)
			w.ledger.observe(cp, "prepare "+key, rep.sent)
			n++
		case problemError(rep, http.StatusConflict, "too_many_checkpoints") == nil:
			time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)
		default:
			w.ledger.fail("prepare %s: %v", key, rep)
			return
		}
		if !j.autoCommit || rng.IntN(20) == 0 {
			if !w.decide(j, rng) {
				return
			}
		}
	}
}

// decide commits the job's preparing checkpoints whose votes are all in, and aborts one
// now and then.
func (w *workload) decide(j workloadJob, rng *rand.Rand) bool {
	rep, ok := w.call(request{method: "GET", path: jobPath(j.name) + "/checkpoints?status=preparing&limit=100"})
	if !ok {
		return false
	}
	var page coordinatorclient.CheckpointList
	if rep.status != http.StatusOK || json.Unmarshal(rep.body, &page) != nil {
		w.ledger.fail("list preparing: %v", rep)
		return false
	}
	sort.Slice(page.Items, func(a, b int) bool { return page.Items[a].Id < page.Items[b].Id })
	for _, cp := range page.Items {
		w.ledger.observe(cp, "list", rep.sent)
		op, body := "commit", ""
		if rng.IntN(10) == 0 {
			op, body = "abort", `{"reason":"driver"}`
		} else if !allPrepared(cp) {
			continue
		}
		rep, ok := w.call(request{method: "POST", path: cpPath(j.name, cp.Id) + "/" + op, body: body})
		if !ok {
			return false
		}
		switch {
		case rep.status == http.StatusOK:
			var got checkpoint
			_ = json.Unmarshal(rep.body, &got)
			w.ledger.observe(got, op, rep.sent)
			if want := map[string]string{"commit": "commit", "abort": "abort"}[op]; decisionOf(got.Status) != want {
				w.ledger.fail("%s %s/%d answered 200 with status %s", op, j.name, cp.Id, got.Status)
			}
			w.ledger.decided(j.name, cp.Id, op)
		case rep.status == http.StatusConflict:
			var p problemDoc
			_ = json.Unmarshal(rep.body, &p)
			if p.Checkpoint != nil {
				w.ledger.observe(*p.Checkpoint, op+" refused", rep.sent)
			}
			switch p.Code {
			case "already_decided", "lower_checkpoint_open", "votes_missing":
			default:
				w.ledger.fail("%s %s/%d: %v", op, j.name, cp.Id, rep)
			}
		default:
			w.ledger.fail("%s %s/%d: %v", op, j.name, cp.Id, rep)
		}
	}
	return true
}

// participate works through one participant's pending list until stopped.
func (w *workload) participate(j workloadJob, p string, epoch int64) {
	idle := false
	for !w.stopping.Load() {
		path := pendingPath(j.name, p)
		if idle {
			// Nothing was owed: wait for something, as a participant library does.
			path += "?wait_ms=300"
		}
		rep, ok := w.call(request{method: "GET", path: path})
		if !ok {
			return
		}
		var pe pending
		if rep.status != http.StatusOK || json.Unmarshal(rep.body, &pe) != nil {
			w.ledger.fail("pending %s/%s: %v", j.name, p, rep)
			return
		}
		if pe.Epoch != epoch {
			w.ledger.fail("pending %s/%s: epoch %d, registered with %d", j.name, p, pe.Epoch, epoch)
		}
		if idle = len(pe.Items) == 0; idle {
			continue
		}
		for _, it := range pe.Items {
			// This participant's earlier answers were received before this request was
			// sent: what they acknowledged must not be owed again.
			w.ledger.checkOwed(j.name, it.Checkpoint, p, string(it.Action))
			switch it.Action {
			case coordinatorclient.PendingActionVote:
				if !w.vote(j, it.Checkpoint, p, epoch) {
					return
				}
			default:
				w.ledger.checkCommittables(j.name, it.Checkpoint, p, string(it.Committables), "pending")
				if !w.ack(j, it.Checkpoint, p, epoch) {
					return
				}
			}
		}
	}
}

// voteFor is the vote p casts on checkpoint id: always the same, so that a retry repeats
// it word for word. About one in twenty is an abort.
func voteFor(job string, id int64, p string, epoch int64) (kind, body, committables string) {
	h := hash(fmt.Sprintf("%s/%d/%s", job, id, p))
	if h%20 == 0 {
		return "abort", abortVoteBody(epoch, "simulated failure"), ""
	}
	committables = fmt.Sprintf(`[{"txn":"%s-%d-%s","h":%d,"note":"é <&> \"q\" 🙂"},%d,null]`, job, id, p, h, id)
	return "prepared", voteBody(epoch, committables), committables
}

func (w *workload) vote(j workloadJob, id int64, p string, epoch int64) bool {
	kind, body, committables := voteFor(j.name, id, p, epoch)
	rep, ok := w.call(request{method: "PUT", path: votePath(j.name, id, p), body: body})
	if !ok {
		return false
	}
	switch rep.status {
	case http.StatusOK:
		var cp checkpoint
		_ = json.Unmarshal(rep.body, &cp)
		mine := participant(cp, p)
		if mine == nil || mine.Vote == nil || string(*mine.Vote) != kind || mine.Epoch == nil || *mine.Epoch != epoch ||
			kind == "prepared" && string(mine.Committables) != committables {
			w.ledger.fail("vote %s/%d/%s answered 200 with %+v", j.name, id, p, mine)
		}
		w.ledger.voted(j.name, id, p, kind, epoch, committables, rep.received)
		w.ledger.observe(cp, "vote", rep.sent)
	case http.StatusConflict:
		var pd problemDoc
		_ = json.Unmarshal(rep.body, &pd)
		if pd.Code != "already_decided" || pd.Checkpoint == nil {
			w.ledger.fail("vote %s/%d/%s: %v", j.name, id, p, rep)
			break
		}
		w.ledger.observe(*pd.Checkpoint, "vote refused", rep.sent)
		if mine := participant(*pd.Checkpoint, p); mine == nil || mine.Vote != nil {
			w.ledger.fail("vote %s/%d/%s refused as already_decided although its vote is recorded: %+v", j.name, id, p, mine)
		}
	default:
		w.ledger.fail("vote %s/%d/%s: %v", j.name, id, p, rep)
	}
	return true
}

func (w *workload) ack(j workloadJob, id int64, p string, epoch int64) bool {
	rep, ok := w.call(request{method: "PUT", path: ackPath(j.name, id, p), body: ackBody(epoch)})
	if !ok {
		return false
	}
	if rep.status != http.StatusOK {
		w.ledger.fail("ack %s/%d/%s: %v", j.name, id, p, rep)
		return true
	}
	var cp checkpoint
	_ = json.Unmarshal(rep.body, &cp)
	w.ledger.observe(cp, "ack", rep.sent)
	if mine := participant(cp, p); mine == nil || mine.AckedAt == nil {
		w.ledger.fail("ack %s/%d/%s answered 200 without acked_at", j.name, id, p)
	} else {
		w.ledger.acked(j.name, id, p, *mine.AckedAt)
	}
	return true
}

func allPrepared(cp checkpoint) bool {
	for _, p := range cp.Participants {
		if p.Vote == nil || *p.Vote != coordinatorclient.VoteKindPrepared {
			return false
		}
	}
	return true
}

func decisionOf(s coordinatorclient.CheckpointStatus) string {
	switch s {
	case coordinatorclient.Committing, coordinatorclient.Committed:
		return "commit"
	case coordinatorclient.Aborted:
		return "abort"
	}
	return ""
}

func hash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// The ledger.

type cpKey struct {
	job string
	id  int64
}

type partKey struct {
	job string
	id  int64
	p   string
}

type ackedVote struct {
	kind, committables string
	epoch              int64
	at                 int64 // ledger time of the answer
}

// ledger records every answer clients received, and what it promised.
type ledger struct {
	// clock orders requests and answers: an answer can only be expected to show what was
	// acknowledged before its request was sent.
	clock     atomic.Int64
	mu        sync.Mutex
	keys      map[string]map[string]int64 // job -> Idempotency-Key -> checkpoint id
	votes     map[partKey]ackedVote
	acks      map[partKey]time.Time
	decisions map[cpKey]string // "commit" or "abort", as first seen in any answer
	seenBy    map[cpKey]string
	requested map[cpKey]string // decisions a 200 to POST commit/abort announced
	failures  []string
}

func newLedger() *ledger {
	return &ledger{keys: map[string]map[string]int64{}, votes: map[partKey]ackedVote{}, acks: map[partKey]time.Time{},
		decisions: map[cpKey]string{}, seenBy: map[cpKey]string{}, requested: map[cpKey]string{}}
}

// tick returns the next ledger time.
func (l *ledger) tick() int64 { return l.clock.Add(1) }

func (l *ledger) fail(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.failures) < 50 {
		l.failures = append(l.failures, fmt.Sprintf(format, args...))
	}
}

func (l *ledger) opened(job, key string, id int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keys[job] == nil {
		l.keys[job] = map[string]int64{}
	}
	if prev, ok := l.keys[job][key]; ok && prev != id {
		l.failures = append(l.failures, fmt.Sprintf("Idempotency-Key %s opened checkpoint %d, then %d", key, prev, id))
	}
	for k, other := range l.keys[job] {
		if other == id && k != key {
			l.failures = append(l.failures, fmt.Sprintf("checkpoint %s/%d answered to keys %s and %s", job, id, k, key))
		}
	}
	l.keys[job][key] = id
}

func (l *ledger) voted(job string, id int64, p, kind string, epoch int64, committables string, at int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := partKey{job, id, p}
	v := ackedVote{kind: kind, committables: committables, epoch: epoch, at: at}
	if prev, ok := l.votes[k]; ok {
		if prev.kind != kind || prev.committables != committables || prev.epoch != epoch {
			l.failures = append(l.failures, fmt.Sprintf("vote %v acknowledged as %+v, then %+v", k, prev, v))
		}
		return
	}
	l.votes[k] = v
}

func (l *ledger) acked(job string, id int64, p string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := partKey{job, id, p}
	if prev, ok := l.acks[k]; ok && !prev.Equal(at) {
		l.failures = append(l.failures, fmt.Sprintf("ack %v acknowledged at %v, then at %v: acked twice", k, prev, at))
	}
	l.acks[k] = at
}

func (l *ledger) decided(job string, id int64, decision string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.requested[cpKey{job, id}] = decision
}

// checkOwed fails when a pending list asks a participant for a vote or an ack that an
// earlier answer acknowledged: it was lost.
func (l *ledger) checkOwed(job string, id int64, p, action string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := partKey{job, id, p}
	if _, ok := l.votes[k]; ok && action == "vote" {
		l.failures = append(l.failures, fmt.Sprintf("pending asks %s for its vote on %s/%d again: the acknowledged vote was lost", p, job, id))
	}
	if _, ok := l.acks[k]; ok {
		l.failures = append(l.failures, fmt.Sprintf("pending asks %s to %s %s/%d again: the acknowledged ack was lost", p, action, job, id))
	}
}

// checkCommittables checks committables some answer showed against the acknowledged vote.
func (l *ledger) checkCommittables(job string, id int64, p, got, where string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if v, ok := l.votes[partKey{job, id, p}]; ok && v.kind == "prepared" && got != v.committables {
		l.failures = append(l.failures, fmt.Sprintf("%s: committables of %s/%d/%s are %s, acknowledged %s", where, job, id, p, got, v.committables))
	}
}

// observe checks a checkpoint that an answer showed: its decision agrees with every other
// answer's, a commit has every vote prepared, and acknowledged votes are intact.
func (l *ledger) observe(cp checkpoint, where string, sent int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := cpKey{cp.Job, cp.Id}
	if d := decisionOf(cp.Status); d != "" {
		if prev, ok := l.decisions[k]; ok && prev != d {
			l.failures = append(l.failures, fmt.Sprintf("checkpoint %s/%d: %s seen by %s, then %s (%s) by %s: decision reversed",
				cp.Job, cp.Id, prev, l.seenBy[k], d, cp.Status, where))
		} else if !ok {
			l.decisions[k], l.seenBy[k] = d, where
		}
		if d == "commit" && !allPrepared(cp) {
			l.failures = append(l.failures, fmt.Sprintf("checkpoint %s/%d is %s without every vote prepared (%s)", cp.Job, cp.Id, cp.Status, where))
		}
	}
	for _, p := range cp.Participants {
		v, ok := l.votes[partKey{cp.Job, cp.Id, p.Name}]
		if !ok || v.at >= sent {
			continue // acknowledged after this answer's request was sent
		}
		if p.Vote == nil || string(*p.Vote) != v.kind || v.kind == "prepared" && string(p.Committables) != v.committables {
			l.failures = append(l.failures, fmt.Sprintf("checkpoint %s/%d (%s): acknowledged vote of %s %+v shows as %v %s",
				cp.Job, cp.Id, where, p.Name, v, p.Vote, p.Committables))
		}
	}
}

// stats summarises the ledger for the test log.
func (l *ledger) stats() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	opened := 0
	for _, keys := range l.keys {
		opened += len(keys)
	}
	commits, aborts := 0, 0
	for _, d := range l.decisions {
		if d == "commit" {
			commits++
		} else {
			aborts++
		}
	}
	return fmt.Sprintf("%d checkpoints opened, %d votes and %d acks acknowledged, %d commits and %d aborts seen",
		opened, len(l.votes), len(l.acks), commits, aborts)
}

func (l *ledger) counts() (opened, votes, acks, commits int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, keys := range l.keys {
		opened += len(keys)
	}
	for _, d := range l.decisions {
		if d == "commit" {
			commits++
		}
	}
	return opened, len(l.votes), len(l.acks), commits
}

// verify reads every checkpoint of the jobs back and checks that every answer any client
// received still holds: ids contiguous from 1 with one checkpoint per Idempotency-Key, every
// acknowledged vote present with its epoch and committables byte for byte, every ack
// present and unchanged, every decision seen still the decision, commits only with every
// vote prepared, committed only once everyone acked.
func (l *ledger) verify(t testing.TB, a *api, jobs ...string) {
	t.Helper()
	l.mu.Lock()
	failures := append([]string(nil), l.failures...)
	l.mu.Unlock()
	for _, f := range failures {
		t.Error(f)
	}
	for _, job := range jobs {
		cps := a.mustListAll(t, job)
		byID := map[int64]checkpoint{}
		for i, cp := range cps {
			if cp.Id != int64(i+1) {
				t.Errorf("%s: checkpoint ids are not contiguous from 1: position %d holds %d", job, i+1, cp.Id)
			}
			byID[cp.Id] = cp
			l.observe(cp, "final read", math.MaxInt64)
			switch cp.Status {
			case coordinatorclient.Committed:
				for _, p := range cp.Participants {
					if p.AckedAt == nil {
						t.Errorf("%s/%d committed but %s did not ack", job, cp.Id, p.Name)
					}
				}
			case coordinatorclient.Aborted:
				if cp.DecidedAt == nil || cp.CompletedAt == nil || !cp.DecidedAt.Equal(*cp.CompletedAt) {
					t.Errorf("%s/%d aborted with decided_at %v, completed_at %v", job, cp.Id, cp.DecidedAt, cp.CompletedAt)
				}
			}
		}
		if j := a.getJob(t, job); len(cps) > 0 && (j.LastCheckpoint == nil || *j.LastCheckpoint != int64(len(cps))) {
			t.Errorf("%s: last_checkpoint %v, %d checkpoints listed", job, j.LastCheckpoint, len(cps))
		}
		l.mu.Lock()
		keys := l.keys[job]
		if len(keys) != len(cps) {
			t.Errorf("%s: %d checkpoints exist, %d Idempotency-Keys were answered 201: a duplicate or lost checkpoint", job, len(cps), len(keys))
		}
		for key, id := range keys {
			if _, ok := byID[id]; !ok {
				t.Errorf("%s: key %s was answered checkpoint %d, which does not exist", job, key, id)
			}
		}
		for k, v := range l.votes {
			if k.job != job {
				continue
			}
			p := participant(byID[k.id], k.p)
			if p == nil || p.Vote == nil || string(*p.Vote) != v.kind || p.Epoch == nil || *p.Epoch != v.epoch ||
				v.kind == "prepared" && string(p.Committables) != v.committables {
				t.Errorf("acknowledged vote %v %+v lost or changed: %+v", k, v, p)
			}
		}
		for k, at := range l.acks {
			if k.job != job {
				continue
			}
			if p := participant(byID[k.id], k.p); p == nil || p.AckedAt == nil || !p.AckedAt.Equal(at) {
				t.Errorf("acknowledged ack %v at %v lost or changed: %+v", k, at, p)
			}
		}
		for k, d := range l.requested {
			if k.job == job && decisionOf(byID[k.id].Status) != d {
				t.Errorf("%s/%d: %s was answered 200, now %s", job, k.id, d, byID[k.id].Status)
			}
		}
		l.mu.Unlock()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.failures[len(failures):] {
		t.Error(f)
	}
}

// failed reports whether anything went wrong so far, for tests that stop early.
func (l *ledger) failed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.failures) > 0
}
