// Package coordinator is the domain of the two-phase-commit checkpoint coordinator: jobs,
// participants and their epochs, checkpoints and votes, and the rules of the protocol as pure
// decisions over a job's recorded state. It knows neither HTTP nor SQL: Service applies the
// decisions through a Store, which makes each one atomic and durable.
//
// The protocol, its twelve rules and where each is kept are described in docs/protocol.md
// at the root of the repository; rules.go starts with an index of where each rule is
// decided. The exact HTTP contract is openapi.yaml.
package coordinator

import (
	"encoding/json"
	"time"
)

// Status is a checkpoint's place in the two-phase commit.
type Status string

// The statuses. StatusCommitted and StatusAborted are final.
const (
	StatusPreparing  Status = "preparing"
	StatusCommitting Status = "committing"
	StatusCommitted  Status = "committed"
	StatusAborted    Status = "aborted"
)

// Valid reports whether s is one of the four statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusPreparing, StatusCommitting, StatusCommitted, StatusAborted:
		return true
	}
	return false
}

// VoteKind is what a participant says in phase one.
type VoteKind string

// The votes.
const (
	VotePrepared VoteKind = "prepared"
	VoteAbort    VoteKind = "abort"
)

// Cause is why a checkpoint was decided (its decision_cause).
type Cause string

// The causes of a decision.
const (
	CauseAllPrepared   Cause = "all_prepared"   // the last prepared vote completed unanimity
	CauseCommitRequest Cause = "commit_request" // POST .../commit
	CauseAbortVote     Cause = "abort_vote"     // a participant voted abort
	CauseAbortRequest  Cause = "abort_request"  // POST .../abort
	CauseDeadline      Cause = "deadline"       // the deadline passed
	CauseRegistration  Cause = "registration"   // a participant that had not voted registered again
	CauseLowerAborted  Cause = "lower_aborted"  // a lower checkpoint of the job was aborted (rule 9)
)

// Causes lists every cause.
var Causes = []Cause{CauseAllPrepared, CauseCommitRequest, CauseAbortVote, CauseAbortRequest, CauseDeadline, CauseRegistration, CauseLowerAborted}

// OperatorAcker is acked_by of an ack that an operator settled (POST .../complete) without
// authentication; with it, the operator's token's name.
const OperatorAcker = "operator"

// Action is what a participant still owes on a checkpoint.
type Action string

// The actions of a pending list.
const (
	ActionVote   Action = "vote"
	ActionCommit Action = "commit"
	ActionAbort  Action = "abort"
)

// Defaults and bounds of a job's configuration.
const (
	DefaultCheckpointTimeout     = 60 * time.Second
	MinCheckpointTimeout         = 100 * time.Millisecond
	MaxCheckpointTimeout         = 24 * time.Hour
	DefaultMaxConcurrent         = 1
	DefaultRetention             = 7 * 24 * time.Hour
	MinRetention                 = time.Second
	MaxMaxConcurrent             = 1000
	MaxParticipants              = 1000
	MaxReasonLength              = 1024
	MaxIdempotencyKeyLength      = 255
	MaxLongPoll                  = 60 * time.Second
	DefaultPageSize              = 100
	MaxPageSize                  = 1000
	sweepGrace                   = 0
	maxJobNameOrParticipantBytes = 128
)

// JobConfig is what PUT /v1/jobs/{job} sets. A checkpoint keeps the configuration it opened
// with.
type JobConfig struct {
	Participants             []string
	CheckpointTimeout        time.Duration
	MaxConcurrentCheckpoints int
	AutoCommit               bool
	// Retention is how long a final checkpoint that owes nothing is kept after it
	// completed; 0 keeps everything (rule 12).
	Retention time.Duration
}

// Job is a job as stored.
type Job struct {
	Name   string
	Config JobConfig
	// Seq is the highest checkpoint id ever issued for this name, never reset, not even by
	// deleting the job: the next checkpoint is Seq+1.
	Seq int64
	// Epochs holds the current epoch of every participant that ever registered, including
	// names no longer in Config. It is replaced whole (SetEpoch), never changed in place:
	// copies of the job share it (CloneJob).
	Epochs map[string]int64
	// LastCheckpoint and LastCommitted are filled by reads that show the job (GetJob,
	// ListJobs), not inside write transactions.
	LastCheckpoint *int64
	LastCommitted  *int64
	CreatedAt      time.Time
	UpdatedAt      time.Time
	// Version, when a read sets it (Store.Owing on a store that keeps one; 0 otherwise),
	// is the number that the store raises with every committed change of the job or of
	// its checkpoints: two reads that show one Version saw the same job and checkpoints.
	Version int64
}

// Epoch is p's current epoch, 0 if it never registered.
func (j *Job) Epoch(p string) int64 { return j.Epochs[p] }

// ParticipantState is one participant's part of a checkpoint.
type ParticipantState struct {
	Name string
	// Epoch is the epoch the participant voted with; 0 until it votes.
	Epoch int64
	// Vote is empty until the participant votes.
	Vote   VoteKind
	Reason string
	// Committables is the JSON array sent with a prepared vote, compacted; nil until then.
	Committables json.RawMessage
	VotedAt      *time.Time
	AckedAt      *time.Time
	// AckedBy is who acked: the participant's own name, or the operator (its token's name,
	// or OperatorAcker) who settled the ack with POST .../complete.
	AckedBy string
}

// Checkpoint is one two-phase-commit transaction of a job.
type Checkpoint struct {
	Job         string
	ID          int64
	Status      Status
	CreatedAt   time.Time
	Deadline    time.Time
	DecidedAt   *time.Time
	CompletedAt *time.Time
	AbortReason string
	// DecidedBy is the name of the token whose request decided the checkpoint; empty when
	// no token did (no authentication, a deadline, a cascade a deadline caused).
	DecidedBy string
	// DecisionCause is why it was decided; empty while preparing.
	DecisionCause Cause
	AutoCommit    bool
	// Participants are the expected voters, copied from the job when it opened, in the job's
	// order.
	Participants []ParticipantState
	// Seq orders checkpoints across jobs by creation; the store assigns it.
	Seq int64
}

// Participant returns p's state in the checkpoint, or nil if p is not one of its voters.
func (c *Checkpoint) Participant(p string) *ParticipantState {
	for i := range c.Participants {
		if c.Participants[i].Name == p {
			return &c.Participants[i]
		}
	}
	return nil
}

// Clone returns a deep copy, so a caller can keep a checkpoint while rules change another.
func (c *Checkpoint) Clone() *Checkpoint {
	out := *c
	out.Participants = append([]ParticipantState(nil), c.Participants...)
	return &out
}

// Vote is a participant's phase-one answer.
type Vote struct {
	Epoch int64
	Kind  VoteKind
	// Committables is a JSON array (prepared votes only); nil means [].
	Committables json.RawMessage
	// Reason explains an abort vote.
	Reason string
}

// PendingItem is one thing a participant still owes.
type PendingItem struct {
	Checkpoint   int64
	Status       Status
	Action       Action
	Committables json.RawMessage
}

// Pending is everything a participant owes, oldest checkpoint first.
type Pending struct {
	Job         string
	Participant string
	Epoch       int64
	Items       []PendingItem
}

// PrepareRequest opens a checkpoint.
type PrepareRequest struct {
	// Timeout overrides the job's checkpoint timeout when non-zero.
	Timeout time.Duration
	// IdempotencyKey, when set, makes retries return the first checkpoint.
	IdempotencyKey string
	// Fingerprint identifies the request's body, to tell a retry from another request
	// under the same key.
	Fingerprint string
}

// IdempotencyRecord remembers which checkpoint an Idempotency-Key opened.
type IdempotencyRecord struct {
	Key         string
	Fingerprint string
	Checkpoint  int64
}

// CheckpointQuery selects checkpoints for listing.
type CheckpointQuery struct {
	// Job restricts to one job; empty means every job (oldest first), else newest first.
	Job string
	// Jobs restricts a list across jobs to those the pattern matches; empty means every job.
	Jobs JobPattern
	// OlderThan, when positive, keeps (across jobs) the checkpoints opened more than that
	// long ago by the database's clock.
	OlderThan time.Duration
	Statuses  []Status
	// After is the position to continue from, exclusive; 0 starts at the beginning. Within
	// a job (newest first) it is a checkpoint id, and the page holds lower ids. Across jobs
	// (oldest first) it is a Checkpoint.Seq, and the page holds higher ones.
	After int64
	Limit int
}

// ParticipantActivity is one participant of a job at a glance: its epoch (0 if it never
// registered) and when it last registered, its last vote (on the highest checkpoint it
// voted on that is still kept) and how long after that checkpoint's opening it came, when
// the highest checkpoint it acked was acked, and how many items its pending holds.
type ParticipantActivity struct {
	Name         string
	Epoch        int64
	RegisteredAt *time.Time
	LastVoteAt   *time.Time
	LastVote     *time.Duration
	LastAckAt    *time.Time
	Owed         int
}
