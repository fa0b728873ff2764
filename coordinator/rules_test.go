package coordinator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The rules are table-tested here state by state and event by event, on checkpoints built
// directly (not through other rules), so that each case names exactly one decision. Every
// case also checks that JobState.Mutation lists exactly what changed, and every rejection that
// nothing changed at all. The property test at the end drives random sequences of events
// through the rules, the way Service does, and checks the protocol's invariants after each.

const (
	epochA int64 = 2 // a registered twice
	epochB int64 = 1
)

var (
	ruleT0        = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	ruleNow       = ruleT0.Add(10 * time.Second)
	committablesA = json.RawMessage(`[{"txn":"a-5"}]`)
	committablesB = json.RawMessage(`["b"]`)
	otherA        = json.RawMessage(`[{"txn":"a-6"}]`)
)

// afterT0 returns ruleT0+d as a fresh pointer.
func afterT0(d time.Duration) *time.Time {
	t := ruleT0.Add(d)
	return &t
}

// ruleCheckpoint returns checkpoint id of job orders, preparing, with participants a and b,
// a deadline one minute after ruleT0 and auto_commit on.
func ruleCheckpoint(id int64) *Checkpoint {
	return &Checkpoint{
		Job:          "orders",
		ID:           id,
		Status:       StatusPreparing,
		CreatedAt:    ruleT0.Add(time.Duration(id) * time.Millisecond),
		Deadline:     ruleT0.Add(time.Minute),
		AutoCommit:   true,
		Participants: []ParticipantState{{Name: "a"}, {Name: "b"}},
		Seq:          100 + id,
	}
}

func withPreparedVote(cp *Checkpoint, name string, epoch int64, committables json.RawMessage) *Checkpoint {
	p := cp.Participant(name)
	p.Epoch, p.Vote, p.Committables, p.VotedAt = epoch, VotePrepared, committables, afterT0(time.Second)
	return cp
}

func withAbortVote(cp *Checkpoint, name string, epoch int64, reason string) *Checkpoint {
	p := cp.Participant(name)
	p.Epoch, p.Vote, p.Reason, p.VotedAt = epoch, VoteAbort, reason, afterT0(2*time.Second)
	return cp
}

// decidedAs sets cp's decision as if taken at ruleT0+5s (committed at ruleT0+6s).
func decidedAs(cp *Checkpoint, status Status, reason string) *Checkpoint {
	cp.Status = status
	cp.DecidedAt = afterT0(5 * time.Second)
	switch status {
	case StatusCommitted:
		cp.CompletedAt = afterT0(6 * time.Second)
	case StatusAborted:
		cp.CompletedAt = afterT0(5 * time.Second)
		cp.AbortReason = reason
	}
	return cp
}

func ackedBy(cp *Checkpoint, name string) *Checkpoint {
	cp.Participant(name).AckedAt = afterT0(5500 * time.Millisecond)
	return cp
}

func manualCommit(cp *Checkpoint) *Checkpoint {
	cp.AutoCommit = false
	return cp
}

func withDeadline(cp *Checkpoint, d time.Duration) *Checkpoint {
	cp.Deadline = ruleT0.Add(d)
	return cp
}

// ruleFixture is one job's checkpoints and the JobState Service would build on them.
type ruleFixture struct {
	round *JobState
	all   []*Checkpoint
}

func newRuleFixture(cps ...*Checkpoint) *ruleFixture {
	all := slices.Clone(cps)
	slices.SortFunc(all, func(x, y *Checkpoint) int { return int(x.ID - y.ID) })
	f := &ruleFixture{round: &JobState{Now: ruleNow, Job: &Job{Name: "j", Epochs: map[string]int64{}}}, all: all}
	for _, cp := range all {
		if cp.Status == StatusPreparing {
			f.round.Preparing = append(f.round.Preparing, cp)
		}
	}
	return f
}

// withEpoch sets participant's current epoch in r's job and returns r.
func withEpoch(r *JobState, participant string, current int64) *JobState {
	r.Job.Epochs[participant] = current
	return r
}

// vote runs JobState.Vote with participant's current epoch set to current.
func (f *ruleFixture) vote(cp *Checkpoint, participant string, current int64, v Vote) error {
	f.round.Job.Epochs[participant] = current
	return f.round.Vote(cp, participant, v)
}

// ack runs JobState.Ack with participant's current epoch set to current.
func (f *ruleFixture) ack(cp *Checkpoint, participant string, current, epoch int64) error {
	f.round.Job.Epochs[participant] = current
	return f.round.Ack(cp, participant, epoch)
}

// register runs JobState.Register so that it gives participant epoch.
func (f *ruleFixture) register(participant string, epoch int64) {
	f.round.Job.Epochs[participant] = epoch - 1
	if got := f.round.Register(participant); got != epoch {
		panic(fmt.Sprintf("Register(%s) = %d, want %d", participant, got, epoch))
	}
	f.round.Mutation.Epochs = nil
}

func (f *ruleFixture) cp(id int64) *Checkpoint {
	for _, cp := range f.all {
		if cp.ID == id {
			return cp
		}
	}
	panic(fmt.Sprintf("no checkpoint %d in fixture", id))
}

// frozenCopy is a copy of cp that shares nothing with it, not even time pointers or bytes.
func frozenCopy(cp *Checkpoint) *Checkpoint {
	out := cp.Clone()
	out.DecidedAt = copyTimePtr(cp.DecidedAt)
	out.CompletedAt = copyTimePtr(cp.CompletedAt)
	for i := range out.Participants {
		p := &out.Participants[i]
		p.VotedAt = copyTimePtr(p.VotedAt)
		p.AckedAt = copyTimePtr(p.AckedAt)
		if p.Committables != nil {
			p.Committables = append(json.RawMessage{}, p.Committables...)
		}
	}
	return out
}

func copyTimePtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	c := *t
	return &c
}

// ruleSnapshot is the state of a job before a rule runs.
type ruleSnapshot struct {
	cps       map[int64]*Checkpoint
	preparing []int64
}

func takeRuleSnapshot(all []*Checkpoint, r *JobState) ruleSnapshot {
	s := ruleSnapshot{cps: make(map[int64]*Checkpoint, len(all))}
	for _, cp := range all {
		s.cps[cp.ID] = frozenCopy(cp)
	}
	for _, cp := range r.Preparing {
		s.preparing = append(s.preparing, cp.ID)
	}
	return s
}

func (f *ruleFixture) snapshot() ruleSnapshot { return takeRuleSnapshot(f.all, f.round) }

func checkpointIDs(cps []*Checkpoint) []int64 {
	out := []int64{}
	for _, cp := range cps {
		out = append(out, cp.ID)
	}
	return out
}

func sameInstant(x, y *time.Time) bool {
	if x == nil || y == nil {
		return x == y
	}
	return x.Equal(*y)
}

func statusFieldsDiffer(x, y *Checkpoint) bool {
	return x.Status != y.Status || !sameInstant(x.DecidedAt, y.DecidedAt) ||
		!sameInstant(x.CompletedAt, y.CompletedAt) || x.AbortReason != y.AbortReason
}

func voteFieldsDiffer(x, y *ParticipantState) bool {
	return x.Epoch != y.Epoch || x.Vote != y.Vote || x.Reason != y.Reason ||
		!bytes.Equal(x.Committables, y.Committables) || (x.Committables == nil) != (y.Committables == nil) ||
		!sameInstant(x.VotedAt, y.VotedAt)
}

// changeProblems compares the job's checkpoints with the snapshot taken before a rule and
// says where JobState.Mutation does not list exactly what changed, where a field that no rule
// may touch changed, and where JobState.Preparing is not the preparing checkpoints any more.
func changeProblems(before ruleSnapshot, all []*Checkpoint, r *JobState) []string {
	var problems []string
	byID := make(map[int64]*Checkpoint, len(all))
	for _, cp := range all {
		byID[cp.ID] = cp
	}
	var wantStatuses, wantVotes, wantAcks []string
	for _, cp := range all {
		old, ok := before.cps[cp.ID]
		if !ok {
			problems = append(problems, fmt.Sprintf("checkpoint %d appeared", cp.ID))
			continue
		}
		if old.Job != cp.Job || old.ID != cp.ID || !old.CreatedAt.Equal(cp.CreatedAt) ||
			!old.Deadline.Equal(cp.Deadline) || old.AutoCommit != cp.AutoCommit || old.Seq != cp.Seq ||
			len(old.Participants) != len(cp.Participants) {
			problems = append(problems, fmt.Sprintf("checkpoint %d: a field no rule may change changed", cp.ID))
			continue
		}
		if statusFieldsDiffer(old, cp) {
			wantStatuses = append(wantStatuses, fmt.Sprint(cp.ID))
		}
		for i := range cp.Participants {
			o, p := &old.Participants[i], &cp.Participants[i]
			if o.Name != p.Name {
				problems = append(problems, fmt.Sprintf("checkpoint %d: participant %d renamed", cp.ID, i))
			}
			if voteFieldsDiffer(o, p) {
				wantVotes = append(wantVotes, fmt.Sprintf("%d/%s", cp.ID, p.Name))
			}
			if !sameInstant(o.AckedAt, p.AckedAt) {
				wantAcks = append(wantAcks, fmt.Sprintf("%d/%s", cp.ID, p.Name))
			}
		}
	}
	var gotStatuses []string
	for _, cp := range r.Mutation.Statuses {
		if byID[cp.ID] != cp {
			problems = append(problems, fmt.Sprintf("Mutation.Statuses holds a checkpoint %d that is not the job's", cp.ID))
		}
		gotStatuses = append(gotStatuses, fmt.Sprint(cp.ID))
	}
	participantKeys := func(what string, changes []ParticipantChange) []string {
		var keys []string
		for _, c := range changes {
			if cp := byID[c.Checkpoint]; cp == nil || cp.Participant(c.Participant.Name) == nil {
				problems = append(problems, fmt.Sprintf("Mutation.%s holds %d/%s, not one of the job's", what, c.Checkpoint, c.Participant.Name))
			}
			keys = append(keys, fmt.Sprintf("%d/%s", c.Checkpoint, c.Participant.Name))
		}
		return keys
	}
	gotVotes := participantKeys("Votes", r.Mutation.Votes)
	gotAcks := participantKeys("Acks", r.Mutation.Acks)
	for _, c := range []struct {
		what      string
		got, want []string
	}{{"Statuses", gotStatuses, wantStatuses}, {"Votes", gotVotes, wantVotes}, {"Acks", gotAcks, wantAcks}} {
		sorted := slices.Clone(c.got)
		slices.Sort(sorted)
		slices.Sort(c.want)
		if !slices.Equal(sorted, c.want) {
			problems = append(problems, fmt.Sprintf("Changes.%s = %v, but what changed is %v", c.what, c.got, c.want))
		}
	}
	var wantPreparing []int64
	for _, id := range before.preparing {
		if cp := byID[id]; cp != nil && cp.Status == StatusPreparing {
			wantPreparing = append(wantPreparing, id)
		}
	}
	if got := checkpointIDs(r.Preparing); !slices.Equal(got, wantPreparing) && !(len(got) == 0 && len(wantPreparing) == 0) {
		problems = append(problems, fmt.Sprintf("JobState.Preparing = %v, want %v", got, wantPreparing))
	}
	for _, cp := range r.Preparing {
		if byID[cp.ID] != cp {
			problems = append(problems, fmt.Sprintf("JobState.Preparing holds a checkpoint %d that is not the job's", cp.ID))
		}
	}
	problems = append(problems, replayProblems(before, all, r)...)
	return problems
}

// replayProblems says where the mutation, applied to the state before the rule, does not
// give the state the rule left: what a store's copy of the job would then hold.
func replayProblems(before ruleSnapshot, all []*Checkpoint, r *JobState) []string {
	replayed := make(map[int64]*Checkpoint, len(before.cps))
	for id, cp := range before.cps {
		replayed[id] = frozenCopy(cp)
	}
	if !r.Mutation.Apply(&Job{}, replayed) {
		return []string{"Mutation.Apply: a change to a checkpoint the job does not have"}
	}
	var problems []string
	for _, cp := range all {
		if got, want := replayed[cp.ID], frozenCopy(cp); !reflect.DeepEqual(got, want) {
			problems = append(problems, fmt.Sprintf("checkpoint %d replayed from the mutation:\n got  %+v\n want %+v", cp.ID, got, want))
		}
	}
	return problems
}

// unchangedProblems says what differs from the snapshot, field by field, when nothing may.
func unchangedProblems(before ruleSnapshot, all []*Checkpoint, r *JobState) []string {
	var problems []string
	for _, cp := range all {
		if !reflect.DeepEqual(before.cps[cp.ID], frozenCopy(cp)) {
			problems = append(problems, fmt.Sprintf("checkpoint %d changed:\nbefore %+v\nafter  %+v", cp.ID, before.cps[cp.ID], frozenCopy(cp)))
		}
	}
	if got := checkpointIDs(r.Preparing); !slices.Equal(got, before.preparing) && !(len(got) == 0 && len(before.preparing) == 0) {
		problems = append(problems, fmt.Sprintf("JobState.Preparing = %v, was %v", got, before.preparing))
	}
	if !r.Mutation.Empty() {
		problems = append(problems, fmt.Sprintf("JobState.Mutation not empty: %s", describeChanges(r)))
	}
	return problems
}

// changeList is JobState.Mutation in words: votes and acks as "id/participant", statuses as
// "id:status", in order.
type changeList struct {
	votes, acks, statuses []string
}

func changesOf(r *JobState) changeList {
	var c changeList
	for _, v := range r.Mutation.Votes {
		c.votes = append(c.votes, fmt.Sprintf("%d/%s", v.Checkpoint, v.Participant.Name))
	}
	for _, a := range r.Mutation.Acks {
		c.acks = append(c.acks, fmt.Sprintf("%d/%s", a.Checkpoint, a.Participant.Name))
	}
	for _, cp := range r.Mutation.Statuses {
		c.statuses = append(c.statuses, fmt.Sprintf("%d:%s", cp.ID, cp.Status))
	}
	return c
}

func (c changeList) equal(d changeList) bool {
	return slices.Equal(c.votes, d.votes) && slices.Equal(c.acks, d.acks) && slices.Equal(c.statuses, d.statuses)
}

func (c changeList) String() string {
	return fmt.Sprintf("votes %v, acks %v, statuses %v", c.votes, c.acks, c.statuses)
}

func describeChanges(r *JobState) string { return changesOf(r).String() }

var sentinelsByCode = map[Code]error{
	CodeInvalidRequest:      ErrInvalidRequest,
	CodeNotFound:            ErrNotFound,
	CodeVoteConflict:        ErrVoteConflict,
	CodeFenced:              ErrFenced,
	CodeNotRegistered:       ErrNotRegistered,
	CodeAlreadyDecided:      ErrAlreadyDecided,
	CodeNotDecided:          ErrNotDecided,
	CodeVotesMissing:        ErrVotesMissing,
	CodeLowerCheckpointOpen: ErrLowerCheckpointOpen,
	CodeTooManyCheckpoints:  ErrTooManyCheckpoints,
	CodeIdempotencyConflict: ErrIdempotencyConflict,
	CodeJobBusy:             ErrJobBusy,
	CodeUnavailable:         ErrUnavailable,
}

// rejectionProblem says how err fails to be the rejection code about checkpoint cp.
func rejectionProblem(err error, code Code, cp *Checkpoint, missing []string) string {
	var e *Error
	if !errors.As(err, &e) {
		return fmt.Sprintf("err = %v, want a *Error %s", err, code)
	}
	if e.Code != code {
		return fmt.Sprintf("code = %s (%v), want %s", e.Code, err, code)
	}
	for c, sentinel := range sentinelsByCode {
		if errors.Is(err, sentinel) != (c == code) {
			return fmt.Sprintf("errors.Is(err, Err of %s) = %v", c, !(c == code))
		}
	}
	if e.Checkpoint != cp {
		return fmt.Sprintf("Error.Checkpoint = %p, want the checkpoint %d as it stands (%p)", e.Checkpoint, cp.ID, cp)
	}
	if e.Message == "" {
		return "Error.Message is empty"
	}
	if !slices.Equal(e.Missing, missing) || (missing == nil) != (e.Missing == nil) {
		return fmt.Sprintf("Error.Missing = %q, want %q", e.Missing, missing)
	}
	return ""
}

// outcome is what one rule does on one state.
type outcome struct {
	code    Code     // rejection, "" when accepted
	missing []string // Error.Missing of votes_missing
	// changes lists JobState.Mutation in order; the zero value means nothing may change.
	changes changeList
	check   func(t *testing.T, f *ruleFixture)
}

var idempotent = outcome{} // accepted, nothing changes (idempotent)

func rejectedWith(code Code) outcome { return outcome{code: code} }

// runRule applies act to a fresh fixture and checks the outcome against w: a rejection
// about target that changed nothing, or exactly the listed changes.
func runRule(t *testing.T, f *ruleFixture, target *Checkpoint, act func() error, w outcome) {
	t.Helper()
	before := f.snapshot()
	err := act()
	if w.code != "" {
		if p := rejectionProblem(err, w.code, target, w.missing); p != "" {
			t.Fatal(p)
		}
		for _, p := range unchangedProblems(before, f.all, f.round) {
			t.Error("a rejection changed something: " + p)
		}
		return
	}
	if err != nil {
		t.Fatalf("err = %v, want it accepted", err)
	}
	if got := changesOf(f.round); !got.equal(w.changes) {
		t.Errorf("changes: %s\nwant     %s", got, w.changes)
	}
	if w.changes.equal(changeList{}) {
		for _, p := range unchangedProblems(before, f.all, f.round) {
			t.Error("an idempotent request changed something: " + p)
		}
	}
	for _, p := range changeProblems(before, f.all, f.round) {
		t.Error(p)
	}
	if w.check != nil {
		w.check(t, f)
	}
}

func expectVote(t *testing.T, cp *Checkpoint, name string, kind VoteKind, epoch int64, committables json.RawMessage, reason string) {
	t.Helper()
	p := cp.Participant(name)
	if p.Vote != kind || p.Epoch != epoch || p.Reason != reason {
		t.Errorf("checkpoint %d %s: vote %q epoch %d reason %q, want %q %d %q", cp.ID, name, p.Vote, p.Epoch, p.Reason, kind, epoch, reason)
	}
	if !bytes.Equal(p.Committables, committables) || (committables == nil) != (p.Committables == nil) {
		t.Errorf("checkpoint %d %s: committables %q, want %q", cp.ID, name, p.Committables, committables)
	}
	if p.VotedAt == nil || !p.VotedAt.Equal(ruleNow) {
		t.Errorf("checkpoint %d %s: voted_at %v, want %v", cp.ID, name, p.VotedAt, ruleNow)
	}
}

func expectAborted(t *testing.T, cp *Checkpoint, reason string) {
	t.Helper()
	if cp.Status != StatusAborted || cp.AbortReason != reason {
		t.Errorf("checkpoint %d: %s %q, want aborted %q", cp.ID, cp.Status, cp.AbortReason, reason)
	}
	if !sameInstant(cp.DecidedAt, &ruleNow) || !sameInstant(cp.CompletedAt, &ruleNow) {
		t.Errorf("checkpoint %d: decided_at %v completed_at %v, want both %v", cp.ID, cp.DecidedAt, cp.CompletedAt, ruleNow)
	}
}

func expectCommitting(t *testing.T, cp *Checkpoint) {
	t.Helper()
	if cp.Status != StatusCommitting || !sameInstant(cp.DecidedAt, &ruleNow) || cp.CompletedAt != nil || cp.AbortReason != "" {
		t.Errorf("checkpoint %d: %s decided_at %v completed_at %v reason %q, want committing decided now", cp.ID, cp.Status, cp.DecidedAt, cp.CompletedAt, cp.AbortReason)
	}
}

func expectStatus(t *testing.T, cp *Checkpoint, status Status) {
	t.Helper()
	if cp.Status != status {
		t.Errorf("checkpoint %d: %s, want %s", cp.ID, cp.Status, status)
	}
}

func expectPreparing(t *testing.T, r *JobState, want ...int64) {
	t.Helper()
	if got := checkpointIDs(r.Preparing); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
		t.Errorf("JobState.Preparing = %v, want %v", got, want)
	}
}

// The states of checkpoint 5 (participants a and b) that the matrices run every event on.
// Checkpoint 6 is a higher one, preparing while 5 is undecided or committing, so that
// cascades show; checkpoint 4 is a lower one still preparing where 5 has to wait for it.
const (
	stateNoVotes              = "preparing, no votes"
	stateAPrepared            = "preparing, a prepared"
	stateAllPreparedLowerOpen = "preparing, all prepared, lower 4 open"
	stateAllPreparedManual    = "preparing, all prepared, auto_commit off"
	stateCommittingNoAcks     = "committing, none acked"
	stateCommittingAAcked     = "committing, a acked"
	stateCommitted            = "committed"
	stateAbortedBAbort        = "aborted, b voted abort"
	stateAbortedAPrepared     = "aborted, a prepared"
	stateAbortedAPreparedAck  = "aborted, a prepared and acked"
)

var ruleStateOrder = []string{
	stateNoVotes, stateAPrepared, stateAllPreparedLowerOpen, stateAllPreparedManual,
	stateCommittingNoAcks, stateCommittingAAcked, stateCommitted,
	stateAbortedBAbort, stateAbortedAPrepared, stateAbortedAPreparedAck,
}

var ruleStates = map[string]func() *ruleFixture{
	stateNoVotes: func() *ruleFixture { return newRuleFixture(ruleCheckpoint(5), ruleCheckpoint(6)) },
	stateAPrepared: func() *ruleFixture {
		return newRuleFixture(withPreparedVote(ruleCheckpoint(5), "a", epochA, committablesA), ruleCheckpoint(6))
	},
	stateAllPreparedLowerOpen: func() *ruleFixture {
		return newRuleFixture(ruleCheckpoint(4), bothVotedPrepared(ruleCheckpoint(5)), ruleCheckpoint(6))
	},
	stateAllPreparedManual: func() *ruleFixture {
		return newRuleFixture(bothVotedPrepared(manualCommit(ruleCheckpoint(5))), ruleCheckpoint(6))
	},
	stateCommittingNoAcks: func() *ruleFixture {
		return newRuleFixture(decidedAs(bothVotedPrepared(ruleCheckpoint(5)), StatusCommitting, ""), ruleCheckpoint(6))
	},
	stateCommittingAAcked: func() *ruleFixture {
		return newRuleFixture(ackedBy(decidedAs(bothVotedPrepared(ruleCheckpoint(5)), StatusCommitting, ""), "a"), ruleCheckpoint(6))
	},
	stateCommitted: func() *ruleFixture {
		return newRuleFixture(ackedBy(ackedBy(decidedAs(bothVotedPrepared(ruleCheckpoint(5)), StatusCommitted, ""), "a"), "b"))
	},
	stateAbortedBAbort: func() *ruleFixture {
		return newRuleFixture(decidedAs(withAbortVote(ruleCheckpoint(5), "b", epochB, "disk full"), StatusAborted, "participant b voted abort: disk full"))
	},
	stateAbortedAPrepared: func() *ruleFixture {
		return newRuleFixture(decidedAs(withPreparedVote(ruleCheckpoint(5), "a", epochA, committablesA), StatusAborted, "aborted on request"))
	},
	stateAbortedAPreparedAck: func() *ruleFixture {
		return newRuleFixture(ackedBy(decidedAs(withPreparedVote(ruleCheckpoint(5), "a", epochA, committablesA), StatusAborted, "aborted on request"), "a"))
	},
}

func bothVotedPrepared(cp *Checkpoint) *Checkpoint {
	return withPreparedVote(withPreparedVote(cp, "a", epochA, committablesA), "b", epochB, committablesB)
}

func TestStatesAreConsistent(t *testing.T) {
	t.Parallel()
	if len(ruleStates) != len(ruleStateOrder) {
		t.Fatalf("%d states, %d in order", len(ruleStates), len(ruleStateOrder))
	}
	for _, name := range ruleStateOrder {
		f := ruleStates[name]()
		cp := f.cp(5)
		if !strings.HasPrefix(name, string(cp.Status)) {
			t.Errorf("%s: checkpoint 5 is %s", name, cp.Status)
		}
	}
}

// voteEvent is one vote request on checkpoint 5.
type voteEvent struct {
	participant string
	current     int64 // the participant's current epoch
	vote        Vote
}

var (
	aPreparedSame  = voteEvent{"a", epochA, Vote{Epoch: epochA, Kind: VotePrepared, Committables: committablesA}}
	aPreparedOther = voteEvent{"a", epochA, Vote{Epoch: epochA, Kind: VotePrepared, Committables: otherA}}
	aPreparedNone  = voteEvent{"a", epochA, Vote{Epoch: epochA, Kind: VotePrepared}}
	aAbort         = voteEvent{"a", epochA, Vote{Epoch: epochA, Kind: VoteAbort, Reason: "disk full"}}
	bPrepared      = voteEvent{"b", epochB, Vote{Epoch: epochB, Kind: VotePrepared, Committables: committablesB}}
	bAbortSame     = voteEvent{"b", epochB, Vote{Epoch: epochB, Kind: VoteAbort, Reason: "disk full"}}
	bAbortNoReason = voteEvent{"b", epochB, Vote{Epoch: epochB, Kind: VoteAbort}}
)

func TestVote(t *testing.T) {
	t.Parallel()
	checkA := func(kind VoteKind, committables json.RawMessage, reason string) func(*testing.T, *ruleFixture) {
		return func(t *testing.T, f *ruleFixture) {
			expectVote(t, f.cp(5), "a", kind, epochA, committables, reason)
			expectStatus(t, f.cp(5), StatusPreparing)
			expectPreparing(t, f.round, 5, 6)
		}
	}
	abortedBy := func(voter string, kind VoteKind, epoch int64, committables json.RawMessage, voteReason, reason string) func(*testing.T, *ruleFixture) {
		return func(t *testing.T, f *ruleFixture) {
			expectVote(t, f.cp(5), voter, kind, epoch, committables, voteReason)
			expectAborted(t, f.cp(5), reason)
			expectAborted(t, f.cp(6), "lower checkpoint 5 aborted")
			expectPreparing(t, f.round)
		}
	}
	voteA := changeList{votes: []string{"5/a"}}
	cascade := func(voter string) changeList {
		return changeList{votes: []string{"5/" + voter}, statuses: []string{"5:aborted", "6:aborted"}}
	}
	cases := []struct {
		state string
		event voteEvent
		want  outcome
	}{
		// a votes prepared with the committables it sent before.
		{stateNoVotes, aPreparedSame, outcome{changes: voteA, check: checkA(VotePrepared, committablesA, "")}},
		{stateAPrepared, aPreparedSame, idempotent},
		{stateAllPreparedLowerOpen, aPreparedSame, idempotent},
		{stateAllPreparedManual, aPreparedSame, idempotent},
		{stateCommittingNoAcks, aPreparedSame, idempotent},
		{stateCommittingAAcked, aPreparedSame, idempotent},
		{stateCommitted, aPreparedSame, idempotent},
		{stateAbortedBAbort, aPreparedSame, rejectedWith(CodeAlreadyDecided)},
		{stateAbortedAPrepared, aPreparedSame, idempotent},
		{stateAbortedAPreparedAck, aPreparedSame, idempotent},

		// a votes prepared with other committables bytes.
		{stateNoVotes, aPreparedOther, outcome{changes: voteA, check: checkA(VotePrepared, otherA, "")}},
		{stateAPrepared, aPreparedOther, rejectedWith(CodeVoteConflict)},
		{stateAllPreparedLowerOpen, aPreparedOther, rejectedWith(CodeVoteConflict)},
		{stateAllPreparedManual, aPreparedOther, rejectedWith(CodeVoteConflict)},
		{stateCommittingNoAcks, aPreparedOther, rejectedWith(CodeVoteConflict)},
		{stateCommittingAAcked, aPreparedOther, rejectedWith(CodeVoteConflict)},
		{stateCommitted, aPreparedOther, rejectedWith(CodeVoteConflict)},
		{stateAbortedBAbort, aPreparedOther, rejectedWith(CodeAlreadyDecided)},
		{stateAbortedAPrepared, aPreparedOther, rejectedWith(CodeVoteConflict)},
		{stateAbortedAPreparedAck, aPreparedOther, rejectedWith(CodeVoteConflict)},

		// a votes prepared without committables: that means [], which differs from what a sent.
		{stateNoVotes, aPreparedNone, outcome{changes: voteA, check: checkA(VotePrepared, json.RawMessage(`[]`), "")}},
		{stateAPrepared, aPreparedNone, rejectedWith(CodeVoteConflict)},
		{stateAllPreparedLowerOpen, aPreparedNone, rejectedWith(CodeVoteConflict)},
		{stateAllPreparedManual, aPreparedNone, rejectedWith(CodeVoteConflict)},
		{stateCommittingNoAcks, aPreparedNone, rejectedWith(CodeVoteConflict)},
		{stateCommittingAAcked, aPreparedNone, rejectedWith(CodeVoteConflict)},
		{stateCommitted, aPreparedNone, rejectedWith(CodeVoteConflict)},
		{stateAbortedBAbort, aPreparedNone, rejectedWith(CodeAlreadyDecided)},
		{stateAbortedAPrepared, aPreparedNone, rejectedWith(CodeVoteConflict)},
		{stateAbortedAPreparedAck, aPreparedNone, rejectedWith(CodeVoteConflict)},

		// a votes abort.
		{stateNoVotes, aAbort, outcome{changes: cascade("a"), check: abortedBy("a", VoteAbort, epochA, nil, "disk full", "participant a voted abort: disk full")}},
		{stateAPrepared, aAbort, rejectedWith(CodeVoteConflict)},
		{stateAllPreparedLowerOpen, aAbort, rejectedWith(CodeVoteConflict)},
		{stateAllPreparedManual, aAbort, rejectedWith(CodeVoteConflict)},
		{stateCommittingNoAcks, aAbort, rejectedWith(CodeVoteConflict)},
		{stateCommittingAAcked, aAbort, rejectedWith(CodeVoteConflict)},
		{stateCommitted, aAbort, rejectedWith(CodeVoteConflict)},
		{stateAbortedBAbort, aAbort, rejectedWith(CodeAlreadyDecided)},
		{stateAbortedAPrepared, aAbort, rejectedWith(CodeVoteConflict)},
		{stateAbortedAPreparedAck, aAbort, rejectedWith(CodeVoteConflict)},

		// b votes prepared: on "a prepared" that is the last vote of the lowest checkpoint.
		{stateNoVotes, bPrepared, outcome{changes: changeList{votes: []string{"5/b"}}, check: func(t *testing.T, f *ruleFixture) {
			expectVote(t, f.cp(5), "b", VotePrepared, epochB, committablesB, "")
			expectStatus(t, f.cp(5), StatusPreparing)
		}}},
		{stateAPrepared, bPrepared, outcome{changes: changeList{votes: []string{"5/b"}, statuses: []string{"5:committing"}}, check: func(t *testing.T, f *ruleFixture) {
			expectVote(t, f.cp(5), "b", VotePrepared, epochB, committablesB, "")
			expectCommitting(t, f.cp(5))
			expectStatus(t, f.cp(6), StatusPreparing)
			expectPreparing(t, f.round, 6)
		}}},
		{stateAllPreparedLowerOpen, bPrepared, idempotent},
		{stateAllPreparedManual, bPrepared, idempotent},
		{stateCommittingNoAcks, bPrepared, idempotent},
		{stateCommittingAAcked, bPrepared, idempotent},
		{stateCommitted, bPrepared, idempotent},
		{stateAbortedBAbort, bPrepared, rejectedWith(CodeVoteConflict)},
		{stateAbortedAPrepared, bPrepared, rejectedWith(CodeAlreadyDecided)},
		{stateAbortedAPreparedAck, bPrepared, rejectedWith(CodeAlreadyDecided)},

		// b votes abort, with the reason it gave before where it did.
		{stateNoVotes, bAbortSame, outcome{changes: cascade("b"), check: abortedBy("b", VoteAbort, epochB, nil, "disk full", "participant b voted abort: disk full")}},
		{stateAPrepared, bAbortNoReason, outcome{changes: cascade("b"), check: func(t *testing.T, f *ruleFixture) {
			abortedBy("b", VoteAbort, epochB, nil, "", "participant b voted abort")(t, f)
			if p := f.cp(5).Participant("a"); p.Vote != VotePrepared || !bytes.Equal(p.Committables, committablesA) {
				t.Errorf("a's prepared vote changed: %+v", p)
			}
		}}},
		{stateAllPreparedLowerOpen, bAbortSame, rejectedWith(CodeVoteConflict)},
		{stateAllPreparedManual, bAbortSame, rejectedWith(CodeVoteConflict)},
		{stateCommittingNoAcks, bAbortSame, rejectedWith(CodeVoteConflict)},
		{stateCommittingAAcked, bAbortSame, rejectedWith(CodeVoteConflict)},
		{stateCommitted, bAbortSame, rejectedWith(CodeVoteConflict)},
		{stateAbortedBAbort, bAbortSame, idempotent},
		{stateAbortedAPrepared, bAbortSame, rejectedWith(CodeAlreadyDecided)},
		{stateAbortedAPreparedAck, bAbortSame, rejectedWith(CodeAlreadyDecided)},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%s %s %s", c.state, c.event.participant, c.event.vote.Kind, c.event.vote.Committables), func(t *testing.T) {
			t.Parallel()
			f := ruleStates[c.state]()
			cp := f.cp(5)
			runRule(t, f, cp, func() error { return f.vote(cp, c.event.participant, c.event.current, c.event.vote) }, c.want)
		})
	}
}

// Fencing and registration come before everything else, in every state and for both
// kinds of vote; an unknown participant is not found anywhere.
func TestVoteRejectedInEveryState(t *testing.T) {
	t.Parallel()
	for _, state := range ruleStateOrder {
		for _, base := range []voteEvent{aPreparedSame, aAbort, bPrepared, bAbortSame} {
			stale, future, unregistered, zero, unknown := base, base, base, base, base
			stale.current, stale.vote.Epoch = base.current+1, base.current
			future.vote.Epoch = base.current + 1
			unregistered.current, unregistered.vote.Epoch = 0, 1
			zero.vote.Epoch = 0
			unknown.participant = "z"
			for _, c := range []struct {
				name  string
				event voteEvent
				code  Code
			}{
				{"stale epoch", stale, CodeFenced},
				{"future epoch", future, CodeFenced},
				{"not registered", unregistered, CodeNotRegistered},
				{"epoch 0 from a registered participant", zero, CodeNotRegistered},
				{"unknown participant", unknown, CodeNotFound},
			} {
				t.Run(fmt.Sprintf("%s/%s %s/%s", state, base.participant, base.vote.Kind, c.name), func(t *testing.T) {
					t.Parallel()
					f := ruleStates[state]()
					cp := f.cp(5)
					runRule(t, f, cp, func() error { return f.vote(cp, c.event.participant, c.event.current, c.event.vote) }, rejectedWith(c.code))
				})
			}
		}
	}
}

// Rule 5: fencing comes before idempotency, even for a word-for-word repeat.
func TestVoteFencingWinsOverExactRepeat(t *testing.T) {
	t.Parallel()
	for _, state := range []func() *Checkpoint{
		func() *Checkpoint { return withPreparedVote(ruleCheckpoint(5), "a", 1, committablesA) },
		func() *Checkpoint { return decidedAs(bothVotedPreparedAt(ruleCheckpoint(5), 1), StatusCommitting, "") },
		func() *Checkpoint {
			return decidedAs(withPreparedVote(ruleCheckpoint(5), "a", 1, committablesA), StatusAborted, "x")
		},
		func() *Checkpoint {
			return decidedAs(withAbortVote(ruleCheckpoint(5), "a", 1, "disk full"), StatusAborted, "x")
		},
	} {
		cp := state()
		t.Run(string(cp.Status)+"/"+string(cp.Participant("a").Vote), func(t *testing.T) {
			t.Parallel()
			p := cp.Participant("a")
			repeat := Vote{Epoch: 1, Kind: p.Vote, Committables: p.Committables, Reason: p.Reason}
			f := newRuleFixture(cp)
			// a registered again: its epoch is 2 now, and the very vote it sent with 1 is fenced.
			runRule(t, f, cp, func() error { return f.vote(cp, "a", 2, repeat) }, rejectedWith(CodeFenced))
		})
	}
}

func bothVotedPreparedAt(cp *Checkpoint, epoch int64) *Checkpoint {
	return withPreparedVote(withPreparedVote(cp, "a", epoch, committablesA), "b", epoch, committablesB)
}

// A participant that voted, then registered again, may repeat its vote with its new epoch:
// the vote is the same, so it is accepted and the recorded epoch stays the one it voted with.
func TestVoteRepeatedWithNewEpochAfterRegister(t *testing.T) {
	t.Parallel()
	cp := withPreparedVote(ruleCheckpoint(5), "a", 1, committablesA)
	f := newRuleFixture(cp)
	runRule(t, f, cp, func() error {
		return f.vote(cp, "a", 2, Vote{Epoch: 2, Kind: VotePrepared, Committables: committablesA})
	}, outcome{check: func(t *testing.T, f *ruleFixture) {
		if p := cp.Participant("a"); p.Epoch != 1 {
			t.Errorf("recorded epoch %d, want 1 (the epoch it voted with)", p.Epoch)
		}
	}})
}

// Rule 4: a prepared vote without committables means [], so repeating it with [] or
// without any is the same vote.
func TestVotePreparedWithoutCommittables(t *testing.T) {
	t.Parallel()
	for _, first := range []json.RawMessage{nil, {}, json.RawMessage(`[]`)} {
		for _, again := range []json.RawMessage{nil, {}, json.RawMessage(`[]`)} {
			t.Run(fmt.Sprintf("%q then %q", first, again), func(t *testing.T) {
				t.Parallel()
				f := newRuleFixture(ruleCheckpoint(5))
				cp := f.cp(5)
				runRule(t, f, cp, func() error {
					return f.vote(cp, "a", epochA, Vote{Epoch: epochA, Kind: VotePrepared, Committables: first})
				}, outcome{changes: changeList{votes: []string{"5/a"}}, check: func(t *testing.T, f *ruleFixture) {
					expectVote(t, cp, "a", VotePrepared, epochA, json.RawMessage(`[]`), "")
				}})
				f.round.Mutation = Mutation{}
				runRule(t, f, cp, func() error {
					return f.vote(cp, "a", epochA, Vote{Epoch: epochA, Kind: VotePrepared, Committables: again})
				}, idempotent)
			})
		}
	}
}

// Committables are kept as sent, byte for byte: other bytes, even for equal JSON values, are
// another vote (Service compacts before the rules compare).
func TestVoteCommittablesCompareByBytes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		again json.RawMessage
		want  outcome
	}{
		{json.RawMessage(`[{"txn":"a-5"}]`), idempotent},
		{json.RawMessage(`[ {"txn":"a-5"} ]`), rejectedWith(CodeVoteConflict)},
		{json.RawMessage(`[{"txn":"a-5"},{"txn":"a-5"}]`), rejectedWith(CodeVoteConflict)},
		{json.RawMessage(`[]`), rejectedWith(CodeVoteConflict)},
	} {
		t.Run(string(c.again), func(t *testing.T) {
			t.Parallel()
			f := ruleStates[stateAPrepared]()
			cp := f.cp(5)
			runRule(t, f, cp, func() error {
				return f.vote(cp, "a", epochA, Vote{Epoch: epochA, Kind: VotePrepared, Committables: c.again})
			}, c.want)
		})
	}
}

// An abort vote's reason is not part of the vote's identity: repeating the abort with
// another reason is the same vote.
func TestVoteAbortRepeatedWithOtherReason(t *testing.T) {
	t.Parallel()
	f := ruleStates[stateAbortedBAbort]()
	cp := f.cp(5)
	runRule(t, f, cp, func() error {
		return f.vote(cp, "b", epochB, Vote{Epoch: epochB, Kind: VoteAbort, Reason: "out of memory"})
	}, outcome{check: func(t *testing.T, f *ruleFixture) {
		if p := cp.Participant("b"); p.Reason != "disk full" {
			t.Errorf("reason %q, want the first one kept", p.Reason)
		}
	}})
}

// Rule 2 and 9: the last vote of a checkpoint waiting for a lower one records the vote and
// leaves it preparing.
func TestVoteCompletingUnanimityWhileLowerOpen(t *testing.T) {
	t.Parallel()
	f := newRuleFixture(ruleCheckpoint(4), withPreparedVote(ruleCheckpoint(5), "a", epochA, committablesA), ruleCheckpoint(6))
	cp := f.cp(5)
	runRule(t, f, cp, func() error { return f.vote(cp, "b", epochB, bPrepared.vote) },
		outcome{changes: changeList{votes: []string{"5/b"}}, check: func(t *testing.T, f *ruleFixture) {
			expectStatus(t, cp, StatusPreparing)
			if cp.DecidedAt != nil {
				t.Errorf("decided_at %v on a preparing checkpoint", cp.DecidedAt)
			}
			expectPreparing(t, f.round, 4, 5, 6)
		}})
}

// A vote after the deadline: Service expires first, so the vote finds the checkpoint
// aborted (reason naming who did not vote) and gets already_decided.
func TestVoteAfterDeadline(t *testing.T) {
	t.Parallel()
	f := newRuleFixture(withPreparedVote(withDeadline(ruleCheckpoint(5), 10*time.Second), "a", epochA, committablesA))
	cp := f.cp(5)
	f.round.Expire()
	expectAborted(t, cp, "deadline passed; no vote in time from: b")
	f.round.Mutation = Mutation{}
	runRule(t, f, cp, func() error { return f.vote(cp, "b", epochB, bPrepared.vote) }, rejectedWith(CodeAlreadyDecided))
}

func TestCommit(t *testing.T) {
	t.Parallel()
	cases := map[string]outcome{
		stateNoVotes:              {code: CodeVotesMissing, missing: []string{"a", "b"}},
		stateAPrepared:            {code: CodeVotesMissing, missing: []string{"b"}},
		stateAllPreparedLowerOpen: rejectedWith(CodeLowerCheckpointOpen),
		stateAllPreparedManual: {changes: changeList{statuses: []string{"5:committing"}}, check: func(t *testing.T, f *ruleFixture) {
			expectCommitting(t, f.cp(5))
			expectStatus(t, f.cp(6), StatusPreparing)
			expectPreparing(t, f.round, 6)
		}},
		stateCommittingNoAcks:    idempotent,
		stateCommittingAAcked:    idempotent,
		stateCommitted:           idempotent,
		stateAbortedBAbort:       rejectedWith(CodeAlreadyDecided),
		stateAbortedAPrepared:    rejectedWith(CodeAlreadyDecided),
		stateAbortedAPreparedAck: rejectedWith(CodeAlreadyDecided),
	}
	for _, state := range ruleStateOrder {
		t.Run(state, func(t *testing.T) {
			t.Parallel()
			f := ruleStates[state]()
			cp := f.cp(5)
			runRule(t, f, cp, func() error { return f.round.Commit(cp) }, cases[state])
		})
	}
}

func TestCommitEdgeCases(t *testing.T) {
	t.Parallel()
	t.Run("missing votes are reported before a lower open checkpoint", func(t *testing.T) {
		t.Parallel()
		f := newRuleFixture(ruleCheckpoint(4), withPreparedVote(ruleCheckpoint(5), "b", epochB, committablesB))
		runRule(t, f, f.cp(5), func() error { return f.round.Commit(f.cp(5)) }, outcome{code: CodeVotesMissing, missing: []string{"a"}})
	})
	t.Run("an abort vote is a missing prepared vote", func(t *testing.T) {
		t.Parallel()
		// Not reachable through the rules (an abort vote decides at once), but Commit must
		// still refuse it.
		f := newRuleFixture(withAbortVote(withPreparedVote(ruleCheckpoint(5), "a", epochA, committablesA), "b", epochB, "no"))
		runRule(t, f, f.cp(5), func() error { return f.round.Commit(f.cp(5)) }, outcome{code: CodeVotesMissing, missing: []string{"b"}})
	})
	t.Run("a higher preparing checkpoint does not block", func(t *testing.T) {
		t.Parallel()
		f := newRuleFixture(bothVotedPrepared(manualCommit(ruleCheckpoint(5))), withPreparedVote(ruleCheckpoint(6), "a", epochA, nil))
		runRule(t, f, f.cp(5), func() error { return f.round.Commit(f.cp(5)) }, outcome{changes: changeList{statuses: []string{"5:committing"}}})
	})
	t.Run("a lower aborted or committing checkpoint does not block", func(t *testing.T) {
		t.Parallel()
		f := newRuleFixture(decidedAs(ruleCheckpoint(3), StatusAborted, "x"), decidedAs(bothVotedPrepared(ruleCheckpoint(4)), StatusCommitting, ""), bothVotedPrepared(manualCommit(ruleCheckpoint(5))))
		runRule(t, f, f.cp(5), func() error { return f.round.Commit(f.cp(5)) }, outcome{changes: changeList{statuses: []string{"5:committing"}}})
	})
	t.Run("commit releases the unanimous checkpoints waiting above it, in order, up to the next manual one", func(t *testing.T) {
		t.Parallel()
		f := newRuleFixture(
			bothVotedPrepared(manualCommit(ruleCheckpoint(5))),
			bothVotedPrepared(ruleCheckpoint(6)),
			bothVotedPrepared(ruleCheckpoint(7)),
			bothVotedPrepared(manualCommit(ruleCheckpoint(8))),
			bothVotedPrepared(ruleCheckpoint(9)),
		)
		runRule(t, f, f.cp(5), func() error { return f.round.Commit(f.cp(5)) }, outcome{
			changes: changeList{statuses: []string{"5:committing", "6:committing", "7:committing"}},
			check: func(t *testing.T, f *ruleFixture) {
				for _, id := range []int64{5, 6, 7} {
					expectCommitting(t, f.cp(id))
				}
				expectPreparing(t, f.round, 8, 9)
			},
		})
	})
	t.Run("the single participant's checkpoint", func(t *testing.T) {
		t.Parallel()
		cp := ruleCheckpoint(1)
		cp.Participants = cp.Participants[:1]
		f := newRuleFixture(manualCommit(withPreparedVote(cp, "a", 1, nil)))
		runRule(t, f, cp, func() error { return f.round.Commit(cp) }, outcome{changes: changeList{statuses: []string{"1:committing"}}})
	})
}

func TestAbort(t *testing.T) {
	t.Parallel()
	abortsWithCascade := func(lowerOpen bool) outcome {
		return outcome{changes: changeList{statuses: []string{"5:aborted", "6:aborted"}}, check: func(t *testing.T, f *ruleFixture) {
			expectAborted(t, f.cp(5), "operator said so")
			expectAborted(t, f.cp(6), "lower checkpoint 5 aborted")
			if lowerOpen {
				expectStatus(t, f.cp(4), StatusPreparing)
				expectPreparing(t, f.round, 4)
			} else {
				expectPreparing(t, f.round)
			}
		}}
	}
	cases := map[string]outcome{
		stateNoVotes:              abortsWithCascade(false),
		stateAPrepared:            abortsWithCascade(false),
		stateAllPreparedLowerOpen: abortsWithCascade(true),
		stateAllPreparedManual:    abortsWithCascade(false),
		stateCommittingNoAcks:     rejectedWith(CodeAlreadyDecided),
		stateCommittingAAcked:     rejectedWith(CodeAlreadyDecided),
		stateCommitted:            rejectedWith(CodeAlreadyDecided),
		stateAbortedBAbort:        idempotent, // the first reason stays
		stateAbortedAPrepared:     idempotent,
		stateAbortedAPreparedAck:  idempotent,
	}
	for _, state := range ruleStateOrder {
		t.Run(state, func(t *testing.T) {
			t.Parallel()
			f := ruleStates[state]()
			cp := f.cp(5)
			runRule(t, f, cp, func() error { return f.round.Abort(cp, "operator said so") }, cases[state])
		})
	}
}

func TestAbortEdgeCases(t *testing.T) {
	t.Parallel()
	t.Run("default reason", func(t *testing.T) {
		t.Parallel()
		f := newRuleFixture(ruleCheckpoint(5))
		runRule(t, f, f.cp(5), func() error { return f.round.Abort(f.cp(5), "") }, outcome{
			changes: changeList{statuses: []string{"5:aborted"}},
			check:   func(t *testing.T, f *ruleFixture) { expectAborted(t, f.cp(5), "aborted on request") },
		})
	})
	t.Run("cascade reaches every higher preparing checkpoint, unanimous or manual, and no lower one", func(t *testing.T) {
		t.Parallel()
		f := newRuleFixture(
			decidedAs(ruleCheckpoint(2), StatusAborted, "earlier"),
			ruleCheckpoint(3),
			withPreparedVote(ruleCheckpoint(4), "a", epochA, committablesA),
			bothVotedPrepared(ruleCheckpoint(5)),
			bothVotedPrepared(manualCommit(ruleCheckpoint(6))),
			ruleCheckpoint(7),
		)
		runRule(t, f, f.cp(4), func() error { return f.round.Abort(f.cp(4), "") }, outcome{
			changes: changeList{statuses: []string{"4:aborted", "5:aborted", "6:aborted", "7:aborted"}},
			check: func(t *testing.T, f *ruleFixture) {
				expectAborted(t, f.cp(4), "aborted on request")
				for _, id := range []int64{5, 6, 7} {
					expectAborted(t, f.cp(id), "lower checkpoint 4 aborted")
				}
				expectStatus(t, f.cp(3), StatusPreparing)
				if f.cp(2).AbortReason != "earlier" {
					t.Errorf("checkpoint 2 changed: %+v", f.cp(2))
				}
				expectPreparing(t, f.round, 3)
			},
		})
	})
}

func TestAck(t *testing.T) {
	t.Parallel()
	ackedNow := func(name string, status Status) func(*testing.T, *ruleFixture) {
		return func(t *testing.T, f *ruleFixture) {
			cp := f.cp(5)
			if p := cp.Participant(name); !sameInstant(p.AckedAt, &ruleNow) {
				t.Errorf("%s acked_at %v, want %v", name, p.AckedAt, ruleNow)
			}
			expectStatus(t, cp, status)
		}
	}
	cases := []struct {
		state       string
		participant string
		want        outcome
	}{
		{stateNoVotes, "a", rejectedWith(CodeNotDecided)},
		{stateAPrepared, "a", rejectedWith(CodeNotDecided)},
		{stateAllPreparedLowerOpen, "a", rejectedWith(CodeNotDecided)},
		{stateAllPreparedManual, "a", rejectedWith(CodeNotDecided)},
		{stateCommittingNoAcks, "a", outcome{changes: changeList{acks: []string{"5/a"}}, check: ackedNow("a", StatusCommitting)}},
		{stateCommittingAAcked, "a", idempotent},
		{stateCommitted, "a", idempotent},
		{stateAbortedBAbort, "a", outcome{changes: changeList{acks: []string{"5/a"}}, check: ackedNow("a", StatusAborted)}},
		{stateAbortedAPrepared, "a", outcome{changes: changeList{acks: []string{"5/a"}}, check: ackedNow("a", StatusAborted)}},
		{stateAbortedAPreparedAck, "a", idempotent},

		{stateNoVotes, "b", rejectedWith(CodeNotDecided)},
		{stateCommittingNoAcks, "b", outcome{changes: changeList{acks: []string{"5/b"}}, check: ackedNow("b", StatusCommitting)}},
		{stateCommittingAAcked, "b", outcome{changes: changeList{acks: []string{"5/b"}, statuses: []string{"5:committed"}}, check: func(t *testing.T, f *ruleFixture) {
			ackedNow("b", StatusCommitted)(t, f)
			cp := f.cp(5)
			if !sameInstant(cp.CompletedAt, &ruleNow) || !sameInstant(cp.DecidedAt, afterT0(5*time.Second)) {
				t.Errorf("completed_at %v decided_at %v, want %v and the decision's time", cp.CompletedAt, cp.DecidedAt, ruleNow)
			}
		}}},
		{stateCommitted, "b", idempotent},
		{stateAbortedBAbort, "b", outcome{changes: changeList{acks: []string{"5/b"}}, check: func(t *testing.T, f *ruleFixture) {
			ackedNow("b", StatusAborted)(t, f)
			if cp := f.cp(5); !sameInstant(cp.CompletedAt, afterT0(5*time.Second)) {
				t.Errorf("completed_at changed to %v", cp.CompletedAt)
			}
		}}},
		{stateAbortedAPrepared, "b", outcome{changes: changeList{acks: []string{"5/b"}}, check: ackedNow("b", StatusAborted)}},
	}
	for _, c := range cases {
		t.Run(c.state+"/"+c.participant, func(t *testing.T) {
			t.Parallel()
			f := ruleStates[c.state]()
			cp := f.cp(5)
			current := map[string]int64{"a": epochA, "b": epochB}[c.participant]
			runRule(t, f, cp, func() error { return f.ack(cp, c.participant, current, current) }, c.want)
		})
	}
}

// Fencing comes before not_decided and before idempotency, in every state: also when the
// participant already acked with its old epoch and repeats that very ack.
func TestAckRejectedInEveryState(t *testing.T) {
	t.Parallel()
	for _, state := range ruleStateOrder {
		for _, c := range []struct {
			name           string
			participant    string
			current, epoch int64
			code           Code
		}{
			{"stale epoch", "a", epochA, epochA - 1, CodeFenced},
			{"future epoch", "a", epochA, epochA + 1, CodeFenced},
			{"not registered", "a", 0, 1, CodeNotRegistered},
			{"not registered, epoch 0", "a", 0, 0, CodeNotRegistered},
			{"unknown participant", "z", 1, 1, CodeNotFound},
		} {
			t.Run(state+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				f := ruleStates[state]()
				cp := f.cp(5)
				runRule(t, f, cp, func() error { return f.ack(cp, c.participant, c.current, c.epoch) }, rejectedWith(c.code))
			})
		}
	}
}

// The last ack of a one-participant checkpoint completes it; acks of a bigger checkpoint
// complete it only with the very last one.
func TestAckSequence(t *testing.T) {
	t.Parallel()
	cp := decidedAs(bothVotedPrepared(ruleCheckpoint(5)), StatusCommitting, "")
	cp.Participants = append(cp.Participants, ParticipantState{Name: "c", Epoch: 1, Vote: VotePrepared, Committables: json.RawMessage(`[]`), VotedAt: afterT0(time.Second)})
	f := newRuleFixture(cp)
	for i, name := range []string{"c", "a", "c", "b"} {
		f.round.Mutation = Mutation{}
		current := map[string]int64{"a": epochA, "b": epochB, "c": 1}[name]
		if err := f.ack(cp, name, current, current); err != nil {
			t.Fatalf("ack %d by %s: %v", i, name, err)
		}
		wantStatus := StatusCommitting
		if i == 3 {
			wantStatus = StatusCommitted
		}
		expectStatus(t, cp, wantStatus)
	}
	if got := changesOf(f.round); !got.equal(changeList{acks: []string{"5/b"}, statuses: []string{"5:committed"}}) {
		t.Errorf("last ack changes: %s", got)
	}
}

func TestRegister(t *testing.T) {
	t.Parallel()
	t.Run("aborts where it had not voted, with the cascade, and leaves where it voted", func(t *testing.T) {
		t.Parallel()
		f := newRuleFixture(
			withPreparedVote(ruleCheckpoint(4), "a", epochA, committablesA),
			withPreparedVote(ruleCheckpoint(5), "b", epochB, committablesB),
			withPreparedVote(ruleCheckpoint(6), "a", epochA, committablesA),
		)
		before := f.snapshot()
		f.register("a", epochA+1)
		if got, w := changesOf(f.round), (changeList{statuses: []string{"5:aborted", "6:aborted"}}); !got.equal(w) {
			t.Errorf("changes %s, want %s", got, w)
		}
		for _, p := range changeProblems(before, f.all, f.round) {
			t.Error(p)
		}
		expectStatus(t, f.cp(4), StatusPreparing)
		expectAborted(t, f.cp(5), "participant a registered again (epoch 3) before voting")
		expectAborted(t, f.cp(6), "lower checkpoint 5 aborted")
		expectPreparing(t, f.round, 4)
	})
	t.Run("not voted in the lowest: everything aborts", func(t *testing.T) {
		t.Parallel()
		f := newRuleFixture(ruleCheckpoint(4), withPreparedVote(ruleCheckpoint(5), "a", epochA, committablesA), ruleCheckpoint(6))
		before := f.snapshot()
		f.register("a", epochA+1)
		if got, w := changesOf(f.round), (changeList{statuses: []string{"4:aborted", "5:aborted", "6:aborted"}}); !got.equal(w) {
			t.Errorf("changes %s, want %s", got, w)
		}
		for _, p := range changeProblems(before, f.all, f.round) {
			t.Error(p)
		}
		expectAborted(t, f.cp(4), "participant a registered again (epoch 3) before voting")
		expectAborted(t, f.cp(5), "lower checkpoint 4 aborted")
		expectAborted(t, f.cp(6), "lower checkpoint 4 aborted")
	})
	for name, c := range map[string]struct {
		participant string
		build       func() *ruleFixture
	}{
		"voted everywhere": {"a", func() *ruleFixture {
			return newRuleFixture(withPreparedVote(ruleCheckpoint(4), "a", epochA, committablesA), bothVotedPrepared(ruleCheckpoint(5)))
		}},
		"voted abort": {"b", ruleStates[stateAbortedBAbort]},
		"nothing preparing": {"a", func() *ruleFixture {
			return newRuleFixture(decidedAs(ruleCheckpoint(4), StatusAborted, "x"), decidedAs(bothVotedPrepared(ruleCheckpoint(5)), StatusCommitting, ""))
		}},
		"not a participant of the checkpoints": {"c", func() *ruleFixture { return newRuleFixture(ruleCheckpoint(4), ruleCheckpoint(5)) }},
	} {
		t.Run(name+": changes nothing", func(t *testing.T) {
			t.Parallel()
			f := c.build()
			before := f.snapshot()
			f.register(c.participant, 9)
			for _, p := range unchangedProblems(before, f.all, f.round) {
				t.Error(p)
			}
		})
	}
}

func TestExpire(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		cps     []*Checkpoint
		changes changeList
		check   func(t *testing.T, f *ruleFixture)
	}{
		{
			name:    "deadline equal to now counts as passed; the reason names who did not vote",
			cps:     []*Checkpoint{withPreparedVote(withDeadline(ruleCheckpoint(5), 10*time.Second), "a", epochA, committablesA)},
			changes: changeList{statuses: []string{"5:aborted"}},
			check: func(t *testing.T, f *ruleFixture) {
				expectAborted(t, f.cp(5), "deadline passed; no vote in time from: b")
			},
		},
		{
			name:  "deadline a nanosecond after now has not passed",
			cps:   []*Checkpoint{withDeadline(ruleCheckpoint(5), 10*time.Second+time.Nanosecond)},
			check: func(t *testing.T, f *ruleFixture) { expectStatus(t, f.cp(5), StatusPreparing) },
		},
		{
			name:    "no vote at all names everyone, in the checkpoint's order",
			cps:     []*Checkpoint{withDeadline(ruleCheckpoint(5), time.Second)},
			changes: changeList{statuses: []string{"5:aborted"}},
			check: func(t *testing.T, f *ruleFixture) {
				expectAborted(t, f.cp(5), "deadline passed; no vote in time from: a, b")
			},
		},
		{
			name:    "an expired checkpoint takes every higher preparing one with it",
			cps:     []*Checkpoint{withDeadline(ruleCheckpoint(4), time.Second), bothVotedPrepared(ruleCheckpoint(5)), ruleCheckpoint(6)},
			changes: changeList{statuses: []string{"4:aborted", "5:aborted", "6:aborted"}},
			check: func(t *testing.T, f *ruleFixture) {
				expectAborted(t, f.cp(4), "deadline passed; no vote in time from: a, b")
				expectAborted(t, f.cp(5), "lower checkpoint 4 aborted")
				expectAborted(t, f.cp(6), "lower checkpoint 4 aborted")
				expectPreparing(t, f.round)
			},
		},
		{
			name:    "a higher one expiring first leaves the lower one preparing",
			cps:     []*Checkpoint{ruleCheckpoint(4), withDeadline(withPreparedVote(ruleCheckpoint(5), "b", epochB, committablesB), time.Second), ruleCheckpoint(6)},
			changes: changeList{statuses: []string{"5:aborted", "6:aborted"}},
			check: func(t *testing.T, f *ruleFixture) {
				expectStatus(t, f.cp(4), StatusPreparing)
				expectAborted(t, f.cp(5), "deadline passed; no vote in time from: a")
				expectAborted(t, f.cp(6), "lower checkpoint 5 aborted")
				expectPreparing(t, f.round, 4)
			},
		},
		{
			name:    "rule 6 and 9: a unanimous checkpoint waiting for a lower one is aborted at its deadline",
			cps:     []*Checkpoint{ruleCheckpoint(4), withDeadline(bothVotedPrepared(ruleCheckpoint(5)), 10*time.Second)},
			changes: changeList{statuses: []string{"5:aborted"}},
			check: func(t *testing.T, f *ruleFixture) {
				expectStatus(t, f.cp(4), StatusPreparing)
				expectAborted(t, f.cp(5), "deadline passed with every vote in while a lower checkpoint was still open")
			},
		},
		{
			name:    "a unanimous manual checkpoint nobody committed is aborted at its deadline",
			cps:     []*Checkpoint{withDeadline(bothVotedPrepared(manualCommit(ruleCheckpoint(5))), 10*time.Second)},
			changes: changeList{statuses: []string{"5:aborted"}},
			check: func(t *testing.T, f *ruleFixture) {
				expectAborted(t, f.cp(5), "deadline passed with every vote in but no commit decided (auto_commit is off)")
			},
		},
		{
			name:    "several expired: the lowest is expired, the others cascade",
			cps:     []*Checkpoint{withDeadline(ruleCheckpoint(4), time.Second), withDeadline(ruleCheckpoint(5), time.Second)},
			changes: changeList{statuses: []string{"4:aborted", "5:aborted"}},
			check: func(t *testing.T, f *ruleFixture) {
				expectAborted(t, f.cp(4), "deadline passed; no vote in time from: a, b")
				expectAborted(t, f.cp(5), "lower checkpoint 4 aborted")
			},
		},
		{
			name: "decided checkpoints past their deadline are not touched",
			cps: []*Checkpoint{
				withDeadline(decidedAs(bothVotedPrepared(ruleCheckpoint(3)), StatusCommitting, ""), time.Second),
				withDeadline(decidedAs(ruleCheckpoint(4), StatusAborted, "x"), time.Second),
			},
		},
		{name: "nothing preparing", cps: nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newRuleFixture(c.cps...)
			before := f.snapshot()
			f.round.Expire()
			if got := changesOf(f.round); !got.equal(c.changes) {
				t.Errorf("changes %s, want %s", got, c.changes)
			}
			if c.changes.equal(changeList{}) {
				for _, p := range unchangedProblems(before, f.all, f.round) {
					t.Error(p)
				}
			}
			for _, p := range changeProblems(before, f.all, f.round) {
				t.Error(p)
			}
			if c.check != nil {
				c.check(t, f)
			}
		})
	}
}

// Rule 9 end to end through the rules: with several checkpoints preparing, unanimous higher
// ones wait for the lower ones and commit in order once they do.
func TestCommitOrder(t *testing.T) {
	t.Parallel()
	vote := func(t *testing.T, f *ruleFixture, id int64, name string) changeList {
		t.Helper()
		f.round.Mutation = Mutation{}
		current := map[string]int64{"a": epochA, "b": epochB}[name]
		if err := f.vote(f.cp(id), name, current, Vote{Epoch: current, Kind: VotePrepared}); err != nil {
			t.Fatalf("vote %d/%s: %v", id, name, err)
		}
		return changesOf(f.round)
	}
	t.Run("auto commit", func(t *testing.T) {
		t.Parallel()
		f := newRuleFixture(ruleCheckpoint(1), ruleCheckpoint(2), ruleCheckpoint(3))
		for _, v := range []struct {
			id   int64
			name string
		}{{3, "a"}, {3, "b"}, {2, "b"}, {2, "a"}, {1, "a"}} {
			if got := vote(t, f, v.id, v.name); len(got.statuses) > 0 {
				t.Fatalf("vote %d/%s decided %v while checkpoint 1 is preparing", v.id, v.name, got.statuses)
			}
		}
		expectPreparing(t, f.round, 1, 2, 3)
		got := vote(t, f, 1, "b")
		if w := (changeList{votes: []string{"1/b"}, statuses: []string{"1:committing", "2:committing", "3:committing"}}); !got.equal(w) {
			t.Errorf("last vote of 1: %s, want %s", got, w)
		}
		expectPreparing(t, f.round)
	})
	t.Run("a lower checkpoint completing releases only up to the first incomplete one", func(t *testing.T) {
		t.Parallel()
		f := newRuleFixture(ruleCheckpoint(1), ruleCheckpoint(2), ruleCheckpoint(3), ruleCheckpoint(4))
		vote(t, f, 2, "a")
		vote(t, f, 2, "b")
		vote(t, f, 3, "a")
		vote(t, f, 4, "a")
		vote(t, f, 4, "b")
		vote(t, f, 1, "a")
		if got, w := vote(t, f, 1, "b"), (changeList{votes: []string{"1/b"}, statuses: []string{"1:committing", "2:committing"}}); !got.equal(w) {
			t.Errorf("last vote of 1: %s, want %s", got, w)
		}
		if got, w := vote(t, f, 3, "b"), (changeList{votes: []string{"3/b"}, statuses: []string{"3:committing", "4:committing"}}); !got.equal(w) {
			t.Errorf("last vote of 3: %s, want %s", got, w)
		}
	})
	t.Run("auto_commit off blocks the ones above it until committed", func(t *testing.T) {
		t.Parallel()
		f := newRuleFixture(ruleCheckpoint(1), manualCommit(ruleCheckpoint(2)), ruleCheckpoint(3))
		vote(t, f, 3, "a")
		vote(t, f, 3, "b")
		vote(t, f, 2, "a")
		vote(t, f, 2, "b")
		vote(t, f, 1, "a")
		if got, w := vote(t, f, 1, "b"), (changeList{votes: []string{"1/b"}, statuses: []string{"1:committing"}}); !got.equal(w) {
			t.Errorf("last vote of 1: %s, want %s", got, w)
		}
		expectPreparing(t, f.round, 2, 3)
		f.round.Mutation = Mutation{}
		runRule(t, f, f.cp(3), func() error { return f.round.Commit(f.cp(3)) }, rejectedWith(CodeLowerCheckpointOpen))
		f.round.Mutation = Mutation{}
		runRule(t, f, f.cp(2), func() error { return f.round.Commit(f.cp(2)) }, outcome{changes: changeList{statuses: []string{"2:committing", "3:committing"}}})
	})
	t.Run("auto_commit off at the lowest is not committed by its last vote", func(t *testing.T) {
		t.Parallel()
		f := newRuleFixture(manualCommit(ruleCheckpoint(1)), ruleCheckpoint(2))
		vote(t, f, 2, "a")
		vote(t, f, 2, "b")
		vote(t, f, 1, "a")
		if got, w := vote(t, f, 1, "b"), (changeList{votes: []string{"1/b"}}); !got.equal(w) {
			t.Errorf("last vote of 1: %s, want %s", got, w)
		}
		expectPreparing(t, f.round, 1, 2)
	})
	t.Run("aborting the lowest aborts the unanimous ones waiting above it", func(t *testing.T) {
		t.Parallel()
		f := newRuleFixture(ruleCheckpoint(1), ruleCheckpoint(2), ruleCheckpoint(3))
		vote(t, f, 2, "a")
		vote(t, f, 2, "b")
		vote(t, f, 3, "a")
		vote(t, f, 3, "b")
		f.round.Mutation = Mutation{}
		if err := f.vote(f.cp(1), "a", epochA, Vote{Epoch: epochA, Kind: VoteAbort}); err != nil {
			t.Fatal(err)
		}
		if got, w := changesOf(f.round), (changeList{votes: []string{"1/a"}, statuses: []string{"1:aborted", "2:aborted", "3:aborted"}}); !got.equal(w) {
			t.Errorf("abort vote on 1: %s, want %s", got, w)
		}
	})
	t.Run("Advance on its own", func(t *testing.T) {
		t.Parallel()
		f := newRuleFixture(bothVotedPrepared(ruleCheckpoint(1)), bothVotedPrepared(ruleCheckpoint(2)), withPreparedVote(ruleCheckpoint(3), "a", 1, nil), bothVotedPrepared(ruleCheckpoint(4)))
		before := f.snapshot()
		f.round.Advance()
		if got, w := changesOf(f.round), (changeList{statuses: []string{"1:committing", "2:committing"}}); !got.equal(w) {
			t.Errorf("Advance: %s, want %s", got, w)
		}
		for _, p := range changeProblems(before, f.all, f.round) {
			t.Error(p)
		}
		expectPreparing(t, f.round, 3, 4)
		f.round.Mutation = Mutation{}
		before = f.snapshot()
		f.round.Advance()
		for _, p := range unchangedProblems(before, f.all, f.round) {
			t.Error("second Advance: " + p)
		}
	})
}

// Every rejection of every rule, gathered: the error is the code's *Error, matches its
// sentinel and no other, carries the checkpoint as it stands, and nothing changed.
func TestRejectionsCarryTheCheckpointAndChangeNothing(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		state string
		act   func(r *JobState, cp *Checkpoint) error
		code  Code
	}{
		{"vote, unknown participant", stateNoVotes, func(r *JobState, cp *Checkpoint) error {
			return withEpoch(r, "z", 1).Vote(cp, "z", Vote{Epoch: 1, Kind: VotePrepared})
		}, CodeNotFound},
		{"vote, not registered", stateNoVotes, func(r *JobState, cp *Checkpoint) error {
			return withEpoch(r, "a", 0).Vote(cp, "a", Vote{Epoch: 1, Kind: VotePrepared})
		}, CodeNotRegistered},
		{"vote, fenced", stateNoVotes, func(r *JobState, cp *Checkpoint) error {
			return withEpoch(r, "a", 2).Vote(cp, "a", Vote{Epoch: 1, Kind: VotePrepared})
		}, CodeFenced},
		{"vote, conflict", stateAPrepared, func(r *JobState, cp *Checkpoint) error { return withEpoch(r, "a", epochA).Vote(cp, "a", aAbort.vote) }, CodeVoteConflict},
		{"vote, already decided", stateAbortedAPrepared, func(r *JobState, cp *Checkpoint) error {
			return withEpoch(r, "b", epochB).Vote(cp, "b", bPrepared.vote)
		}, CodeAlreadyDecided},
		{"commit, votes missing", stateAPrepared, func(r *JobState, cp *Checkpoint) error { return r.Commit(cp) }, CodeVotesMissing},
		{"commit, lower open", stateAllPreparedLowerOpen, func(r *JobState, cp *Checkpoint) error { return r.Commit(cp) }, CodeLowerCheckpointOpen},
		{"commit, already decided", stateAbortedBAbort, func(r *JobState, cp *Checkpoint) error { return r.Commit(cp) }, CodeAlreadyDecided},
		{"abort, already decided", stateCommittingNoAcks, func(r *JobState, cp *Checkpoint) error { return r.Abort(cp, "x") }, CodeAlreadyDecided},
		{"abort, already committed", stateCommitted, func(r *JobState, cp *Checkpoint) error { return r.Abort(cp, "x") }, CodeAlreadyDecided},
		{"ack, not decided", stateAllPreparedManual, func(r *JobState, cp *Checkpoint) error { return withEpoch(r, "a", epochA).Ack(cp, "a", epochA) }, CodeNotDecided},
		{"ack, fenced", stateCommittingNoAcks, func(r *JobState, cp *Checkpoint) error { return withEpoch(r, "a", epochA).Ack(cp, "a", 1) }, CodeFenced},
		{"ack, not registered", stateCommittingNoAcks, func(r *JobState, cp *Checkpoint) error { return withEpoch(r, "a", 0).Ack(cp, "a", 1) }, CodeNotRegistered},
		{"ack, unknown participant", stateCommittingNoAcks, func(r *JobState, cp *Checkpoint) error { return withEpoch(r, "z", 1).Ack(cp, "z", 1) }, CodeNotFound},
	}
	seen := map[Code]bool{}
	for _, c := range cases {
		seen[c.code] = true
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := ruleStates[c.state]()
			cp := f.cp(5)
			before := f.snapshot()
			err := c.act(f.round, cp)
			var missing []string
			if c.code == CodeVotesMissing {
				missing = []string{"b"}
			}
			if p := rejectionProblem(err, c.code, cp, missing); p != "" {
				t.Fatal(p)
			}
			for _, p := range unchangedProblems(before, f.all, f.round) {
				t.Error(p)
			}
			// Wrapped as Service and stores do, the error still matches its sentinel.
			wrapped := fmt.Errorf("record vote orders/5/a: %w", err)
			if !errors.Is(wrapped, sentinelsByCode[c.code]) || !IsRejection(wrapped) {
				t.Errorf("wrapped %v: errors.Is %v, IsRejection %v", wrapped, errors.Is(wrapped, sentinelsByCode[c.code]), IsRejection(wrapped))
			}
			var e *Error
			if !errors.As(wrapped, &e) || e.Checkpoint != cp {
				t.Errorf("errors.As on the wrapped error lost the checkpoint")
			}
		})
	}
	for _, code := range []Code{CodeNotFound, CodeNotRegistered, CodeFenced, CodeVoteConflict, CodeAlreadyDecided, CodeVotesMissing, CodeLowerCheckpointOpen, CodeNotDecided} {
		if !seen[code] {
			t.Errorf("no case for %s", code)
		}
	}
}

func TestErrorSentinels(t *testing.T) {
	t.Parallel()
	for code, sentinel := range sentinelsByCode {
		t.Run(string(code), func(t *testing.T) {
			t.Parallel()
			err := reject(code, ruleCheckpoint(1), "something about %d", 1)
			for other, o := range sentinelsByCode {
				if got := errors.Is(err, o); got != (other == code) {
					t.Errorf("errors.Is(%s rejection, Err of %s) = %v", code, other, got)
				}
			}
			if !errors.Is(sentinel, sentinel) {
				t.Errorf("the sentinel does not match itself")
			}
			// A sentinel does not match a specific rejection: Is looks at the target.
			if errors.Is(sentinel, err) {
				t.Errorf("errors.Is(sentinel, rejection) = true")
			}
			if !strings.HasPrefix(err.Error(), string(code)+": something about 1") {
				t.Errorf("Error() = %q", err.Error())
			}
		})
	}
	t.Run("unavailable", func(t *testing.T) {
		t.Parallel()
		cause := errors.New("connection refused")
		err := fmt.Errorf("load job: %w", Unavailable(cause))
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, cause) {
			t.Errorf("Unavailable: errors.Is unavailable %v, cause %v", errors.Is(err, ErrUnavailable), errors.Is(err, cause))
		}
		if IsRejection(err) {
			t.Errorf("unavailability is a rejection")
		}
		if !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("Error() = %q lost the cause", err.Error())
		}
	})
	t.Run("other errors", func(t *testing.T) {
		t.Parallel()
		if IsRejection(errors.New("boom")) || IsRejection(nil) {
			t.Errorf("IsRejection on a plain error or nil")
		}
		if errors.Is(errors.New(string(CodeFenced)), ErrFenced) {
			t.Errorf("a plain error matched ErrFenced")
		}
	})
}

func TestOwed(t *testing.T) {
	t.Parallel()
	type owed struct{ a, b Action } // "" = nothing owed
	cases := map[string]owed{
		stateNoVotes:              {ActionVote, ActionVote},
		stateAPrepared:            {"", ActionVote},
		stateAllPreparedLowerOpen: {"", ""},
		stateAllPreparedManual:    {"", ""},
		stateCommittingNoAcks:     {ActionCommit, ActionCommit},
		stateCommittingAAcked:     {"", ActionCommit},
		stateCommitted:            {"", ""},
		stateAbortedBAbort:        {"", ""}, // a never voted, b voted abort: nothing to roll back
		stateAbortedAPrepared:     {ActionAbort, ""},
		stateAbortedAPreparedAck:  {"", ""},
	}
	for _, state := range ruleStateOrder {
		t.Run(state, func(t *testing.T) {
			t.Parallel()
			cp := ruleStates[state]().cp(5)
			before := frozenCopy(cp)
			for name, w := range map[string]Action{"a": cases[state].a, "b": cases[state].b, "z": ""} {
				action, ok := Owed(cp, name)
				if action != w || ok != (w != "") {
					t.Errorf("Owed(%s) = %q, %v, want %q", name, action, ok, w)
				}
			}
			if !reflect.DeepEqual(before, frozenCopy(cp)) {
				t.Errorf("Owed changed the checkpoint")
			}
		})
	}
}

func TestOwesAnything(t *testing.T) {
	t.Parallel()
	cases := map[string]bool{
		stateNoVotes:              true,
		stateAPrepared:            true,
		stateAllPreparedLowerOpen: true,
		stateAllPreparedManual:    true,
		stateCommittingNoAcks:     true,
		stateCommittingAAcked:     true,
		stateCommitted:            false,
		stateAbortedBAbort:        false,
		stateAbortedAPrepared:     true,
		stateAbortedAPreparedAck:  false,
	}
	for _, state := range ruleStateOrder {
		t.Run(state, func(t *testing.T) {
			t.Parallel()
			if got := OwesAnything(ruleStates[state]().cp(5)); got != cases[state] {
				t.Errorf("OwesAnything = %v, want %v", got, cases[state])
			}
		})
	}
	t.Run("committing with every ack in still owes", func(t *testing.T) {
		t.Parallel()
		// Not a state the rules leave (the last ack commits), but one that must not let a
		// job be deleted.
		if !OwesAnything(ackedBy(ackedBy(decidedAs(bothVotedPrepared(ruleCheckpoint(5)), StatusCommitting, ""), "a"), "b")) {
			t.Errorf("OwesAnything = false")
		}
	})
}

func TestPendingItems(t *testing.T) {
	t.Parallel()
	build := func() []*Checkpoint {
		// Out of order on purpose: pending lists are oldest first.
		return []*Checkpoint{
			withPreparedVote(ruleCheckpoint(9), "b", epochB, committablesB),                                                               // a: vote
			decidedAs(bothVotedPrepared(ruleCheckpoint(2)), StatusCommitting, ""),                                                         // a: commit
			ackedBy(decidedAs(bothVotedPrepared(ruleCheckpoint(1)), StatusCommitted, ""), "a"),                                            // nothing
			decidedAs(withPreparedVote(ruleCheckpoint(7), "a", epochA, json.RawMessage(`[1,{"x":[true,null]},"s"]`)), StatusAborted, "x"), // a: abort
			ackedBy(decidedAs(withPreparedVote(ruleCheckpoint(3), "a", epochA, committablesA), StatusAborted, "x"), "a"),                  // nothing
			withPreparedVote(ruleCheckpoint(8), "a", epochA, committablesA),                                                               // nothing
			decidedAs(withAbortVote(ruleCheckpoint(6), "a", epochA, "no"), StatusAborted, "x"),                                            // nothing
			ackedBy(decidedAs(bothVotedPrepared(ruleCheckpoint(4)), StatusCommitting, ""), "a"),                                           // nothing
			decidedAs(ruleCheckpoint(5), StatusAborted, "x"),                                                                              // nothing
		}
	}
	t.Run("a", func(t *testing.T) {
		t.Parallel()
		got := PendingItems(ruleNow, build(), "a")
		w := []PendingItem{
			{Checkpoint: 2, Status: StatusCommitting, Action: ActionCommit, Committables: committablesA},
			{Checkpoint: 7, Status: StatusAborted, Action: ActionAbort, Committables: json.RawMessage(`[1,{"x":[true,null]},"s"]`)},
			{Checkpoint: 9, Status: StatusPreparing, Action: ActionVote, Committables: json.RawMessage(`[]`)},
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("PendingItems(a) =\n%+v\nwant\n%+v", got, w)
		}
	})
	t.Run("b", func(t *testing.T) {
		t.Parallel()
		got := PendingItems(ruleNow, build(), "b")
		w := []PendingItem{
			{Checkpoint: 2, Status: StatusCommitting, Action: ActionCommit, Committables: committablesB},
			{Checkpoint: 4, Status: StatusCommitting, Action: ActionCommit, Committables: committablesB},
			{Checkpoint: 8, Status: StatusPreparing, Action: ActionVote, Committables: json.RawMessage(`[]`)},
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("PendingItems(b) =\n%+v\nwant\n%+v", got, w)
		}
	})
	for name, cps := range map[string][]*Checkpoint{
		"nil":               nil,
		"nothing owed":      {ackedBy(decidedAs(bothVotedPrepared(ruleCheckpoint(1)), StatusCommitted, ""), "a")},
		"not a participant": {ruleCheckpoint(1)},
	} {
		t.Run(name+" gives an empty list, not nil", func(t *testing.T) {
			t.Parallel()
			participant := "a"
			if name == "not a participant" {
				participant = "z"
			}
			got := PendingItems(ruleNow, cps, participant)
			if got == nil || len(got) != 0 {
				t.Errorf("PendingItems = %#v, want []PendingItem{}", got)
			}
		})
	}
	t.Run("does not change the checkpoints", func(t *testing.T) {
		t.Parallel()
		cps := build()
		var before []*Checkpoint
		for _, cp := range cps {
			before = append(before, frozenCopy(cp))
		}
		PendingItems(ruleNow, cps, "a")
		for _, cp := range cps {
			for _, b := range before {
				if b.ID == cp.ID && !reflect.DeepEqual(b, frozenCopy(cp)) {
					t.Errorf("checkpoint %d changed", cp.ID)
				}
			}
		}
	})
}

// ruleModel is one job driven through the rules as Service drives them: every event first
// expires what is due (begin), then applies one rule on the same JobState.
type ruleModel struct {
	maxConcurrent int
	names         []string
	epochs        map[string]int64
	clock         time.Time
	cps           []*Checkpoint // every checkpoint, by id

	// What the invariants compare with: the state after the previous step.
	prev          map[int64]*Checkpoint
	prevPreparing []int64
}

func newRuleModel(t *rapid.T) *ruleModel {
	m := &ruleModel{
		maxConcurrent: rapid.IntRange(1, 4).Draw(t, "max_concurrent_checkpoints"),
		names:         []string{"a", "b", "c"}[:rapid.IntRange(1, 3).Draw(t, "participants")],
		epochs:        map[string]int64{},
		clock:         ruleT0,
		prev:          map[int64]*Checkpoint{},
	}
	for _, name := range m.names {
		m.epochs[name] = rapid.SampledFrom([]int64{1, 1, 1, 0}).Draw(t, "epoch of "+name)
	}
	return m
}

func (m *ruleModel) preparing() []*Checkpoint {
	var out []*Checkpoint
	for _, cp := range m.cps {
		if cp.Status == StatusPreparing {
			out = append(out, cp)
		}
	}
	return out
}

func (m *ruleModel) fail(t *rapid.T, problems []string, what string) {
	t.Helper()
	if len(problems) > 0 {
		t.Fatalf("%s:\n%s", what, strings.Join(problems, "\n"))
	}
}

// begin is Service.update's start: a JobState on the preparing checkpoints, expired ones
// aborted, the changes checked and then cleared.
func (m *ruleModel) begin(t *rapid.T) *JobState {
	r := &JobState{Now: m.clock, Job: &Job{Name: "j", Epochs: m.epochs}, Preparing: m.preparing()}
	before := takeRuleSnapshot(m.cps, r)
	r.Expire()
	m.fail(t, changeProblems(before, m.cps, r), "Expire")
	for _, cp := range r.Mutation.Statuses {
		if cp.Status != StatusAborted {
			t.Fatalf("Expire made checkpoint %d %s", cp.ID, cp.Status)
		}
	}
	r.Mutation = Mutation{}
	return r
}

// apply runs one rule about target and checks its error against the expected code and its
// changes against what changed; a rejection must change nothing.
func (m *ruleModel) apply(t *rapid.T, r *JobState, target *Checkpoint, wantCode Code, rule func() error) {
	t.Helper()
	before := takeRuleSnapshot(m.cps, r)
	err := rule()
	if wantCode != "" {
		var missing []string
		if wantCode == CodeVotesMissing {
			missing = missingVotes(target)
		}
		if p := rejectionProblem(err, wantCode, target, missing); p != "" {
			t.Fatal(p)
		}
		m.fail(t, unchangedProblems(before, m.cps, r), "rejection changed something")
		return
	}
	if err != nil {
		t.Fatalf("rejected with %v, want it accepted", err)
	}
	m.fail(t, changeProblems(before, m.cps, r), "changes")
	var lastCommitted int64
	for _, cp := range r.Mutation.Statuses {
		if cp.Status == StatusCommitting {
			if cp.ID < lastCommitted {
				t.Fatalf("commits out of order in one step: %s", describeChanges(r))
			}
			lastCommitted = cp.ID
		}
	}
}

// drawCheckpoint picks a checkpoint, mostly one with the given status when there is one,
// so that sequences reach commits rather than mostly poking at old aborted checkpoints.
func (m *ruleModel) drawCheckpoint(t *rapid.T, prefer Status) *Checkpoint {
	if len(m.cps) == 0 {
		t.Skip("no checkpoint yet")
	}
	var preferred []*Checkpoint
	for _, cp := range m.cps {
		if cp.Status == prefer {
			preferred = append(preferred, cp)
		}
	}
	if len(preferred) > 0 && rapid.IntRange(0, 3).Draw(t, "prefer "+string(prefer)) > 0 {
		return preferred[rapid.IntRange(0, len(preferred)-1).Draw(t, "checkpoint among "+string(prefer))]
	}
	return m.cps[rapid.IntRange(1, len(m.cps)).Draw(t, "checkpoint")-1]
}

func (m *ruleModel) drawParticipant(t *rapid.T) string {
	return rapid.SampledFrom(append(slices.Clone(m.names), "ghost")).Draw(t, "participant")
}

func (m *ruleModel) drawEpoch(t *rapid.T, current int64) int64 {
	return current + rapid.SampledFrom([]int64{0, 0, 0, 0, -1, 1}).Draw(t, "epoch offset")
}

// Prepare opens the next checkpoint as Service.Prepare does, when the job has room.
func (m *ruleModel) Prepare(t *rapid.T) {
	r := m.begin(t)
	timeout := time.Duration(rapid.IntRange(1, 5).Draw(t, "timeout")) * 100 * time.Millisecond
	autoCommit := rapid.SampledFrom([]bool{true, true, true, false}).Draw(t, "auto_commit")
	if len(r.Preparing) >= m.maxConcurrent {
		return
	}
	cp := &Checkpoint{Job: "orders", ID: int64(len(m.cps)) + 1, Status: StatusPreparing, CreatedAt: m.clock, Deadline: m.clock.Add(timeout), AutoCommit: autoCommit}
	for _, name := range m.names {
		cp.Participants = append(cp.Participants, ParticipantState{Name: name})
	}
	m.cps = append(m.cps, cp)
}

func (m *ruleModel) Vote(t *rapid.T) {
	r := m.begin(t)
	cp := m.drawCheckpoint(t, StatusPreparing)
	name := m.drawParticipant(t)
	current := m.epochs[name]
	v := Vote{Epoch: m.drawEpoch(t, current), Kind: rapid.SampledFrom([]VoteKind{VotePrepared, VotePrepared, VotePrepared, VotePrepared, VotePrepared, VotePrepared, VotePrepared, VoteAbort}).Draw(t, "vote")}
	if v.Kind == VotePrepared {
		v.Committables = rapid.SampledFrom([]json.RawMessage{nil, json.RawMessage(`[]`), json.RawMessage(`[1]`), json.RawMessage(`["x"]`)}).Draw(t, "committables")
	} else {
		v.Reason = rapid.SampledFrom([]string{"", "disk full"}).Draw(t, "reason")
	}
	// The contract, in the order docs/protocol.md gives it ("The order of the checks").
	var code Code
	p := cp.Participant(name)
	committables := v.Committables
	if v.Kind == VotePrepared && len(committables) == 0 {
		committables = json.RawMessage(`[]`)
	}
	switch {
	case p == nil:
		code = CodeNotFound
	case current == 0 || v.Epoch == 0:
		code = CodeNotRegistered
	case v.Epoch != current:
		code = CodeFenced
	case p.Vote != "" && (p.Vote != v.Kind || !bytes.Equal(p.Committables, committables)):
		code = CodeVoteConflict
	case p.Vote == "" && cp.Status != StatusPreparing:
		code = CodeAlreadyDecided
	}
	fresh := p != nil && p.Vote == ""
	m.apply(t, r, cp, code, func() error { return r.Vote(cp, name, v) })
	if code == "" && fresh {
		if p.Vote != v.Kind || p.Epoch != v.Epoch || !bytes.Equal(p.Committables, committables) && v.Kind == VotePrepared {
			t.Fatalf("vote recorded as %+v, sent %+v", *p, v)
		}
		if v.Kind == VoteAbort && cp.Status != StatusAborted {
			t.Fatalf("abort vote left checkpoint %d %s", cp.ID, cp.Status)
		}
	}
}

func (m *ruleModel) Commit(t *rapid.T) {
	r := m.begin(t)
	cp := m.drawCheckpoint(t, StatusPreparing)
	var code Code
	switch {
	case cp.Status == StatusAborted:
		code = CodeAlreadyDecided
	case cp.Status != StatusPreparing:
	case len(missingVotes(cp)) > 0:
		code = CodeVotesMissing
	case r.Preparing[0] != cp:
		code = CodeLowerCheckpointOpen
	}
	m.apply(t, r, cp, code, func() error { return r.Commit(cp) })
	if code == "" && cp.Status != StatusCommitting && cp.Status != StatusCommitted {
		t.Fatalf("commit accepted, checkpoint %d is %s", cp.ID, cp.Status)
	}
}

func (m *ruleModel) Abort(t *rapid.T) {
	r := m.begin(t)
	cp := m.drawCheckpoint(t, StatusPreparing)
	var code Code
	if cp.Status == StatusCommitting || cp.Status == StatusCommitted {
		code = CodeAlreadyDecided
	}
	m.apply(t, r, cp, code, func() error { return r.Abort(cp, rapid.SampledFrom([]string{"", "operator"}).Draw(t, "reason")) })
	if code == "" && cp.Status != StatusAborted {
		t.Fatalf("abort accepted, checkpoint %d is %s", cp.ID, cp.Status)
	}
}

func (m *ruleModel) Ack(t *rapid.T) {
	r := m.begin(t)
	cp := m.drawCheckpoint(t, StatusCommitting)
	name := m.drawParticipant(t)
	current := m.epochs[name]
	epoch := m.drawEpoch(t, current)
	var code Code
	switch {
	case cp.Participant(name) == nil:
		code = CodeNotFound
	case current == 0 || epoch == 0:
		code = CodeNotRegistered
	case epoch != current:
		code = CodeFenced
	case cp.Status == StatusPreparing:
		code = CodeNotDecided
	}
	m.apply(t, r, cp, code, func() error { return r.Ack(cp, name, epoch) })
	if code == "" && cp.Participant(name).AckedAt == nil {
		t.Fatalf("ack accepted but not recorded")
	}
}

// Register gives a participant its next epoch, as Service.Register does.
func (m *ruleModel) Register(t *rapid.T) {
	r := m.begin(t)
	name := rapid.SampledFrom(m.names).Draw(t, "participant")
	want := m.epochs[name] + 1
	var notVoted []*Checkpoint
	for _, cp := range r.Preparing {
		if cp.Participant(name).Vote == "" {
			notVoted = append(notVoted, cp)
		}
	}
	m.apply(t, r, nil, "", func() error {
		if got := r.Register(name); got != want {
			t.Fatalf("Register(%s) = epoch %d, want %d", name, got, want)
		}
		return nil
	})
	for _, cp := range notVoted {
		if cp.Status != StatusAborted {
			t.Fatalf("checkpoint %d is %s after %s registered without having voted", cp.ID, cp.Status, name)
		}
	}
}

// Tick moves the clock on, possibly right onto a deadline, and sweeps.
func (m *ruleModel) Tick(t *rapid.T) {
	m.clock = m.clock.Add(rapid.SampledFrom([]time.Duration{0, time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 300 * time.Millisecond}).Draw(t, "tick"))
	m.begin(t)
}

func allVotedPrepared(cp *Checkpoint) bool { return len(missingVotes(cp)) == 0 }

// Check holds the invariants of docs/protocol.md, on the state after every step and
// against the state after the step before.
func (m *ruleModel) Check(t *rapid.T) {
	preparing := 0
	for i, cp := range m.cps {
		allAcked := true
		for _, p := range cp.Participants {
			if p.AckedAt == nil {
				allAcked = false
			}
			if p.Vote != "" && (p.Epoch < 1 || p.VotedAt == nil) {
				t.Fatalf("checkpoint %d: %s's vote has epoch %d voted_at %v", cp.ID, p.Name, p.Epoch, p.VotedAt)
			}
		}
		switch cp.Status {
		case StatusPreparing:
			preparing++
			if cp.DecidedAt != nil || cp.CompletedAt != nil || cp.AbortReason != "" {
				t.Fatalf("checkpoint %d preparing with a decision: %+v", cp.ID, cp)
			}
			if !m.clock.Before(cp.Deadline) {
				t.Fatalf("checkpoint %d still preparing at its deadline", cp.ID)
			}
			for _, p := range cp.Participants {
				if p.Vote == VoteAbort || p.AckedAt != nil {
					t.Fatalf("checkpoint %d preparing with %s: vote %s acked %v", cp.ID, p.Name, p.Vote, p.AckedAt)
				}
			}
		case StatusCommitting, StatusCommitted:
			// Rule 2: commit only on unanimity, before the deadline.
			if !allVotedPrepared(cp) {
				t.Fatalf("checkpoint %d %s without every vote prepared: %+v", cp.ID, cp.Status, cp.Participants)
			}
			if cp.DecidedAt == nil || !cp.DecidedAt.Before(cp.Deadline) {
				t.Fatalf("checkpoint %d committed at %v, deadline %v", cp.ID, cp.DecidedAt, cp.Deadline)
			}
			// Rule 9: nothing commits while a lower checkpoint is preparing.
			for _, lower := range m.cps[:i] {
				if lower.Status == StatusPreparing {
					t.Fatalf("checkpoint %d is %s while %d is preparing", cp.ID, cp.Status, lower.ID)
				}
			}
			// Committed exactly when every participant acked.
			if (cp.Status == StatusCommitted) != allAcked {
				t.Fatalf("checkpoint %d is %s, every ack in: %v", cp.ID, cp.Status, allAcked)
			}
			if (cp.Status == StatusCommitted) != (cp.CompletedAt != nil) {
				t.Fatalf("checkpoint %d is %s with completed_at %v", cp.ID, cp.Status, cp.CompletedAt)
			}
		case StatusAborted:
			if cp.DecidedAt == nil || !sameInstant(cp.DecidedAt, cp.CompletedAt) || cp.AbortReason == "" {
				t.Fatalf("checkpoint %d aborted with decided_at %v completed_at %v reason %q", cp.ID, cp.DecidedAt, cp.CompletedAt, cp.AbortReason)
			}
		default:
			t.Fatalf("checkpoint %d has status %q", cp.ID, cp.Status)
		}

		old := m.prev[cp.ID]
		if old == nil {
			continue
		}
		// Rule 1: one decision, for ever.
		switch old.Status {
		case StatusCommitting:
			if cp.Status != StatusCommitting && cp.Status != StatusCommitted {
				t.Fatalf("checkpoint %d went from committing to %s", cp.ID, cp.Status)
			}
		case StatusCommitted, StatusAborted:
			if cp.Status != old.Status {
				t.Fatalf("checkpoint %d went from %s to %s", cp.ID, old.Status, cp.Status)
			}
		}
		if old.Status != StatusPreparing && (!sameInstant(old.DecidedAt, cp.DecidedAt) || old.AbortReason != cp.AbortReason) {
			t.Fatalf("checkpoint %d's decision changed: %v %q -> %v %q", cp.ID, old.DecidedAt, old.AbortReason, cp.DecidedAt, cp.AbortReason)
		}
		// Votes and acks, once recorded, stay as they were.
		for j, p := range cp.Participants {
			o := old.Participants[j]
			if o.Vote != "" && voteFieldsDiffer(&o, &p) {
				t.Fatalf("checkpoint %d: %s's vote changed from %+v to %+v", cp.ID, p.Name, o, p)
			}
			if o.AckedAt != nil && !sameInstant(o.AckedAt, p.AckedAt) {
				t.Fatalf("checkpoint %d: %s's ack changed", cp.ID, p.Name)
			}
		}
		// Rule 9: an abort cascades to every higher checkpoint that was preparing.
		if old.Status == StatusPreparing && cp.Status == StatusAborted {
			for _, id := range m.prevPreparing {
				if higher := m.cps[id-1]; id > cp.ID && higher.Status != StatusAborted {
					t.Fatalf("checkpoint %d aborted, but %d, preparing above it, is %s", cp.ID, id, higher.Status)
				}
			}
		}
	}
	if preparing > m.maxConcurrent {
		t.Fatalf("%d checkpoints preparing, max %d", preparing, m.maxConcurrent)
	}
	// Rules 2 and 9 the other way round: a unanimous auto-commit checkpoint with nothing
	// preparing below it does not stay preparing.
	if ps := m.preparing(); len(ps) > 0 && ps[0].AutoCommit && allVotedPrepared(ps[0]) {
		t.Fatalf("checkpoint %d is unanimous, auto-commit and lowest, yet preparing", ps[0].ID)
	}

	m.prev = map[int64]*Checkpoint{}
	m.prevPreparing = nil
	for _, cp := range m.cps {
		m.prev[cp.ID] = frozenCopy(cp)
		if cp.Status == StatusPreparing {
			m.prevPreparing = append(m.prevPreparing, cp.ID)
		}
	}
}

// actions weighs the events: votes and acks are the common traffic of a job.
func (m *ruleModel) actions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"":               m.Check,
		"prepare":        m.Prepare,
		"prepare again":  m.Prepare,
		"vote":           m.Vote,
		"vote again":     m.Vote,
		"vote once more": m.Vote,
		"ack":            m.Ack,
		"ack again":      m.Ack,
		"commit":         m.Commit,
		"abort":          m.Abort,
		"register":       m.Register,
		"tick":           m.Tick,
	}
}

func TestRulesHoldOverRandomEvents(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		m := newRuleModel(t)
		t.Repeat(m.actions())
	})
}

// MayOwe is what JobTx.Owing selects: an unacked participant of a checkpoint that is
// preparing or committing, or aborted with its prepared vote. A participant that was
// removed from the job's configuration is still found by CheckParticipant while it may owe.
func TestMayOweAndCheckParticipant(t *testing.T) {
	t.Parallel()
	now := ruleNow
	cp := func(status Status, vote VoteKind, acked bool) *Checkpoint {
		c := &Checkpoint{ID: 1, Status: status, Participants: []ParticipantState{{Name: "gone", Vote: vote}, {Name: "b"}}}
		if acked {
			c.Participants[0].AckedAt = &now
		}
		return c
	}
	cases := []struct {
		cp   *Checkpoint
		want bool
	}{
		{cp(StatusPreparing, "", false), true},
		{cp(StatusPreparing, VotePrepared, false), true},
		{cp(StatusCommitting, VotePrepared, false), true},
		{cp(StatusCommitting, VotePrepared, true), false},
		{cp(StatusAborted, VotePrepared, false), true},
		{cp(StatusAborted, VotePrepared, true), false},
		{cp(StatusAborted, VoteAbort, false), false},
		{cp(StatusAborted, "", false), false},
		{cp(StatusCommitted, VotePrepared, true), false},
	}
	job := &Job{Name: "j", Config: JobConfig{Participants: []string{"b"}}}
	for _, c := range cases {
		name := fmt.Sprintf("%s, vote %q, acked %v", c.cp.Status, c.cp.Participants[0].Vote, c.cp.Participants[0].AckedAt != nil)
		if got := MayOwe(c.cp, "gone"); got != c.want {
			t.Errorf("%s: MayOwe = %v, want %v", name, got, c.want)
		}
		err := CheckParticipant(job, []*Checkpoint{c.cp}, "gone")
		if c.want != (err == nil) || err != nil && !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: CheckParticipant = %v, want found %v", name, err, c.want)
		}
		if err := CheckParticipant(job, []*Checkpoint{c.cp}, "b"); err != nil {
			t.Errorf("%s: CheckParticipant of a configured participant = %v", name, err)
		}
	}
	if MayOwe(cp(StatusAborted, VoteAbort, false), "") {
		t.Error(`MayOwe(aborted, nobody prepared, "") = true`)
	}
	if !MayOwe(cp(StatusCommitting, VotePrepared, true), "") {
		t.Error(`MayOwe(committing with b unacked, "") = false`)
	}
}

// The rules change their own copy of the job's row, never the store's: what the store
// holds changes only through the Mutation.
func TestRulesLeaveTheStoresJobAlone(t *testing.T) {
	t.Parallel()
	stored := &Job{Name: "j", Seq: 4, Epochs: map[string]int64{"a": 2},
		Config: JobConfig{Participants: []string{"a"}, CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 2, AutoCommit: true}}
	st := &JobState{Now: ruleNow, Job: stored}
	if _, _, err := st.Prepare(PrepareRequest{}, nil); err != nil {
		t.Fatal(err)
	}
	if epoch := st.Register("a"); epoch != 3 {
		t.Fatalf("Register = %d, want 3", epoch)
	}
	if stored.Seq != 4 || stored.Epochs["a"] != 2 {
		t.Fatalf("the store's job changed: seq %d, epochs %v", stored.Seq, stored.Epochs)
	}
	if st.Job.Seq != 5 || st.Job.Epoch("a") != 3 {
		t.Fatalf("the rules' job: seq %d, epochs %v; want 5 and a=3", st.Job.Seq, st.Job.Epochs)
	}
	replayed := CloneJob(stored)
	st.Mutation.Apply(replayed, map[int64]*Checkpoint{})
	if replayed.Seq != 5 || replayed.Epoch("a") != 3 {
		t.Fatalf("the mutation replayed on the store's job: seq %d, epochs %v; want 5 and a=3", replayed.Seq, replayed.Epochs)
	}
	if stored.Epochs["a"] != 2 {
		t.Fatalf("replaying the mutation on a copy changed the store's job: epochs %v", stored.Epochs)
	}
}

// Rule 12: what retention may delete, and when an id it deleted is gone.
func TestDeletable(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	old := now.Add(-2 * time.Hour)
	recent := now.Add(-time.Minute)
	acked := old
	cp := func(id int64, status Status, completed *time.Time, ps ...ParticipantState) *Checkpoint {
		return &Checkpoint{ID: id, Status: status, CompletedAt: completed, Participants: ps}
	}
	preparedUnacked := ParticipantState{Name: "a", Vote: VotePrepared, Epoch: 1}
	preparedAcked := ParticipantState{Name: "a", Vote: VotePrepared, Epoch: 1, AckedAt: &acked}
	abortVote := ParticipantState{Name: "b", Vote: VoteAbort, Epoch: 1}
	for _, tt := range []struct {
		name          string
		cp            *Checkpoint
		retention     time.Duration
		lastCommitted int64
		want          bool
	}{
		{"committed, acked, expired", cp(1, StatusCommitted, &old, preparedAcked), time.Hour, 5, true},
		{"committed but the last committed", cp(5, StatusCommitted, &old, preparedAcked), time.Hour, 5, false},
		{"committed, not expired yet", cp(1, StatusCommitted, &recent, preparedAcked), time.Hour, 5, false},
		{"retention 0 keeps everything", cp(1, StatusCommitted, &old, preparedAcked), 0, 5, false},
		{"aborted, nothing prepared", cp(2, StatusAborted, &old, abortVote), time.Hour, 5, true},
		{"aborted, a prepared vote rolled back (acked)", cp(2, StatusAborted, &old, preparedAcked, abortVote), time.Hour, 5, true},
		{"aborted, a prepared vote not rolled back: owed", cp(2, StatusAborted, &old, preparedUnacked, abortVote), time.Hour, 5, false},
		{"aborted, the highest and last id", cp(9, StatusAborted, &old, abortVote), time.Hour, 5, true},
		{"committing: owed", cp(3, StatusCommitting, nil, preparedUnacked), time.Hour, 3, false},
		{"preparing", cp(4, StatusPreparing, nil), time.Hour, 0, false},
	} {
		if got := Deletable(tt.cp, now, tt.retention, tt.lastCommitted); got != tt.want {
			t.Errorf("%s: Deletable = %v, want %v", tt.name, got, tt.want)
		}
	}
	for _, tt := range []struct {
		id, seq int64
		want    bool
	}{{1, 5, true}, {5, 5, true}, {6, 5, false}, {1, 0, false}, {0, 5, false}, {-1, 5, false}} {
		if got := Gone(tt.id, tt.seq); got != tt.want {
			t.Errorf("Gone(%d, seq %d) = %v, want %v", tt.id, tt.seq, got, tt.want)
		}
	}
}

// The one answer for waits: a wait on pending ends once something is owed or the
// participant's epoch moved on (not for a caller that does not know its epoch yet); a
// wait on a checkpoint ends once it is decided.
func TestWaitAnswers(t *testing.T) {
	t.Parallel()
	owed := &Pending{Epoch: 3, Items: []PendingItem{{Checkpoint: 1, Action: ActionVote}}}
	nothing := &Pending{Epoch: 3}
	for _, tt := range []struct {
		name     string
		p        *Pending
		epoch    int64
		anyEpoch bool
		want     bool
	}{
		{"something owed", owed, 3, false, true},
		{"something owed, any epoch", owed, 0, true, true},
		{"nothing owed, same epoch", nothing, 3, false, false},
		{"nothing owed, registered again since", nothing, 2, false, true},
		{"nothing owed, first registration since (epoch 0)", nothing, 0, false, true},
		{"nothing owed, any epoch", nothing, 0, true, false},
		{"never registered, nothing owed", &Pending{}, 0, false, false},
	} {
		if got := PendingAnswers(tt.p, tt.epoch, tt.anyEpoch); got != tt.want {
			t.Errorf("%s: PendingAnswers = %v, want %v", tt.name, got, tt.want)
		}
	}
	for status, want := range map[Status]bool{StatusPreparing: false, StatusCommitting: true, StatusCommitted: true, StatusAborted: true} {
		if got := CheckpointAnswers(&Checkpoint{Status: status}); got != want {
			t.Errorf("CheckpointAnswers(%s) = %v, want %v", status, got, want)
		}
	}
}
