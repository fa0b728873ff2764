package coordinator

import (
	"context"
	"time"
)

// Store persists jobs and checkpoints. Every method is safe for concurrent use, also from
// several processes sharing one database where the implementation says so.
//
// Errors: ErrNotFound itself, unwrapped, when the job (or, from JobTx.Checkpoint, the
// checkpoint) does not exist; an error wrapping ErrUnavailable when the
// database cannot be reached; any *Error returned by a callback is passed back unchanged.
type Store interface {
	// Update runs fn in one database transaction that holds the job's lock, so every
	// decision fn takes is made on the current state. It commits when fn returns nil or a
	// rejection (IsRejection: what the rules did before refusing, like aborting an expired
	// checkpoint, stands), and rolls back on any other error. Decisions saved in it are
	// announced to Subscribe'rs after the commit. ErrNotFound if the job does not exist.
	// checkpoint, when not 0, is the one checkpoint fn is about: a store may read it with
	// the job, so that JobTx.Checkpoint(checkpoint) costs no further round trip.
	Update(ctx context.Context, job string, checkpoint int64, fn func(tx JobTx) error) error
	// View runs fn on a consistent snapshot of the job, without its lock. Writes through
	// tx fail. ErrNotFound if the job does not exist.
	View(ctx context.Context, job string, fn func(tx JobTx) error) error
	// Owing is View reading JobTx.Job, JobTx.Now and JobTx.Owing(participant), in as
	// few round trips as the store can: every long-poll on pending reads it, at least once.
	Owing(ctx context.Context, job, participant string) (*Job, time.Time, []*Checkpoint, error)
	// GetCheckpoint reads one checkpoint outside any transaction: the hot path of long
	// polls. ErrNotFound if the job does not exist; ErrGone (itself) if the checkpoint was
	// issued (its id is not above the job's Seq) but is no more (retention, or the job was
	// deleted and created again); nil and no error if it was never issued.
	GetCheckpoint(ctx context.Context, job string, id int64) (*Checkpoint, error)
	// PutJob creates the job or replaces its configuration, atomically. created is true when
	// the job did not exist (or had been deleted). audit, when not nil, is written in the
	// same transaction, with Action job_created or job_updated and At the database's clock.
	PutJob(ctx context.Context, name string, cfg JobConfig, audit *AuditEntry) (job *Job, created bool, err error)
	// ListAudit returns audit entries as q selects them, newest first.
	ListAudit(ctx context.Context, q AuditQuery) ([]*AuditEntry, error)
	// DeleteExpired deletes, in one short transaction, up to limit checkpoints that
	// retention removes (rule 12) from the jobs named, which are in the order JobsToPrune
	// gives: final, owing nothing, completed more than their job's Retention ago by the
	// database's clock, never a job's last committed one; with their votes and
	// Idempotency-Keys. It takes them job after job in that order, oldest completion first.
	// It returns how many it deleted; last, when it chose limit checkpoints, the job it chose
	// the last of them from (it may have more; the jobs before it have none left), and ""
	// when it chose fewer (every job named was looked at); and skipped true when it did not
	// look at all (another coordinator is deleting now). A job whose row is locked elsewhere
	// is left alone. It never waits for a lock: what it leaves, try again later.
	DeleteExpired(ctx context.Context, jobs []string, limit int) (deleted int, last string, skipped bool, err error)
	// JobsToPrune names, by name after the given one, up to limit jobs that have at least
	// one checkpoint that DeleteExpired would delete now. One read for all jobs, by the index
	// of final checkpoints: a job with nothing expired costs an index probe, not a round trip.
	JobsToPrune(ctx context.Context, after string, limit int) ([]string, error)
	// Stats reads the facts of the database that metrics show: the open checkpoints by job
	// and status, and, with lastCommitted, each job's last committed checkpoint (without it
	// Stats.LastCommitted is empty: metrics without a job label do not show it). Its cost
	// grows with the jobs and the open checkpoints, never with history.
	Stats(ctx context.Context, lastCommitted bool) (*Stats, error)
	// GetJob returns the job with LastCheckpoint and LastCommitted filled.
	GetJob(ctx context.Context, name string) (*Job, error)
	// Participants returns what GET /v1/jobs/{job}/participants shows of each of names,
	// participants of job, in that order.
	Participants(ctx context.Context, job string, names []string) ([]ParticipantActivity, error)
	// ListJobs returns up to limit jobs that pattern matches (empty: every job) with names
	// after the given one, by name.
	ListJobs(ctx context.Context, pattern JobPattern, after string, limit int) ([]*Job, error)
	// ListCheckpoints returns checkpoints as q selects them.
	ListCheckpoints(ctx context.Context, q CheckpointQuery) ([]*Checkpoint, error)
	// ExpiredJobs names the jobs with a preparing checkpoint whose deadline has passed by the
	// database's clock.
	ExpiredJobs(ctx context.Context) ([]string, error)
	// Subscribe returns a subscription whose Done channel is closed once the checkpoint may
	// have been decided (possibly by another process); Cancel stops waiting. Spurious
	// wake-ups are allowed; missed ones are not, once Subscribe has returned. When this
	// process decided, Decided may hand the waiter the checkpoint as committed.
	Subscribe(job string, id int64) *Subscription
	// Ready reports whether the database answers and its schema is current.
	Ready(ctx context.Context) error
	// Close releases the store's resources.
	Close()
}

// PreparingKnower is implemented by a store that may know, without reading, that a
// checkpoint is preparing, in a way that a waiter subscribed before asking is woken by
// any decision taken on it after what the store knows (by this process or another).
type PreparingKnower interface {
	KnownPreparing(job string, id int64) bool
}

// DecisionKnower is implemented by a store that may know, without reading, that a
// checkpoint is decided: KnownDecided returns a copy of it as this process last knew it
// (its status final, its acks perhaps behind another process's), nil when it does not know.
type DecisionKnower interface {
	KnownDecided(job string, id int64) *Checkpoint
}

// VersionKnower is implemented by a store that may know, without reading, the Version of a
// job as it stands, in a way that a waiter subscribed to the job's changes (AnyCheckpoint)
// before asking is woken by any change committed after what the store knows (by this
// process or another).
type VersionKnower interface {
	KnownVersion(job string) (int64, bool)
}

// OwingKnower is implemented by a store that may know, without reading, what anyone owes
// on a job: the job (with its Version), a clock no later than the database's, and every
// checkpoint on which anyone may owe something, lowest id first, in a way that a waiter
// subscribed to the job's changes (AnyCheckpoint) before asking is woken by any change
// committed after what the store knows that can make something owed: a checkpoint opened
// or decided, a participant registered, the job changed or deleted, by this process or
// another. What it knows may miss what only settled something owed (a vote or an ack
// through another process), so it is trusted only to say that a participant owes
// nothing. What it returns is shared: callers only read it.
type OwingKnower interface {
	KnownOwing(job string) (*Job, time.Time, []*Checkpoint, bool)
}

// JobTx is one job inside one database transaction.
type JobTx interface {
	// Now is the database's clock, read once the job's lock is held.
	Now() time.Time
	// Job is the job's row: configuration, Seq and Epochs.
	Job() *Job
	// Preparing returns the job's preparing checkpoints, lowest id first.
	Preparing(ctx context.Context) ([]*Checkpoint, error)
	// Checkpoint returns one checkpoint, ErrNotFound if it does not exist.
	Checkpoint(ctx context.Context, id int64) (*Checkpoint, error)
	// Owing returns, lowest id first, the checkpoints in which participant (or, if empty,
	// any participant) has not acked and may still owe something: those preparing or
	// committing, and those aborted where it voted prepared. Aborted checkpoints without
	// an unacked prepared vote owe nothing and are left out, so the cost does not grow with
	// history. It may return more; the rules (Owed) decide what is really owed.
	Owing(ctx context.Context, participant string) ([]*Checkpoint, error)
	// Idempotency returns what an Idempotency-Key opened, ok false if it is unknown.
	Idempotency(ctx context.Context, key string) (rec IdempotencyRecord, ok bool, err error)
	// Apply writes what the rules decided (see Mutation): a new checkpoint with its
	// participants and Idempotency-Key, epochs, votes, acks, statuses, the job deleted, audit
	// entries. The
	// checkpoints whose status changed are announced to subscribers once the transaction
	// commits. m.Opened.Seq is assigned by the time the update has committed (not
	// necessarily on return). A store may keep m until then: the caller does not change it.
	Apply(ctx context.Context, m *Mutation) error
}

// Stats are the facts of the database that every coordinator on it reports alike.
type Stats struct {
	// Open has one entry per job and open status (preparing, committing) with any checkpoint.
	Open []OpenCheckpoints
	// LastCommitted is each job's highest checkpoint id decided commit; jobs without one are
	// left out.
	LastCommitted map[string]int64
}

// OpenCheckpoints counts a job's checkpoints in one open status.
type OpenCheckpoints struct {
	Job    string
	Status Status
	Count  int64
	// Oldest is when the oldest of them opened.
	Oldest time.Time
}

// OwingByView is Store.Owing for a store whose View costs no round trip: a View reading
// the job, the clock and JobTx.Owing(participant).
func OwingByView(ctx context.Context, s Store, job, participant string) (*Job, time.Time, []*Checkpoint, error) {
	var j *Job
	var now time.Time
	var owing []*Checkpoint
	err := s.View(ctx, job, func(tx JobTx) error {
		var err error
		owing, err = tx.Owing(ctx, participant)
		j, now = tx.Job(), tx.Now()
		return err
	})
	if err != nil {
		return nil, time.Time{}, nil, err
	}
	return j, now, owing, nil
}
