package coordinator

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// This file holds the rules of the protocol as pure functions on a job's recorded state.
// Each takes a JobState (the database's clock, the job's row, its preparing checkpoints)
// and one event, changes the state in memory and records what it changed in the state's
// Mutation; Service loads the state under the job's lock, runs one rule and hands the
// mutation to the store, which writes it. Every input is validated once, in validate.go.
//
// Where each rule of the protocol (docs/protocol.md) is decided:
//
//	 1 one decision             JobState.Vote, Commit, Abort (decided checkpoints refuse: decidedRejection);
//	                            decideCommit and decideAbort are the only places a status is decided
//	 2 commit on unanimity      JobState.Advance and Commit (missingVotes)
//	 3 durable before acknowledged the stores: JobTx.Apply is committed before Service answers
//	 4 idempotent writes        Vote (same vote again), Ack (acked already), Commit, Abort (decided so
//	                            already); JobState.Prepare (Idempotency-Key, idempotency_conflict)
//	 5 fencing                  checkEpoch (vote, ack); JobState.Register (new epoch, aborts the unvoted)
//	 6 exact deadlines          JobState.Expire, run first on every state (Service.update) and by the
//	                            sweeper (Service.SweepExpired); PendingItems hides what expired
//	 7 nothing owed forgotten   Owed, MayOwe (what JobTx.Owing selects), PendingItems, OwesAnything;
//	                            CheckParticipant; PendingAnswers and CheckpointAnswers (when a
//	                            long-poll has its answer, wherever it waits)
//	 8 many coordinators        the stores: the job's lock and JobTx.Now, the database's clock
//	 9 commit order, no gaps    Advance (lowest first), Commit (lower_checkpoint_open), abort (cascade)
//	10 bad input changes nothing validate.go: ValidateJobConfig, ValidateVote, ValidateName, ...
//	11 nobody beyond their token Authenticator (tokens, revocation), Principal (Can, ActsAs, Reads);
//	                            api's routeAccess and authorize; Service.AbortAsParticipant
//	12 nothing owed deleted     Deletable (what retention may delete), Gone (410 for what it did);
//	                            the stores' DeleteExpired, checked against Deletable by storetest
//	   epoch 0 = never registered checkEpoch (not_registered)
//	   too_many_checkpoints     JobState.Prepare
//	   job_busy                 JobState.DeleteJob
//
// Names: a "round" in the documentation is one checkpoint's whole two-phase commit; a
// JobState lives for one event inside one transaction.

// JobState is what the rules decide on: the database's clock, the job's row (configuration,
// Seq, epochs) and its preparing checkpoints, lowest id first. The rules keep it current as
// they decide, and record in Mutation what they changed, for the store to write.
type JobState struct {
	Now time.Time
	// Job is the job's row as the store read it; a rule that changes it (its Seq, its
	// epochs) changes a copy, made once (ownJob), so that the store's own changes only
	// through Mutation.
	Job       *Job
	Preparing []*Checkpoint
	Mutation  Mutation
	// By is the name of the token whose request the rules serve, recorded as decided_by on
	// what they decide; empty without authentication. Deadlines decide by nobody.
	By string
	// MaxCheckpointBytes bounds the committables of one checkpoint, all participants'
	// together; 0 means no bound.
	MaxCheckpointBytes int64
	jobOwned           bool
}

// ownJob makes Job the state's own copy, to change.
func (s *JobState) ownJob() *Job {
	if !s.jobOwned {
		s.Job, s.jobOwned = CloneJob(s.Job), true
	}
	return s.Job
}

func (s *JobState) drop(cp *Checkpoint) {
	for i, p := range s.Preparing {
		if p == cp {
			s.Preparing = append(s.Preparing[:i:i], s.Preparing[i+1:]...)
			return
		}
	}
}

// statusChanged records cp's new status.
func (s *JobState) statusChanged(cp *Checkpoint) {
	s.Mutation.Statuses = append(s.Mutation.Statuses, cp)
}

// Find returns checkpoint id among those the rules hold: preparing, or decided by this
// state's events; nil if neither.
func (s *JobState) Find(id int64) *Checkpoint {
	for _, list := range [][]*Checkpoint{s.Preparing, s.Mutation.Statuses} {
		for _, cp := range list {
			if cp.ID == id {
				return cp
			}
		}
	}
	return nil
}

// Expire aborts every preparing checkpoint whose deadline is not after Now (rule 6), and
// with it every higher preparing checkpoint (rule 9).
func (r *JobState) Expire() {
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
		r.abort(expired, expiryReason(expired), CauseDeadline, "")
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

// abort decides abort for cp for cause, on the request of by (empty: by nobody, as at a
// deadline), and cascades to every higher preparing checkpoint (cause lower_aborted, by the
// same).
func (r *JobState) abort(cp *Checkpoint, reason string, cause Cause, by string) {
	r.decideAbort(cp, reason, cause, by)
	for _, higher := range append([]*Checkpoint(nil), r.Preparing...) {
		if higher.ID > cp.ID {
			r.decideAbort(higher, fmt.Sprintf("lower checkpoint %d aborted", cp.ID), CauseLowerAborted, by)
		}
	}
}

func (r *JobState) decideAbort(cp *Checkpoint, reason string, cause Cause, by string) {
	now := r.Now
	cp.Status = StatusAborted
	cp.DecidedAt = &now
	cp.CompletedAt = &now
	cp.AbortReason = reason
	cp.DecidedBy = by
	cp.DecisionCause = cause
	r.drop(cp)
	r.statusChanged(cp)
}

func (r *JobState) decideCommit(cp *Checkpoint, cause Cause) {
	now := r.Now
	cp.Status = StatusCommitting
	cp.DecidedAt = &now
	cp.DecidedBy = r.By
	cp.DecisionCause = cause
	r.drop(cp)
	r.statusChanged(cp)
}

// Advance decides commit, lowest first, for every preparing checkpoint that has all its
// votes prepared, auto-commits and has no lower checkpoint still preparing (rules 2, 9).
func (r *JobState) Advance() {
	for len(r.Preparing) > 0 {
		lowest := r.Preparing[0]
		if !lowest.AutoCommit || len(missingVotes(lowest)) > 0 {
			return
		}
		r.decideCommit(lowest, CauseAllPrepared)
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
// must carry its current epoch. Epoch 0 is the epoch of a participant that never
// registered, whatever the job holds.
func checkEpoch(cp *Checkpoint, participant string, current, epoch int64) error {
	if current == 0 || epoch == 0 {
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
func (r *JobState) Vote(cp *Checkpoint, participant string, v Vote) error {
	p := cp.Participant(participant)
	if p == nil {
		return reject(CodeNotFound, cp, "%q is not a participant of checkpoint %d", participant, cp.ID)
	}
	if err := checkEpoch(cp, participant, r.Job.Epoch(participant), v.Epoch); err != nil {
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
	if v.Kind == VotePrepared && r.MaxCheckpointBytes > 0 {
		total := int64(len(committables))
		for _, q := range cp.Participants {
			total += int64(len(q.Committables))
		}
		if total > r.MaxCheckpointBytes {
			// Not the checkpoint: it is what is too large to send.
			return reject(CodePayloadTooLarge, nil, "with this vote the committables of checkpoint %d would total %d bytes, "+
				"more than the %d a checkpoint may hold: commit references to the data (a transaction id, a file name), not the data",
				cp.ID, total, r.MaxCheckpointBytes)
		}
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
	r.Mutation.Votes = append(r.Mutation.Votes, ParticipantChange{Checkpoint: cp.ID, Participant: *p})
	if v.Kind == VoteAbort {
		reason := fmt.Sprintf("participant %s voted abort", participant)
		if v.Reason != "" {
			reason += ": " + v.Reason
		}
		r.abort(cp, reason, CauseAbortVote, r.By)
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
func (r *JobState) Commit(cp *Checkpoint) error {
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
	r.decideCommit(cp, CauseCommitRequest)
	r.Advance()
	return nil
}

// Abort decides abort on request (POST .../abort). Idempotent once aborted.
func (r *JobState) Abort(cp *Checkpoint, reason string) error {
	switch cp.Status {
	case StatusAborted:
		return nil
	case StatusCommitting, StatusCommitted:
		return decidedRejection(cp)
	}
	if reason == "" {
		reason = "aborted on request"
	}
	r.abort(cp, reason, CauseAbortRequest, r.By)
	return nil
}

// Ack records that participant applied cp's decision. The last ack of a commit makes the
// checkpoint committed. Idempotent.
func (r *JobState) Ack(cp *Checkpoint, participant string, epoch int64) error {
	p := cp.Participant(participant)
	if p == nil {
		return reject(CodeNotFound, cp, "%q is not a participant of checkpoint %d", participant, cp.ID)
	}
	if err := checkEpoch(cp, participant, r.Job.Epoch(participant), epoch); err != nil {
		return err
	}
	if cp.Status == StatusPreparing {
		return reject(CodeNotDecided, cp, "checkpoint %d is not decided yet", cp.ID)
	}
	if p.AckedAt != nil {
		return nil
	}
	r.ack(cp, p, participant)
	return nil
}

// ack records that acker acked p's part of cp, and makes a committing checkpoint
// committed once every participant acked.
func (r *JobState) ack(cp *Checkpoint, p *ParticipantState, acker string) {
	now := r.Now
	p.AckedAt = &now
	p.AckedBy = acker
	r.Mutation.Acks = append(r.Mutation.Acks, ParticipantChange{Checkpoint: cp.ID, Participant: *p})
	if cp.Status == StatusCommitting && allAcked(cp) {
		cp.Status = StatusCommitted
		cp.CompletedAt = &now
		r.statusChanged(cp)
	}
}

// Complete settles, on an operator's request, the acks that participants gone for good will
// never send: on a committing checkpoint every missing ack, which makes it committed; on an
// aborted one every unacked prepared vote. Each is recorded as acked by r.By (OperatorAcker
// without authentication). Afterwards nothing of cp is owed. A preparing checkpoint gets
// not_decided; one with nothing to settle answers settled 0 and changes nothing.
func (r *JobState) Complete(cp *Checkpoint) (settled int, err error) {
	if cp.Status == StatusPreparing {
		return 0, reject(CodeNotDecided, cp, "checkpoint %d is not decided yet: abort it, or wait for its decision", cp.ID)
	}
	acker := r.By
	if acker == "" {
		acker = OperatorAcker
	}
	for i := range cp.Participants {
		p := &cp.Participants[i]
		if p.AckedAt != nil {
			continue
		}
		if cp.Status == StatusCommitting || cp.Status == StatusAborted && p.Vote == VotePrepared {
			r.ack(cp, p, acker)
			settled++
		}
	}
	return settled, nil
}

func allAcked(cp *Checkpoint) bool {
	for _, p := range cp.Participants {
		if p.AckedAt == nil {
			return false
		}
	}
	return true
}

// Register gives participant an epoch higher than any before and aborts every preparing
// checkpoint in which it had not voted yet: its open transaction died with its old epoch
// (rule 5). It returns the new epoch.
func (r *JobState) Register(participant string) int64 {
	epoch := r.Job.Epoch(participant) + 1
	r.ownJob().SetEpoch(participant, epoch)
	r.Mutation.Epochs = append(r.Mutation.Epochs, EpochChange{Participant: participant, Epoch: epoch})
	for _, cp := range append([]*Checkpoint(nil), r.Preparing...) {
		if cp.Status != StatusPreparing {
			continue // aborted by the cascade of a lower one
		}
		if p := cp.Participant(participant); p != nil && p.Vote == "" {
			r.abort(cp, fmt.Sprintf("participant %s registered again (epoch %d) before voting", participant, epoch), CauseRegistration, r.By)
		}
	}
	return epoch
}

// Prepare opens the job's next checkpoint: its id follows the highest ever issued for the
// job's name, its deadline is the request's timeout (or the job's) from now, its voters are
// the job's participants. prior is what the request's Idempotency-Key opened before, if
// anything: then nothing opens, and Prepare returns that checkpoint's id as replay for the
// caller to answer with (rule 4), or idempotency_conflict if the key came with another
// request. A job with max_concurrent_checkpoints preparing already refuses with
// too_many_checkpoints.
func (r *JobState) Prepare(req PrepareRequest, prior *IdempotencyRecord) (cp *Checkpoint, replay int64, err error) {
	if prior != nil {
		if prior.Fingerprint != req.Fingerprint {
			return nil, 0, reject(CodeIdempotencyConflict, nil, "Idempotency-Key %q was used with another request", req.IdempotencyKey)
		}
		return nil, prior.Checkpoint, nil
	}
	cfg := r.Job.Config
	if n := len(r.Preparing); n >= cfg.MaxConcurrentCheckpoints {
		return nil, 0, reject(CodeTooManyCheckpoints, r.Preparing[n-1], "job %s has %d checkpoint(s) preparing, its max_concurrent_checkpoints", r.Job.Name, n)
	}
	timeout := cfg.CheckpointTimeout
	if req.Timeout != 0 {
		timeout = req.Timeout
	}
	cp = &Checkpoint{
		Job:          r.Job.Name,
		ID:           r.Job.Seq + 1,
		Status:       StatusPreparing,
		CreatedAt:    r.Now,
		Deadline:     r.Now.Add(timeout),
		AutoCommit:   cfg.AutoCommit,
		Participants: make([]ParticipantState, len(cfg.Participants)),
	}
	for i, p := range cfg.Participants {
		cp.Participants[i].Name = p
	}
	r.ownJob().Seq = cp.ID
	r.Preparing = append(r.Preparing, cp)
	r.Mutation.Opened = cp
	if req.IdempotencyKey != "" {
		r.Mutation.Idempotency = &IdempotencyRecord{Key: req.IdempotencyKey, Fingerprint: req.Fingerprint, Checkpoint: cp.ID}
	}
	return cp, 0, nil
}

// DeleteJob deletes the job, unless something is owed on one of owing (its checkpoints
// that may owe something): then job_busy, and nothing changes.
func (r *JobState) DeleteJob(owing []*Checkpoint) error {
	for _, cp := range owing {
		if held := r.Find(cp.ID); held != nil {
			cp = held
		}
		if OwesAnything(cp) {
			return reject(CodeJobBusy, nil, "job %s still has checkpoint %d %s with work owed; delete it once every participant acked", r.Job.Name, cp.ID, cp.Status)
		}
	}
	r.Preparing = nil
	r.Mutation.JobDeleted = true
	return nil
}

// CheckParticipant returns not_found unless participant is one of the job's, or may still
// owe something on one of cps: a participant removed from the configuration still settles
// what it owes.
func CheckParticipant(job *Job, cps []*Checkpoint, participant string) error {
	if slices.Contains(job.Config.Participants, participant) {
		return nil
	}
	for _, cp := range cps {
		if MayOwe(cp, participant) {
			return nil
		}
	}
	return reject(CodeNotFound, nil, "%q is not a participant of job %s", participant, job.Name)
}

// MayOwe reports whether participant (or, if empty, anyone) has not acked cp and may still
// owe something on it: cp is preparing or committing, or aborted with its prepared vote.
// It is what JobTx.Owing selects; Owed decides what is really owed.
func MayOwe(cp *Checkpoint, participant string) bool {
	for _, p := range cp.Participants {
		if (participant == "" || p.Name == participant) && p.AckedAt == nil &&
			(cp.Status == StatusPreparing || cp.Status == StatusCommitting || cp.Status == StatusAborted && p.Vote == VotePrepared) {
			return true
		}
	}
	return false
}

// OwingOf returns the checkpoints of cps on which participant (or, if empty, anyone) may
// still owe something (MayOwe), in a slice of its own: a caller may sort it (PendingItems
// does) without touching cps.
func OwingOf(cps []*Checkpoint, participant string) []*Checkpoint {
	var out []*Checkpoint
	for _, cp := range cps {
		if MayOwe(cp, participant) {
			out = append(out, cp)
		}
	}
	return out
}

// Owed says what participant owes on cp, if anything (rule 7).
func Owed(cp *Checkpoint, participant string) (Action, bool) {
	p := cp.Participant(participant)
	if p == nil {
		return "", false
	}
	return OwedBy(cp, p)
}

// OwedBy says what the participant p of cp owes on cp, if anything: Owed without looking
// the participant up, for a caller going through them all.
func OwedBy(cp *Checkpoint, p *ParticipantState) (Action, bool) {
	if p.AckedAt != nil {
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
	for i := range cp.Participants {
		if _, ok := OwedBy(cp, &cp.Participants[i]); ok {
			return true
		}
	}
	return false
}

// PendingItems lists what participant owes among cps at time now, oldest first. A
// checkpoint whose deadline has passed is no longer votable, even before it is aborted
// (rule 6): it is left out until the abort says what it owes.
func PendingItems(now time.Time, cps []*Checkpoint, participant string) []PendingItem {
	sort.Slice(cps, func(i, j int) bool { return cps[i].ID < cps[j].ID })
	items := []PendingItem{}
	for _, cp := range cps {
		if cp.Status == StatusPreparing && !now.Before(cp.Deadline) {
			continue
		}
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
