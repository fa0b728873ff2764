package coordinator

import "maps"

// Mutation is what the rules decided about one job, as data: the store writes it in the
// job's transaction (JobTx.Apply), and Apply replays it on any other copy of the job's state
// (the reference store, the PostgreSQL store's cache of recent jobs, the next update of the
// same job in a group commit). A store never works out by itself what a decision changed.
//
// Every change carries the state it leaves, not a delta: a vote or an ack carries the
// participant's whole state after it, a status change the checkpoint as it stands after
// it. So a field added to a participant or a checkpoint travels without any store code but
// its SQL.
type Mutation struct {
	// Opened is the checkpoint that a prepare opened, nil if none; Idempotency, if not nil,
	// records the Idempotency-Key that opened it.
	Opened      *Checkpoint
	Idempotency *IdempotencyRecord
	// Epochs are participants' new epochs, in the order they were given.
	Epochs []EpochChange
	// Votes and Acks are participants whose vote or ack was recorded, with their state after
	// it, in the order recorded.
	Votes []ParticipantChange
	Acks  []ParticipantChange
	// Statuses are checkpoints whose status changed, in the order the decisions were taken,
	// as they stand once the rules are done (a store copies what it keeps of them). Waiters
	// are told of them once the transaction commits.
	Statuses []*Checkpoint
	// JobDeleted says the job was deleted with all its checkpoints; its Seq and epochs live
	// on, so that neither is reused if the job is created again.
	JobDeleted bool
	// Audit are the entries of the actions the request took, written with the rest.
	Audit []AuditEntry
}

// EpochChange is a participant's new epoch.
type EpochChange struct {
	Participant string
	Epoch       int64
}

// ParticipantChange is one participant's state in one checkpoint after a vote or an ack.
type ParticipantChange struct {
	Checkpoint  int64
	Participant ParticipantState
}

// Empty reports whether m changes nothing.
func (m *Mutation) Empty() bool {
	return m.Opened == nil && len(m.Epochs) == 0 && len(m.Votes) == 0 && len(m.Acks) == 0 &&
		len(m.Statuses) == 0 && !m.JobDeleted && len(m.Audit) == 0
}

// ChangesJob reports whether m changes more of the job than its checkpoints: an epoch, or
// the job deleted. A store hands the checkpoints of a change that did not to the job's
// waiters instead of having them read it again.
func (m *Mutation) ChangesJob() bool { return len(m.Epochs) > 0 || m.JobDeleted }

// Apply replays m on a copy of a job's state: job's row (its Seq and Epochs) and the job's
// checkpoints in cps, by id, which it changes in place (a new checkpoint is added as a
// copy). complete is false when m changed a checkpoint that cps does not hold: cps then no
// longer tells that checkpoint's state. After JobDeleted, cps is emptied.
func (m *Mutation) Apply(job *Job, cps map[int64]*Checkpoint) (complete bool) {
	complete = true
	if m.Opened != nil {
		cps[m.Opened.ID] = m.Opened.Clone()
		job.Seq = max(job.Seq, m.Opened.ID)
	}
	for _, e := range m.Epochs {
		job.SetEpoch(e.Participant, e.Epoch)
	}
	for _, changes := range [][]ParticipantChange{m.Votes, m.Acks} {
		for _, c := range changes {
			p := participantIn(cps, c.Checkpoint, c.Participant.Name)
			if p == nil {
				complete = false
				continue
			}
			*p = c.Participant
		}
	}
	for _, st := range m.Statuses {
		cp := cps[st.ID]
		if cp == nil {
			complete = false
			continue
		}
		cp.setDecision(st)
	}
	if m.JobDeleted {
		clear(cps)
	}
	return complete
}

func participantIn(cps map[int64]*Checkpoint, id int64, name string) *ParticipantState {
	if cp := cps[id]; cp != nil {
		return cp.Participant(name)
	}
	return nil
}

// setDecision copies from's status and the fields that record its decision.
func (c *Checkpoint) setDecision(from *Checkpoint) {
	c.Status, c.DecidedAt, c.CompletedAt, c.AbortReason, c.DecidedBy, c.DecisionCause =
		from.Status, from.DecidedAt, from.CompletedAt, from.AbortReason, from.DecidedBy, from.DecisionCause
}

// CloneJob returns a copy of a job whose Epochs and Seq can change without changing j, for
// the rules to decide on, or a state that outlives the transaction that read it. Its
// configuration and its Epochs are shared: each is replaced whole, never changed in place
// (SetEpoch), so that a copy costs no map (one is made for every update).
func CloneJob(j *Job) *Job {
	out := *j
	return &out
}

// SetEpoch gives participant epoch in j.Epochs, a new map: the one j had may be shared
// with copies (CloneJob).
func (j *Job) SetEpoch(participant string, epoch int64) {
	epochs := make(map[string]int64, len(j.Epochs)+1)
	maps.Copy(epochs, j.Epochs)
	epochs[participant] = epoch
	j.Epochs = epochs
}
