package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/twophase/coordinator/clients/go/coordinatorclient"
	"github.com/twophase/coordinator/e2e/harness"
)

// TestModel drives the coordinator binary with random sequences of operations (prepare
// with and without Idempotency-Keys, votes prepared and abort with current, stale and
// future epochs, commit, abort, ack, register, job changes, bad input, waits past
// deadlines, SIGKILL and restart) and applies each to a small reference model written
// from docs/protocol.md and openapi.yaml alone. Every answer must be one the model
// allows, and after every step the whole state (checkpoints with votes, committables, acks
// and decisions, the job view, every participant's pending list) must be one the model
// allows.
//
// The real service runs as a process over HTTP, like in every other e2e test: a restart
// (SIGKILL, then start) costs about 100 ms, cheap enough to be an ordinary step. Each
// check gets a job of its own on the same coordinator and database.
//
// Time is the one thing the test does not control: a deadline may pass while a request
// is in flight, and the sweeper aborts expired checkpoints on its own schedule. So the
// model is a set of possible worlds: where a deadline falls inside a request, or a sweep
// may or may not have happened, each possibility is a world, and worlds the observed
// answers contradict are dropped. The test fails when no world is left.
func TestModel(t *testing.T) {
	t.Parallel()
	setRapidDefault("rapid.checks", "12")
	setRapidDefault("rapid.steps", "40")
	cluster := harness.StartCluster(t)
	coord := harness.StartCoordinator(t, cluster.NewDatabase(t), "--sweep-interval", "50ms")
	a := newAPI(coord)
	checks := 0
	answers := map[string]int{}
	rapid.Check(t, func(rt *rapid.T) {
		checks++
		m := newModelRun(rt, a, coord, fmt.Sprintf("model-%d", checks))
		m.answers = answers
		rt.Repeat(m.actions())
	})
	t.Logf("%d checks, %d coordinator restarts; answers: %v", checks, coord.Starts()-1, answers)
}

// setRapidDefault sets a rapid flag unless it was given on the command line, so that the
// default run stays short and -rapid.checks=1000 still works.
func setRapidDefault(name, value string) {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	if !given {
		_ = flag.Set(name, value)
	}
}

var modelNames = []string{"alpha", "bravo", "charlie"}

// The reference model.

type mVote struct {
	Kind         string // prepared or abort
	Epoch        int64
	Committables string // compact JSON; "[]" for a prepared vote without any
	Reason       string
}

// mReason says why a checkpoint was aborted, as far as docs/protocol.md pins it down.
type mReason struct {
	Kind  string   // deadline, vote, request, register, cascade
	Names []string // deadline: who did not vote; vote and register: who
	Text  string   // vote: the voter's reason; request: the reason asked for
	Lower int64    // cascade: the lower checkpoint
}

type mCheckpoint struct {
	ID           int64
	Status       string
	AutoCommit   bool
	Timeout      time.Duration
	Deadline     time.Time // zero until an answer showed it
	Participants []string
	Votes        map[string]mVote
	Acked        map[string]bool
	Reason       mReason
	// What answers showed first; later answers must agree (no vote, ack or decision
	// happens twice).
	DecidedAt *time.Time
	VotedAt   map[string]time.Time
	AckedAt   map[string]time.Time
}

type mKey struct {
	TimeoutMs int64 // 0: no body
	ID        int64
}

// world is one possible state of the job.
type world struct {
	Participants  []string
	AutoCommit    bool
	MaxConcurrent int
	Epochs        map[string]int64
	Seq           int64
	Checkpoints   []*mCheckpoint // index id-1
	Keys          map[string]mKey
}

func (w *world) clone() *world {
	b, err := json.Marshal(w)
	if err != nil {
		panic(err)
	}
	var out world
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return &out
}

func (w *world) key() string {
	b, _ := json.Marshal(w)
	return string(b)
}

func (w *world) cp(id int64) *mCheckpoint {
	if id < 1 || id > int64(len(w.Checkpoints)) {
		return nil
	}
	return w.Checkpoints[id-1]
}

func (w *world) preparing() []*mCheckpoint {
	var out []*mCheckpoint
	for _, cp := range w.Checkpoints {
		if cp.Status == "preparing" {
			out = append(out, cp)
		}
	}
	return out
}

// expire aborts, lowest first, every preparing checkpoint whose deadline is at or before
// at, and every preparing checkpoint above it (rules 6 and 9).
func (w *world) expire(at time.Time) {
	for {
		var expired *mCheckpoint
		for _, cp := range w.preparing() {
			if !cp.Deadline.IsZero() && !cp.Deadline.After(at) {
				expired = cp
				break
			}
		}
		if expired == nil {
			return
		}
		var late []string
		for _, p := range expired.Participants {
			if _, ok := expired.Votes[p]; !ok {
				late = append(late, p)
			}
		}
		w.abort(expired, mReason{Kind: "deadline", Names: late})
	}
}

func (w *world) abort(cp *mCheckpoint, why mReason) {
	cp.Status, cp.Reason = "aborted", why
	for _, higher := range w.preparing() {
		if higher.ID > cp.ID {
			higher.Status, higher.Reason = "aborted", mReason{Kind: "cascade", Lower: cp.ID}
		}
	}
}

func unanimous(cp *mCheckpoint) bool {
	for _, p := range cp.Participants {
		if v, ok := cp.Votes[p]; !ok || v.Kind != "prepared" {
			return false
		}
	}
	return true
}

func missing(cp *mCheckpoint) []string {
	var out []string
	for _, p := range cp.Participants {
		if v, ok := cp.Votes[p]; !ok || v.Kind != "prepared" {
			out = append(out, p)
		}
	}
	return out
}

// advance commits, lowest first, preparing checkpoints with every vote prepared and
// auto_commit, while no lower one is still preparing (rules 2 and 9).
func (w *world) advance() {
	for {
		prep := w.preparing()
		if len(prep) == 0 || !prep[0].AutoCommit || !unanimous(prep[0]) {
			return
		}
		prep[0].Status = "committing"
	}
}

// mItem is one entry of a pending list.
type mItem struct {
	Checkpoint   int64
	Status       string
	Action       string
	Committables string
}

// pending lists what p owes, oldest first; preparing checkpoints past their deadline at
// `at` are not offered for a vote.
func (w *world) pending(p string, at time.Time) []mItem {
	items := []mItem{}
	for _, cp := range w.Checkpoints {
		if !slices.Contains(cp.Participants, p) || cp.Acked[p] {
			continue
		}
		v, voted := cp.Votes[p]
		committables := "[]"
		if voted && v.Kind == "prepared" {
			committables = v.Committables
		}
		switch {
		case cp.Status == "preparing" && !voted && (cp.Deadline.IsZero() || cp.Deadline.After(at)):
			items = append(items, mItem{cp.ID, cp.Status, "vote", committables})
		case cp.Status == "committing":
			items = append(items, mItem{cp.ID, cp.Status, "commit", committables})
		case cp.Status == "aborted" && voted && v.Kind == "prepared":
			items = append(items, mItem{cp.ID, cp.Status, "abort", committables})
		}
	}
	return items
}

// outcome is what the model expects of one answer.
type outcome struct {
	status  int
	code    string // for problems
	cp      *mCheckpoint
	missing []string      // votes_missing
	reg     *registration // register
	job     bool          // PUT job: the job view
}

type registration struct {
	epoch int64
	items []mItem
}

func problem(status int, code string, cp *mCheckpoint) outcome {
	return outcome{status: status, code: code, cp: cp}
}

// The operations, applied to one world whose clock reads `at`.

type prepareOp struct {
	timeoutMs int64 // 0: no body (the job's timeout)
	key       string
}

func (w *world) prepare(op prepareOp, at time.Time) outcome {
	w.expire(at)
	if op.key != "" {
		if k, ok := w.Keys[op.key]; ok {
			if k.TimeoutMs != op.timeoutMs {
				return problem(409, "idempotency_conflict", nil)
			}
			return outcome{status: 201, cp: w.cp(k.ID)}
		}
	}
	if len(w.preparing()) >= w.MaxConcurrent {
		return problem(409, "too_many_checkpoints", nil)
	}
	w.Seq++
	timeout := 60 * time.Second
	if op.timeoutMs != 0 {
		timeout = time.Duration(op.timeoutMs) * time.Millisecond
	}
	cp := &mCheckpoint{ID: w.Seq, Status: "preparing", AutoCommit: w.AutoCommit, Timeout: timeout,
		Participants: slices.Clone(w.Participants), Votes: map[string]mVote{}, Acked: map[string]bool{},
		VotedAt: map[string]time.Time{}, AckedAt: map[string]time.Time{}}
	w.Checkpoints = append(w.Checkpoints, cp)
	if op.key != "" {
		w.Keys[op.key] = mKey{TimeoutMs: op.timeoutMs, ID: cp.ID}
	}
	return outcome{status: 201, cp: cp}
}

// epochCheck is fencing (rule 5).
func (w *world) epochCheck(cp *mCheckpoint, p string, epoch int64) *outcome {
	switch current := w.Epochs[p]; {
	case current == 0 || epoch == 0:
		o := problem(409, "not_registered", cp)
		return &o
	case epoch != current:
		o := problem(409, "fenced", cp)
		return &o
	}
	return nil
}

type voteOp struct {
	id           int64
	p            string
	epoch        int64
	kind         string
	committables string // compact; "" for none
	reason       string
}

func (w *world) vote(op voteOp, at time.Time) outcome {
	w.expire(at)
	cp := w.cp(op.id)
	if cp == nil {
		return problem(404, "not_found", nil)
	}
	if !slices.Contains(cp.Participants, op.p) {
		return problem(404, "not_found", cp)
	}
	if o := w.epochCheck(cp, op.p, op.epoch); o != nil {
		return *o
	}
	committables := op.committables
	if op.kind == "prepared" && committables == "" {
		committables = "[]"
	}
	if prev, ok := cp.Votes[op.p]; ok {
		if prev.Kind == op.kind && (op.kind == "abort" || prev.Committables == committables) {
			return outcome{status: 200, cp: cp}
		}
		return problem(409, "vote_conflict", cp)
	}
	if cp.Status != "preparing" {
		return problem(409, "already_decided", cp)
	}
	v := mVote{Kind: op.kind, Epoch: op.epoch, Reason: op.reason}
	if op.kind == "prepared" {
		v.Committables = committables
	}
	cp.Votes[op.p] = v
	if op.kind == "abort" {
		w.abort(cp, mReason{Kind: "vote", Names: []string{op.p}, Text: op.reason})
	} else {
		w.advance()
	}
	return outcome{status: 200, cp: cp}
}

func (w *world) commit(id int64, at time.Time) outcome {
	w.expire(at)
	cp := w.cp(id)
	switch {
	case cp == nil:
		return problem(404, "not_found", nil)
	case cp.Status == "committing" || cp.Status == "committed":
		return outcome{status: 200, cp: cp}
	case cp.Status == "aborted":
		return problem(409, "already_decided", cp)
	case !unanimous(cp):
		o := problem(409, "votes_missing", cp)
		o.missing = missing(cp)
		return o
	}
	for _, lower := range w.preparing() {
		if lower.ID < cp.ID {
			return problem(409, "lower_checkpoint_open", cp)
		}
	}
	cp.Status = "committing"
	w.advance()
	return outcome{status: 200, cp: cp}
}

func (w *world) abortOp(id int64, reason string, at time.Time) outcome {
	w.expire(at)
	cp := w.cp(id)
	switch {
	case cp == nil:
		return problem(404, "not_found", nil)
	case cp.Status == "aborted":
		return outcome{status: 200, cp: cp}
	case cp.Status != "preparing":
		return problem(409, "already_decided", cp)
	}
	w.abort(cp, mReason{Kind: "request", Text: reason})
	return outcome{status: 200, cp: cp}
}

func (w *world) ack(id int64, p string, epoch int64, at time.Time) outcome {
	w.expire(at)
	cp := w.cp(id)
	if cp == nil {
		return problem(404, "not_found", nil)
	}
	if !slices.Contains(cp.Participants, p) {
		return problem(404, "not_found", cp)
	}
	if o := w.epochCheck(cp, p, epoch); o != nil {
		return *o
	}
	if cp.Status == "preparing" {
		return problem(409, "not_decided", cp)
	}
	cp.Acked[p] = true
	if cp.Status == "committing" {
		all := true
		for _, q := range cp.Participants {
			all = all && cp.Acked[q]
		}
		if all {
			cp.Status = "committed"
		}
	}
	return outcome{status: 200, cp: cp}
}

func (w *world) register(p string, at time.Time) outcome {
	w.expire(at)
	if !slices.Contains(w.Participants, p) {
		return problem(404, "not_found", nil)
	}
	w.Epochs[p]++
	for _, cp := range w.preparing() {
		if cp.Status != "preparing" {
			continue // aborted by the cascade of a lower one
		}
		if _, voted := cp.Votes[p]; !voted && slices.Contains(cp.Participants, p) {
			w.abort(cp, mReason{Kind: "register", Names: []string{p}})
		}
	}
	return outcome{status: 200, reg: &registration{epoch: w.Epochs[p], items: w.pending(p, at)}}
}

func (w *world) putJob(autoCommit bool, maxConcurrent int) outcome {
	w.AutoCommit, w.MaxConcurrent = autoCommit, maxConcurrent
	return outcome{status: 200, job: true}
}

// Comparing answers with worlds.

// matchCheckpoint checks a checkpoint an answer showed against the world's.
func matchCheckpoint(m *mCheckpoint, got checkpoint) error {
	if got.Id != m.ID || string(got.Status) != m.Status || got.AutoCommit != m.AutoCommit {
		return fmt.Errorf("checkpoint %d: %s (auto_commit %v), model %s (auto_commit %v)", got.Id, got.Status, got.AutoCommit, m.Status, m.AutoCommit)
	}
	if d := got.Deadline.Sub(got.CreatedAt); d != m.Timeout {
		return fmt.Errorf("checkpoint %d: deadline - created_at = %s, timeout %s", m.ID, d, m.Timeout)
	}
	if !m.Deadline.IsZero() && !got.Deadline.Equal(m.Deadline) {
		return fmt.Errorf("checkpoint %d: deadline moved from %v to %v", m.ID, m.Deadline, got.Deadline)
	}
	var names []string
	for _, p := range got.Participants {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, m.Participants) {
		return fmt.Errorf("checkpoint %d: participants %v, model %v", m.ID, names, m.Participants)
	}
	switch m.Status {
	case "preparing":
		if got.DecidedAt != nil || got.CompletedAt != nil || got.AbortReason != nil {
			return fmt.Errorf("checkpoint %d: preparing with decided_at %v completed_at %v reason %v", m.ID, got.DecidedAt, got.CompletedAt, got.AbortReason)
		}
	case "committing", "committed":
		if got.DecidedAt == nil || !got.DecidedAt.Before(got.Deadline) || got.AbortReason != nil || (got.CompletedAt != nil) != (m.Status == "committed") {
			return fmt.Errorf("checkpoint %d: %s decided at %v (deadline %v), completed %v, reason %v", m.ID, m.Status, got.DecidedAt, got.Deadline, got.CompletedAt, got.AbortReason)
		}
	case "aborted":
		if got.DecidedAt == nil || got.CompletedAt == nil || !got.DecidedAt.Equal(*got.CompletedAt) || got.AbortReason == nil {
			return fmt.Errorf("checkpoint %d: aborted with decided_at %v, completed_at %v, reason %v", m.ID, got.DecidedAt, got.CompletedAt, got.AbortReason)
		}
		if err := matchReason(m, *got.AbortReason, !got.DecidedAt.Before(got.Deadline)); err != nil {
			return err
		}
	}
	if m.DecidedAt != nil && (got.DecidedAt == nil || !got.DecidedAt.Equal(*m.DecidedAt)) {
		return fmt.Errorf("checkpoint %d: decided at %v, earlier answers said %v", m.ID, got.DecidedAt, *m.DecidedAt)
	}
	for _, p := range got.Participants {
		v, voted := m.Votes[p.Name]
		if !voted {
			if p.Vote != nil || p.Epoch != nil || p.VotedAt != nil || string(p.Committables) != "[]" {
				return fmt.Errorf("checkpoint %d: %s has vote %v epoch %v committables %s, the model none", m.ID, p.Name, p.Vote, p.Epoch, p.Committables)
			}
		} else {
			want := v.Committables
			if want == "" {
				want = "[]"
			}
			if p.Vote == nil || string(*p.Vote) != v.Kind || p.Epoch == nil || *p.Epoch != v.Epoch || string(p.Committables) != want || p.VotedAt == nil {
				return fmt.Errorf("checkpoint %d: %s voted %v epoch %v %s, the model %+v", m.ID, p.Name, p.Vote, p.Epoch, p.Committables, v)
			}
			if at, ok := m.VotedAt[p.Name]; ok && !p.VotedAt.Equal(at) {
				return fmt.Errorf("checkpoint %d: %s voted at %v, earlier answers said %v: voted twice", m.ID, p.Name, p.VotedAt, at)
			}
			if v.Kind == "abort" && v.Reason != "" && (p.Reason == nil || *p.Reason != v.Reason) {
				return fmt.Errorf("checkpoint %d: %s abort reason %v, sent %q", m.ID, p.Name, p.Reason, v.Reason)
			}
		}
		if (p.AckedAt != nil) != m.Acked[p.Name] {
			return fmt.Errorf("checkpoint %d: %s acked_at %v, model acked %v", m.ID, p.Name, p.AckedAt, m.Acked[p.Name])
		}
		if at, ok := m.AckedAt[p.Name]; ok && !p.AckedAt.Equal(at) {
			return fmt.Errorf("checkpoint %d: %s acked at %v, earlier answers said %v: acked twice", m.ID, p.Name, p.AckedAt, at)
		}
	}
	return nil
}

// matchReason checks an abort reason against what the model knows of it: the names it
// must contain (and, for a deadline, must not), the reason a participant or an operator
// gave. A checkpoint aborted by the cascade of a lower one that had also passed its own
// deadline (ownDeadlinePassed: decided at or after it) may carry either reason: both
// expired before a coordinator looked, as when none ran.
func matchReason(m *mCheckpoint, got string, ownDeadlinePassed bool) error {
	r := m.Reason
	bad := func() error { return fmt.Errorf("checkpoint %d: abort reason %q, model %+v", m.ID, got, r) }
	namesLate := func() bool {
		for _, p := range m.Participants {
			_, voted := m.Votes[p]
			if strings.Contains(got, p) == voted {
				return false
			}
		}
		return true
	}
	switch r.Kind {
	case "deadline":
		if !namesLate() {
			return bad()
		}
	case "vote", "register":
		for _, p := range r.Names {
			if !strings.Contains(got, p) {
				return bad()
			}
		}
		if !strings.Contains(got, r.Text) {
			return bad()
		}
	case "request":
		if r.Text != "" && got != r.Text {
			return bad()
		}
	case "cascade":
		byDeadline := ownDeadlinePassed && strings.HasPrefix(got, "deadline passed") && namesLate()
		if !strings.Contains(got, strconv.FormatInt(r.Lower, 10)) && !byDeadline {
			return bad()
		}
	}
	return nil
}

// adopt records in the world what an answer showed first: deadlines and the times of
// votes, acks and decisions.
func adopt(m *mCheckpoint, got checkpoint) {
	if m.Deadline.IsZero() {
		m.Deadline = got.Deadline
	}
	if m.DecidedAt == nil && got.DecidedAt != nil {
		m.DecidedAt = ptr(*got.DecidedAt)
	}
	for _, p := range got.Participants {
		if _, ok := m.VotedAt[p.Name]; !ok && p.VotedAt != nil {
			m.VotedAt[p.Name] = *p.VotedAt
		}
		if _, ok := m.AckedAt[p.Name]; !ok && p.AckedAt != nil {
			m.AckedAt[p.Name] = *p.AckedAt
		}
	}
}

// matchOutcome checks an answer against what one world expects, and adopts what it showed.
func matchOutcome(w *world, o outcome, rep reply) error {
	if rep.status != o.status {
		return fmt.Errorf("status %d, model %d %s", rep.status, o.status, o.code)
	}
	if o.status >= 400 {
		if err := problemError(rep, o.status, o.code); err != nil {
			return err
		}
		var p problemDoc
		_ = json.Unmarshal(rep.body, &p)
		if o.missing != nil && !slices.Equal(p.Missing, o.missing) {
			return fmt.Errorf("missing %v, model %v", p.Missing, o.missing)
		}
		switch {
		case p.Checkpoint != nil && o.cp != nil:
			if err := matchCheckpoint(o.cp, *p.Checkpoint); err != nil {
				return fmt.Errorf("problem %s: %v", o.code, err)
			}
			adopt(o.cp, *p.Checkpoint)
		case o.cp != nil && o.code != "not_found":
			return fmt.Errorf("problem %s without the checkpoint it is about", o.code)
		}
		return nil
	}
	switch {
	case o.cp != nil:
		var cp checkpoint
		if err := strictJSON(rep.body, &cp); err != nil {
			return err
		}
		if err := matchCheckpoint(o.cp, cp); err != nil {
			return err
		}
		adopt(o.cp, cp)
	case o.reg != nil:
		var reg coordinatorclient.Registration
		if err := strictJSON(rep.body, &reg); err != nil {
			return err
		}
		if reg.Epoch != o.reg.epoch {
			return fmt.Errorf("registered with epoch %d, model %d", reg.Epoch, o.reg.epoch)
		}
		if got := items(reg.Pending); !slices.Equal(got, o.reg.items) {
			return fmt.Errorf("registration's pending %v, model %v", got, o.reg.items)
		}
	case o.job:
		var j job
		if err := strictJSON(rep.body, &j); err != nil {
			return err
		}
		return matchJob(w, j)
	}
	return nil
}

func items(in []coordinatorclient.PendingItem) []mItem {
	out := []mItem{}
	for _, it := range in {
		out = append(out, mItem{it.Checkpoint, string(it.Status), string(it.Action), string(it.Committables)})
	}
	return out
}

func matchJob(w *world, j job) error {
	var lastCommitted *int64
	for _, cp := range w.Checkpoints {
		if cp.Status == "committing" || cp.Status == "committed" {
			lastCommitted = ptr(cp.ID)
		}
	}
	var last *int64
	if w.Seq > 0 {
		last = ptr(w.Seq)
	}
	epochs := map[string]int64{}
	for _, p := range w.Participants {
		epochs[p] = w.Epochs[p]
	}
	switch {
	case !slices.Equal(j.Participants, w.Participants) || j.AutoCommit != w.AutoCommit || j.MaxConcurrentCheckpoints != w.MaxConcurrent:
		return fmt.Errorf("job config %v auto %v max %d, model %v %v %d", j.Participants, j.AutoCommit, j.MaxConcurrentCheckpoints, w.Participants, w.AutoCommit, w.MaxConcurrent)
	case fmt.Sprint(deref(j.LastCheckpoint)) != fmt.Sprint(deref(last)) || fmt.Sprint(deref(j.LastCommitted)) != fmt.Sprint(deref(lastCommitted)):
		return fmt.Errorf("job last_checkpoint %v last_committed %v, model %v %v", deref(j.LastCheckpoint), deref(j.LastCommitted), deref(last), deref(lastCommitted))
	case fmt.Sprint(j.Epochs) != fmt.Sprint(epochs):
		return fmt.Errorf("job epochs %v, model %v", j.Epochs, epochs)
	}
	return nil
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// The test run.

type modelRun struct {
	rt     *rapid.T
	a      *api
	coord  *harness.Coordinator
	job    string
	worlds []*world
	keys   []string // Idempotency-Keys used so far
	steps  []string // for failure messages
	// answers counts answers by operation and status, to show what the checks covered.
	answers map[string]int
}

func newModelRun(rt *rapid.T, a *api, coord *harness.Coordinator, job string) *modelRun {
	participants := modelNames[:rapid.IntRange(1, len(modelNames)).Draw(rt, "participants")]
	w := &world{Participants: slices.Clone(participants), AutoCommit: rapid.Bool().Draw(rt, "auto_commit"),
		MaxConcurrent: rapid.IntRange(1, 3).Draw(rt, "max_concurrent"), Epochs: map[string]int64{}, Keys: map[string]mKey{}}
	m := &modelRun{rt: rt, a: a, coord: coord, job: job, worlds: []*world{w}}
	cfg, _ := json.Marshal(map[string]any{"participants": participants, "auto_commit": w.AutoCommit, "max_concurrent_checkpoints": w.MaxConcurrent})
	m.send("PUT job", request{method: "PUT", path: jobPath(job), body: string(cfg)}, func(*world, time.Time) outcome {
		return outcome{status: 201, job: true}
	})
	for _, p := range participants {
		if rapid.IntRange(0, 4).Draw(rt, "register "+p) > 0 {
			m.send("register "+p, request{method: "POST", path: registerPath(job, p)}, func(w *world, at time.Time) outcome { return w.register(p, at) })
		}
	}
	return m
}

// send sends r and keeps the worlds whose expectation (computed by op, for every moment
// the request may have taken effect at) the answer matches.
func (m *modelRun) send(what string, r request, op func(*world, time.Time) outcome) {
	m.rt.Helper()
	m.steps = append(m.steps, what)
	before := time.Now().Add(-time.Millisecond) // the database clock has microseconds
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	rep, err := m.a.send(ctx, r)
	cancel()
	after := time.Now().Add(time.Millisecond)
	if err != nil {
		m.rt.Fatalf("%s: %v", what, err)
	}
	if m.answers != nil {
		name, _, _ := strings.Cut(what, "(")
		var p problemDoc
		_ = json.Unmarshal(rep.body, &p)
		m.answers[fmt.Sprintf("%s %d %s", name, rep.status, p.Code)]++
	}
	// The request took effect at some moment in [before, after]: deadlines inside that
	// window may or may not have passed.
	moments := []time.Time{before}
	for _, w := range m.worlds {
		for _, cp := range w.preparing() {
			if cp.Deadline.After(before) && !cp.Deadline.After(after) {
				moments = append(moments, cp.Deadline)
			}
		}
	}
	var kept []*world
	var errs []string
	seen := map[string]bool{}
	for _, w := range m.worlds {
		for _, at := range moments {
			c := w.clone()
			o := op(c, at)
			if err := matchOutcome(c, o, rep); err != nil {
				errs = append(errs, err.Error())
				continue
			}
			candidates := []*world{c}
			if o.status >= 400 {
				// A refusal changes nothing but may or may not have saved the expiry of
				// checkpoints past their deadline on the way (rule 6 only asks the
				// sweeper to do it within a second).
				candidates = append(candidates, w.clone())
			}
			for _, c := range candidates {
				if k := c.key(); !seen[k] {
					seen[k] = true
					kept = append(kept, c)
				}
			}
		}
	}
	if len(kept) == 0 {
		m.rt.Fatalf("%s: the answer fits no state the protocol allows\nanswer: %v\nwhy not: %s\nsteps: %s",
			what, rep, strings.Join(dedupe(errs), "\n         "), strings.Join(m.steps, "; "))
	}
	m.worlds = kept
}

// deadlineWithin reports whether the deadline of a preparing checkpoint of any world
// falls between from and to.
func (m *modelRun) deadlineWithin(from, to time.Time) bool {
	for _, w := range m.worlds {
		for _, cp := range w.preparing() {
			if !cp.Deadline.IsZero() && !cp.Deadline.Before(from) && !cp.Deadline.After(to) {
				return true
			}
		}
	}
	return false
}

func dedupe(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}

// check reads the whole state back and keeps the worlds it fits, allowing for sweeps
// that have or have not happened yet, but not for one more than a second late (rule 6).
func (m *modelRun) check() {
	m.rt.Helper()
	// Let no deadline fall inside the reads: pending hides expired checkpoints by its own
	// clock. Wait past a deadline that is near; and if the reads took so long (a loaded
	// machine) that one fell inside them anyway, read again once it is past.
	var state modelState
	for reads := 0; ; reads++ {
		for {
			now := time.Now()
			var wait time.Duration
			for _, w := range m.worlds {
				for _, cp := range w.preparing() {
					if d := cp.Deadline.Sub(now); !cp.Deadline.IsZero() && d > -5*time.Millisecond && d < 150*time.Millisecond {
						wait = max(wait, d+10*time.Millisecond)
					}
				}
			}
			if wait == 0 {
				break
			}
			time.Sleep(wait)
		}
		start := time.Now()
		for attempt := 0; ; attempt++ {
			var stable bool
			state, stable = m.read()
			if stable {
				break
			}
			if attempt == 20 {
				m.rt.Fatalf("the state kept changing while nothing was sent")
			}
		}
		if !m.deadlineWithin(start.Add(-5*time.Millisecond), time.Now().Add(5*time.Millisecond)) {
			break
		}
		if reads == 20 {
			m.rt.Fatalf("a deadline fell inside the reads of the state 20 times running")
		}
	}
	var kept []*world
	var errs []string
	seen := map[string]bool{}
	for _, w := range m.worlds {
		// The sweeper may have run at any moment up to the reads: expired checkpoints
		// are aborted up to some deadline, in deadline order.
		moments := []time.Time{{}}
		for _, cp := range w.preparing() {
			if !cp.Deadline.IsZero() && cp.Deadline.Before(state.at) {
				moments = append(moments, cp.Deadline)
			}
		}
		for _, at := range moments {
			c := w.clone()
			if !at.IsZero() {
				c.expire(at)
			}
			if late := lateSweep(c, state.at); late != nil {
				errs = append(errs, fmt.Sprintf("checkpoint %d still preparing %s after its deadline", late.ID, state.at.Sub(late.Deadline)))
				continue
			}
			if err := state.match(c); err != nil {
				errs = append(errs, err.Error())
				continue
			}
			if k := c.key(); !seen[k] {
				seen[k] = true
				kept = append(kept, c)
			}
		}
	}
	if len(kept) == 0 {
		m.rt.Fatalf("the state fits no world the protocol allows\nwhy not: %s\nsteps: %s", strings.Join(dedupe(errs), "\n         "), strings.Join(m.steps, "; "))
	}
	if len(kept) > 64 {
		m.rt.Fatalf("%d possible worlds: the model is too loose", len(kept))
	}
	m.worlds = kept
}

// lateSweep returns a checkpoint still preparing more than rule 6's second (plus slack
// for a loaded machine) after its deadline.
func lateSweep(w *world, now time.Time) *mCheckpoint {
	for _, cp := range w.preparing() {
		if !cp.Deadline.IsZero() && now.Sub(cp.Deadline) > 2*time.Second {
			return cp
		}
	}
	return nil
}

// modelState is the job's state as read back.
type modelState struct {
	at          time.Time
	checkpoints []checkpoint
	job         job
	pending     map[string]pending
}

// read reads the checkpoints, the job and every pending list, then the checkpoints again:
// stable is false when they changed meanwhile (a sweep).
func (m *modelRun) read() (modelState, bool) {
	m.rt.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	get := func(path string, v any) string {
		rep, err := m.a.do(ctx, "GET", path, "")
		if err != nil || rep.status != http.StatusOK {
			m.rt.Fatalf("GET %s: %v %v", path, rep, err)
		}
		if v != nil {
			if err := strictJSON(rep.body, v); err != nil {
				m.rt.Fatalf("GET %s: %v", path, err)
			}
		}
		return string(rep.body)
	}
	s := modelState{at: time.Now(), pending: map[string]pending{}}
	list := jobPath(m.job) + "/checkpoints?limit=1000"
	var page coordinatorclient.CheckpointList
	first := get(list, &page)
	get(jobPath(m.job), &s.job)
	for _, p := range m.worlds[0].Participants {
		var pe pending
		get(pendingPath(m.job, p), &pe)
		s.pending[p] = pe
	}
	again := get(list, nil)
	s.checkpoints = page.Items
	sort.Slice(s.checkpoints, func(i, j int) bool { return s.checkpoints[i].Id < s.checkpoints[j].Id })
	return s, first == again
}

func (s modelState) match(w *world) error {
	if len(s.checkpoints) != len(w.Checkpoints) {
		return fmt.Errorf("%d checkpoints, model %d", len(s.checkpoints), len(w.Checkpoints))
	}
	for i, got := range s.checkpoints {
		if err := matchCheckpoint(w.Checkpoints[i], got); err != nil {
			return err
		}
	}
	if err := matchJob(w, s.job); err != nil {
		return err
	}
	for _, p := range w.Participants {
		pe := s.pending[p]
		if pe.Epoch != w.Epochs[p] {
			return fmt.Errorf("pending of %s: epoch %d, model %d", p, pe.Epoch, w.Epochs[p])
		}
		if got, want := items(pe.Items), w.pending(p, s.at); !slices.Equal(got, want) {
			return fmt.Errorf("pending of %s: %v, model %v", p, got, want)
		}
	}
	for i, got := range s.checkpoints {
		adopt(w.Checkpoints[i], got)
	}
	return nil
}

// The actions rapid chooses from.

func (m *modelRun) actions() map[string]func(*rapid.T) {
	w0 := func() *world { return m.worlds[0] }
	// pickID is mostly one of the last three checkpoints, sometimes one that does not
	// exist yet.
	pickID := func(t *rapid.T) int64 {
		seq := w0().Seq
		if seq == 0 {
			t.Skip("no checkpoint yet") // before any draw: rapid picks another action
		}
		if rapid.IntRange(0, 9).Draw(t, "unknown id?") == 9 { // rapid favours low values
			return seq + 1
		}
		return rapid.Int64Range(max(1, seq-2), seq).Draw(t, "id")
	}
	// pickParticipant is mostly one of the job's, sometimes a stranger.
	pickParticipant := func(t *rapid.T) string {
		if rapid.IntRange(0, 9).Draw(t, "stranger?") == 9 {
			return "stranger"
		}
		return rapid.SampledFrom(w0().Participants).Draw(t, "participant")
	}
	// pickEpoch is mostly the current epoch, sometimes a stale or a future one, or 0 (that
	// of a participant that never registered).
	pickEpoch := func(t *rapid.T, p string) int64 {
		current := w0().Epochs[p]
		switch rapid.IntRange(0, 10).Draw(t, "epoch") {
		case 10:
			return 0
		case 9:
			return max(1, current-1)
		case 8:
			return current + 1
		}
		return max(1, current)
	}
	actions := map[string]func(*rapid.T){
		"prepare": func(t *rapid.T) {
			op := prepareOp{timeoutMs: rapid.SampledFrom([]int64{0, 0, 0, 60000, 250, 800}).Draw(t, "timeout_ms")}
			switch rapid.IntRange(0, 3).Draw(t, "key") {
			case 1:
				op.key = fmt.Sprintf("key-%d", len(m.keys))
				m.keys = append(m.keys, op.key)
			case 2, 3:
				if len(m.keys) > 0 {
					op.key = rapid.SampledFrom(m.keys).Draw(t, "reused key")
				}
			}
			r := request{method: "POST", path: jobPath(m.job) + "/checkpoints"}
			if op.timeoutMs != 0 {
				r.body = fmt.Sprintf(`{"timeout_ms":%d}`, op.timeoutMs)
			}
			if op.key != "" {
				r.header = map[string]string{"Idempotency-Key": op.key}
			}
			m.send(fmt.Sprintf("prepare(%d, %q)", op.timeoutMs, op.key), r, func(w *world, at time.Time) outcome { return w.prepare(op, at) })
		},
		"vote": func(t *rapid.T) {
			op := voteOp{id: pickID(t), p: pickParticipant(t)}
			op.epoch = pickEpoch(t, op.p)
			var body string
			if rapid.IntRange(0, 9).Draw(t, "abort?") == 9 {
				op.kind, op.reason = "abort", rapid.SampledFrom([]string{"", "disk full"}).Draw(t, "reason")
				body = fmt.Sprintf(`{"epoch":%d,"vote":"abort"}`, op.epoch)
				if op.reason != "" {
					body = abortVoteBody(op.epoch, op.reason)
				}
			} else {
				op.kind = "prepared"
				sent := rapid.SampledFrom([]string{"", "[]", `[1]`, `[{"k":"v","n":1.50}]`, `[ "x" , "y" ]`}).Draw(t, "committables")
				body = voteBody(op.epoch, sent)
				if sent != "" {
					var b bytes.Buffer
					_ = json.Compact(&b, []byte(sent))
					op.committables = b.String()
				}
			}
			m.send(fmt.Sprintf("vote(%d, %s, epoch %d, %s %s%s)", op.id, op.p, op.epoch, op.kind, op.committables, op.reason),
				request{method: "PUT", path: votePath(m.job, op.id, op.p), body: body},
				func(w *world, at time.Time) outcome { return w.vote(op, at) })
		},
		"commit": func(t *rapid.T) {
			id := pickID(t)
			m.send(fmt.Sprintf("commit(%d)", id), request{method: "POST", path: cpPath(m.job, id) + "/commit"},
				func(w *world, at time.Time) outcome { return w.commit(id, at) })
		},
		"abort": func(t *rapid.T) {
			id := pickID(t)
			reason := rapid.SampledFrom([]string{"", "operator"}).Draw(t, "reason")
			r := request{method: "POST", path: cpPath(m.job, id) + "/abort"}
			if reason != "" {
				r.body = fmt.Sprintf(`{"reason":%q}`, reason)
			}
			m.send(fmt.Sprintf("abort(%d, %q)", id, reason), r, func(w *world, at time.Time) outcome { return w.abortOp(id, reason, at) })
		},
		"ack": func(t *rapid.T) {
			id, p := pickID(t), pickParticipant(t)
			epoch := pickEpoch(t, p)
			m.send(fmt.Sprintf("ack(%d, %s, epoch %d)", id, p, epoch), request{method: "PUT", path: ackPath(m.job, id, p), body: ackBody(epoch)},
				func(w *world, at time.Time) outcome { return w.ack(id, p, epoch, at) })
		},
		"register": func(t *rapid.T) {
			p := pickParticipant(t)
			m.send(fmt.Sprintf("register(%s)", p), request{method: "POST", path: registerPath(m.job, p)},
				func(w *world, at time.Time) outcome { return w.register(p, at) })
		},
		"put job": func(t *rapid.T) {
			auto, maxc := rapid.Bool().Draw(t, "auto_commit"), rapid.IntRange(1, 3).Draw(t, "max_concurrent")
			cfg, _ := json.Marshal(map[string]any{"participants": w0().Participants, "auto_commit": auto, "max_concurrent_checkpoints": maxc})
			m.send(fmt.Sprintf("put job(auto %v, max %d)", auto, maxc), request{method: "PUT", path: jobPath(m.job), body: string(cfg)},
				func(w *world, _ time.Time) outcome { return w.putJob(auto, maxc) })
		},
		"bad input": func(t *rapid.T) {
			bad := rapid.SampledFrom([]struct {
				r      request
				status int
			}{
				{request{method: "PUT", path: votePath(m.job, 1, "alpha"), body: `{"epoch":-1,"vote":"prepared"}`}, 400},
				{request{method: "PUT", path: votePath(m.job, 1, "alpha"), body: `{"epoch":1,"vote":"prepared","x":1}`}, 400},
				{request{method: "PUT", path: votePath(m.job, 1, "alpha"), body: `{"epoch":1,"vote":"prepared"}`, contentType: "text/plain"}, 415},
				{request{method: "PUT", path: votePath(m.job, 0, "alpha"), body: `{"epoch":1,"vote":"prepared"}`}, 400},
				{request{method: "PUT", path: ackPath(m.job, 1, "alpha"), body: `{"epoch":"1"}`}, 400},
				{request{method: "POST", path: jobPath(m.job) + "/checkpoints", body: `{"timeout_ms":5}`}, 400},
				{request{method: "POST", path: cpPath(m.job, 1) + "/abort", body: `{"reason":1}`}, 400},
				{request{method: "PUT", path: jobPath(m.job), body: `{"participants":[]}`}, 400},
			}).Draw(t, "bad")
			m.send(fmt.Sprintf("bad(%s %s %s)", bad.r.method, bad.r.path, bad.r.body), bad.r, func(*world, time.Time) outcome {
				return outcome{status: bad.status, code: map[int]string{400: "invalid_request", 415: "unsupported_media_type"}[bad.status]}
			})
		},
		"wait past a deadline": func(t *rapid.T) {
			var next time.Time
			for _, cp := range w0().preparing() {
				if d := cp.Deadline; !d.IsZero() && d.After(time.Now()) && d.Before(time.Now().Add(time.Second)) && (next.IsZero() || d.Before(next)) {
					next = d
				}
			}
			if next.IsZero() {
				t.Skip("no deadline within a second") // before any draw: rapid picks another action
			}
			m.steps = append(m.steps, "wait")
			time.Sleep(time.Until(next) + 20*time.Millisecond)
		},
		"restart": func(t *rapid.T) {
			m.steps = append(m.steps, "kill and restart")
			m.coord.Kill()
			m.coord.Restart()
		},
		"": func(t *rapid.T) { m.check() },
	}
	// rapid draws an action name uniformly, or nearly (it leans towards the first in
	// sorted order): weigh the operations by listing them several times, the common ones
	// first, the expensive ones (waits, restarts) last and rarely.
	named := map[string]func(*rapid.T){"": actions[""]}
	i := 0
	for _, w := range []struct {
		name   string
		copies int
	}{{"vote", 9}, {"prepare", 5}, {"ack", 4}, {"commit", 2}, {"register", 2}, {"abort", 2}, {"bad input", 2}, {"put job", 1}, {"wait past a deadline", 2}, {"restart", 1}} {
		for range w.copies {
			named[fmt.Sprintf("%02d %s", i, w.name)] = actions[w.name]
			i++
		}
	}
	return named
}
