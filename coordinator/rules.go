package coordinator

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"time"
)

// This file holds the rules of PROTOCOL.md as pure functions: each takes a job's recorded
// state (the clock, the epochs, its preparing checkpoints) plus one event, changes the
// checkpoints in memory and says what changed. Service loads, locks and saves around them.

// Changes lists what a rule changed, for the store to write.
type Changes struct {
	// Votes and Acks name (checkpoint, participant) pairs whose vote or ack changed.
	Votes []Change
	Acks  []Change
	// Statuses are the checkpoints whose status changed, in the order it changed.
	Statuses []*Checkpoint
}

// Change names one participant of one checkpoint.
type Change struct {
	Checkpoint  *Checkpoint
	Participant *ParticipantState
}

func (c *Changes) status(cp *Checkpoint) { c.Statuses = append(c.Statuses, cp) }

// Round is the state the rules decide on: the clock and the job's preparing checkpoints,
// lowest id first. Rules keep Preparing current as they decide.
type Round struct {
	Now       time.Time
	Preparing []*Checkpoint
	Changes
}

func (r *Round) drop(cp *Checkpoint) {
	for i, p := range r.Preparing {
		if p == cp {
			r.Preparing = append(r.Preparing[:i:i], r.Preparing[i+1:]...)
			return
		}
	}
}

// Expire aborts every preparing checkpoint whose deadline is not after Now (rule 6), and
// with it every higher preparing checkpoint (rule 9).
func (r *Round) Expire() {
	for len(r.Preparing) > 0 {
		var expired *Checkpoint
		for _, cp := range r.Preparing {
			if !r.Now.Before(cp.Deadline) {
				expired = cp
				break
			}
		}
		if expired == nil {
			return
		}
		r.abort(expired, expiryReason(expired))
	}
}

func expiryReason(cp *Checkpoint) string {
	var late []string
	for _, p := range cp.Participants {
		if p.Vote == "" {
			late = append(late, p.Name)
		}
	}
	if len(late) == 0 {
		if !cp.AutoCommit {
			// Nothing but an explicit commit could decide it; a lower checkpoint may or may
			// not have been open as well.
			return "deadline passed with every vote in but no commit decided (auto_commit is off)"
		}
		return "deadline passed with every vote in while a lower checkpoint was still open"
	}
	return "deadline passed; no vote in time from: " + strings.Join(late, ", ")
}

// abort decides abort for cp and cascades to every higher preparing checkpoint.
func (r *Round) abort(cp *Checkpoint, reason string) {
	r.decideAbort(cp, reason)
	for _, higher := range append([]*Checkpoint(nil), r.Preparing...) {
		if higher.ID > cp.ID {
			r.decideAbort(higher, fmt.Sprintf("lower checkpoint %d aborted", cp.ID))
		}
	}
}

func (r *Round) decideAbort(cp *Checkpoint, reason string) {
	now := r.Now
	cp.Status = StatusAborted
	cp.DecidedAt = &now
	cp.CompletedAt = &now
	cp.AbortReason = reason
	r.drop(cp)
	r.status(cp)
}

func (r *Round) decideCommit(cp *Checkpoint) {
	now := r.Now
	cp.Status = StatusCommitting
	cp.DecidedAt = &now
	r.drop(cp)
	r.status(cp)
}

// Advance decides commit, lowest first, for every preparing checkpoint that has all its
// votes prepared, auto-commits and has no lower checkpoint still preparing (rules 2, 9).
func (r *Round) Advance() {
	for len(r.Preparing) > 0 {
		lowest := r.Preparing[0]
		if !lowest.AutoCommit || len(missingVotes(lowest)) > 0 {
			return
		}
		r.decideCommit(lowest)
	}
}

// missingVotes names the participants of cp without a prepared vote.
func missingVotes(cp *Checkpoint) []string {
	var missing []string
	for _, p := range cp.Participants {
		if p.Vote != VotePrepared {
			missing = append(missing, p.Name)
		}
	}
	return missing
}

// checkEpoch applies fencing (rule 5): the participant must be registered and the request
// must carry its current epoch.
func checkEpoch(cp *Checkpoint, participant string, current, epoch int64) error {
	if current == 0 {
		return reject(CodeNotRegistered, cp, "participant %q has not registered: register it first", participant)
	}
	if epoch != current {
		return reject(CodeFenced, cp, "participant %q sent epoch %d but its current epoch is %d", participant, epoch, current)
	}
	return nil
}

// Vote records participant's vote on cp (which must be in Preparing if it is preparing),
// then decides what follows: abort on an abort vote, commit when it completes unanimity.
// The same vote again changes nothing and is no error (rule 4).
func (r *Round) Vote(cp *Checkpoint, participant string, current int64, v Vote) error {
	p := cp.Participant(participant)
	if p == nil {
		return reject(CodeNotFound, cp, "%q is not a participant of checkpoint %d", participant, cp.ID)
	}
	if err := checkEpoch(cp, participant, current, v.Epoch); err != nil {
		return err
	}
	committables := v.Committables
	if v.Kind == VotePrepared && len(committables) == 0 {
		committables = emptyArray
	}
	if p.Vote != "" {
		if p.Vote == v.Kind && bytes.Equal(p.Committables, committables) {
			return nil
		}
		return reject(CodeVoteConflict, cp, "participant %q already voted %s on checkpoint %d", participant, p.Vote, cp.ID)
	}
	if cp.Status != StatusPreparing {
		return decidedRejection(cp)
	}
	now := r.Now
	p.Epoch = v.Epoch
	p.Vote = v.Kind
	p.VotedAt = &now
	if v.Kind == VotePrepared {
		p.Committables = committables
	} else {
		p.Reason = v.Reason
	}
	r.Votes = append(r.Votes, Change{cp, p})
	if v.Kind == VoteAbort {
		reason := fmt.Sprintf("participant %s voted abort", participant)
		if v.Reason != "" {
			reason += ": " + v.Reason
		}
		r.abort(cp, reason)
		return nil
	}
	r.Advance()
	return nil
}

var emptyArray = []byte("[]")

func decidedRejection(cp *Checkpoint) error {
	return reject(CodeAlreadyDecided, cp, "checkpoint %d is already decided (%s)", cp.ID, cp.Status)
}

// Commit decides commit on request (POST .../commit). Idempotent once the decision is
// commit.
func (r *Round) Commit(cp *Checkpoint) error {
	switch cp.Status {
	case StatusCommitting, StatusCommitted:
		return nil
	case StatusAborted:
		return decidedRejection(cp)
	}
	if missing := missingVotes(cp); len(missing) > 0 {
		e := reject(CodeVotesMissing, cp, "checkpoint %d lacks a prepared vote from: %s", cp.ID, strings.Join(missing, ", "))
		e.Missing = missing
		return e
	}
	for _, lower := range r.Preparing {
		if lower.ID < cp.ID {
			return reject(CodeLowerCheckpointOpen, cp, "checkpoint %d is still preparing; checkpoints commit in order", lower.ID)
		}
	}
	r.decideCommit(cp)
	r.Advance()
	return nil
}

// Abort decides abort on request (POST .../abort). Idempotent once aborted.
func (r *Round) Abort(cp *Checkpoint, reason string) error {
	switch cp.Status {
	case StatusAborted:
		return nil
	case StatusCommitting, StatusCommitted:
		return decidedRejection(cp)
	}
	if reason == "" {
		reason = "aborted on request"
	}
	r.abort(cp, reason)
	return nil
}

// Ack records that participant applied cp's decision. The last ack of a commit makes the
// checkpoint committed. Idempotent.
func (r *Round) Ack(cp *Checkpoint, participant string, current, epoch int64) error {
	p := cp.Participant(participant)
	if p == nil {
		return reject(CodeNotFound, cp, "%q is not a participant of checkpoint %d", participant, cp.ID)
	}
	if err := checkEpoch(cp, participant, current, epoch); err != nil {
		return err
	}
	if cp.Status == StatusPreparing {
		return reject(CodeNotDecided, cp, "checkpoint %d is not decided yet", cp.ID)
	}
	if p.AckedAt != nil {
		return nil
	}
	now := r.Now
	p.AckedAt = &now
	r.Acks = append(r.Acks, Change{cp, p})
	if cp.Status == StatusCommitting && allAcked(cp) {
		cp.Status = StatusCommitted
		cp.CompletedAt = &now
		r.status(cp)
	}
	return nil
}

func allAcked(cp *Checkpoint) bool {
	for _, p := range cp.Participants {
		if p.AckedAt == nil {
			return false
		}
	}
	return true
}

// Register aborts every preparing checkpoint in which participant had not voted yet: its
// open transaction died with its old epoch (rule 5).
func (r *Round) Register(participant string, epoch int64) {
	for _, cp := range append([]*Checkpoint(nil), r.Preparing...) {
		if cp.Status != StatusPreparing {
			continue // aborted by the cascade of a lower one
		}
		if p := cp.Participant(participant); p != nil && p.Vote == "" {
			r.abort(cp, fmt.Sprintf("participant %s registered again (epoch %d) before voting", participant, epoch))
		}
	}
}

// Owed says what participant owes on cp, if anything (rule 7).
func Owed(cp *Checkpoint, participant string) (Action, bool) {
	p := cp.Participant(participant)
	if p == nil || p.AckedAt != nil {
		return "", false
	}
	switch cp.Status {
	case StatusPreparing:
		if p.Vote == "" {
			return ActionVote, true
		}
	case StatusCommitting:
		return ActionCommit, true
	case StatusAborted:
		if p.Vote == VotePrepared {
			return ActionAbort, true
		}
	}
	return "", false
}

// OwesAnything reports whether any participant still owes something on cp, or cp is
// undecided or being committed: what keeps a job from being deleted.
func OwesAnything(cp *Checkpoint) bool {
	if cp.Status == StatusPreparing || cp.Status == StatusCommitting {
		return true
	}
	for _, p := range cp.Participants {
		if _, ok := Owed(cp, p.Name); ok {
			return true
		}
	}
	return false
}

// PendingItems lists what participant owes among cps, oldest first.
func PendingItems(cps []*Checkpoint, participant string) []PendingItem {
	sort.Slice(cps, func(i, j int) bool { return cps[i].ID < cps[j].ID })
	items := []PendingItem{}
	for _, cp := range cps {
		action, ok := Owed(cp, participant)
		if !ok {
			continue
		}
		item := PendingItem{Checkpoint: cp.ID, Status: cp.Status, Action: action, Committables: emptyArray}
		if p := cp.Participant(participant); p.Committables != nil {
			item.Committables = p.Committables
		}
		items = append(items, item)
	}
	return items
}
