package coordinator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Service carries out the protocol: it validates requests, runs the rules on a job's state
// inside one store transaction, and answers only after the store committed.
type Service struct {
	store  Store
	logger *slog.Logger
	// closing is closed by EndWaits: long-polls answer at once from then on.
	closing   chan struct{}
	closeOnce sync.Once
	// maxCheckpointBytes is JobState.MaxCheckpointBytes.
	maxCheckpointBytes int64
	observer           Observer
	// owingReads shares the reads of pending's long-polls.
	owingReads *owingReads
}

// NewService returns a Service on store. A nil logger discards.
func NewService(store Store, logger *slog.Logger, opts ...ServiceOption) *Service {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Service{store: store, logger: logger, closing: make(chan struct{}), maxCheckpointBytes: DefaultMaxCheckpointBytes,
		observer: noObserver{}, owingReads: newOwingReads()}
	for _, o := range opts {
		o(s)
	}
	return s
}

// ServiceOption changes a setting of NewService.
type ServiceOption func(*Service)

// DefaultMaxCheckpointBytes bounds a checkpoint's committables unless
// WithMaxCheckpointBytes says otherwise: enough for thousands of file names or
// transaction ids, far from what a coordinator's memory can hold many times over.
const DefaultMaxCheckpointBytes = 16 << 20

// WithMaxCheckpointBytes bounds the committables of one checkpoint, all participants'
// together: the prepared vote that would pass it gets payload_too_large and is not
// recorded. 0 means no bound.
func WithMaxCheckpointBytes(n int64) ServiceOption {
	return func(s *Service) { s.maxCheckpointBytes = n }
}

// EndWaits answers every long-poll waiting now, and every one that comes later, at once
// with the checkpoint as it stands, as at the end of its wait: a coordinator shutting down
// calls it before it finishes the requests in flight, so that no waiter is cut off without
// an answer.
func (s *Service) EndWaits() {
	s.closeOnce.Do(func() { close(s.closing) })
}

type actorKey struct{}

// WithActor returns ctx carrying the name of the token on whose request the Service acts,
// recorded as decided_by on what the request decides.
func WithActor(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, actorKey{}, name)
}

func actorOf(ctx context.Context) string {
	name, _ := ctx.Value(actorKey{}).(string)
	return name
}

// Ready reports whether the store can serve.
func (s *Service) Ready(ctx context.Context) error { return s.store.Ready(ctx) }

// PutJob creates or replaces a job's configuration. created tells which.
func (s *Service) PutJob(ctx context.Context, name string, cfg JobConfig) (*Job, bool, error) {
	var f fieldErrors
	f.name("job", name)
	if err := f.err(); err != nil {
		return nil, false, err
	}
	if err := ValidateJobConfig(cfg); err != nil {
		return nil, false, err
	}
	audit := auditEntry(ctx, "", name, 0, "")
	job, created, err := s.store.PutJob(ctx, name, cfg, &audit)
	if err != nil {
		return nil, false, fmt.Errorf("put job %s: %w", name, err)
	}
	return s.view(job), created, nil
}

// GetJob returns a job with its epochs, last checkpoint and last committed checkpoint.
func (s *Service) GetJob(ctx context.Context, name string) (*Job, error) {
	if err := ValidateName("job", name); err != nil {
		return nil, err
	}
	job, err := s.store.GetJob(ctx, name)
	if err != nil {
		return nil, jobError(name, err)
	}
	return s.view(job), nil
}

// Participants returns each participant of job's configuration at a glance, in its
// order. ErrNotFound if the job does not exist.
func (s *Service) Participants(ctx context.Context, name string) ([]ParticipantActivity, error) {
	if err := ValidateName("job", name); err != nil {
		return nil, err
	}
	job, err := s.store.GetJob(ctx, name)
	if err != nil {
		return nil, jobError(name, err)
	}
	out, err := s.store.Participants(ctx, name, job.Config.Participants)
	if err != nil {
		return nil, jobError(name, err)
	}
	return out, nil
}

// view limits Epochs to the configured participants, with 0 for the unregistered.
func (s *Service) view(job *Job) *Job {
	epochs := make(map[string]int64, len(job.Config.Participants))
	for _, p := range job.Config.Participants {
		epochs[p] = job.Epochs[p]
	}
	out := *job
	out.Epochs = epochs
	return &out
}

// ListJobs returns a page of jobs by name after the given one, and whether more follow.
// Only the jobs that pattern matches are listed (empty: every job).
func (s *Service) ListJobs(ctx context.Context, pattern JobPattern, after string, limit int) ([]*Job, bool, error) {
	var f fieldErrors
	validatePageSize(&f, limit)
	if pattern != "" && !ValidJobPattern(pattern) {
		f.add("job", "%q is not a job pattern: a job's name, a prefix of one ending in *, or *", pattern)
	}
	if err := f.err(); err != nil {
		return nil, false, err
	}
	jobs, err := s.store.ListJobs(ctx, pattern, after, limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("list jobs: %w", err)
	}
	more := len(jobs) > limit
	if more {
		jobs = jobs[:limit]
	}
	for i, j := range jobs {
		jobs[i] = s.view(j)
	}
	return jobs, more, nil
}

// ListCheckpoints returns a page of checkpoints and whether more follow.
func (s *Service) ListCheckpoints(ctx context.Context, q CheckpointQuery) ([]*Checkpoint, bool, error) {
	limit := q.Limit
	var f fieldErrors
	validatePageSize(&f, limit)
	if q.Job != "" {
		f.name("job", q.Job)
	}
	if q.Jobs != "" && !ValidJobPattern(q.Jobs) {
		f.add("job", "%q is not a job pattern: a job's name, a prefix of one ending in *, or *", q.Jobs)
	}
	for _, st := range q.Statuses {
		if !st.Valid() {
			f.add("status", "%q is not a status: use preparing, committing, committed or aborted", st)
		}
	}
	if q.After < 0 {
		f.add("cursor", "is not a cursor this service returned")
	}
	if err := f.err(); err != nil {
		return nil, false, err
	}
	if q.Job != "" {
		if _, err := s.store.GetJob(ctx, q.Job); err != nil {
			return nil, false, jobError(q.Job, err)
		}
	}
	q.Limit = limit + 1
	cps, err := s.store.ListCheckpoints(ctx, q)
	if err != nil {
		return nil, false, fmt.Errorf("list checkpoints: %w", err)
	}
	more := len(cps) > limit
	if more {
		cps = cps[:limit]
	}
	return cps, more, nil
}

// DeleteJob deletes a job when nothing is owed on it (else ErrJobBusy).
func (s *Service) DeleteJob(ctx context.Context, name string) error {
	if err := ValidateName("job", name); err != nil {
		return err
	}
	err := s.update(ctx, name, 0, func(st *JobState, tx JobTx) error {
		owing, err := tx.Owing(ctx, "")
		if err != nil {
			return err
		}
		if err := st.DeleteJob(owing); err != nil {
			return err
		}
		st.audit(ctx, AuditJobDeleted, 0, "")
		return nil
	})
	if d, ok := s.observer.(JobDeletionObserver); ok && err == nil {
		d.JobDeleted(name)
	}
	return jobError(name, err)
}

// Register gives participant a new epoch and aborts what it had not voted on; it returns
// the new epoch and what the participant owes.
func (s *Service) Register(ctx context.Context, job, participant string) (*Pending, error) {
	if err := validateNames(job, participant); err != nil {
		return nil, err
	}
	var out *Pending
	err := s.update(ctx, job, 0, func(st *JobState, tx JobTx) error {
		owing, err := tx.Owing(ctx, participant)
		if err != nil {
			return err
		}
		if err := CheckParticipant(st.Job, current(st, owing), participant); err != nil {
			return err
		}
		epoch := st.Register(participant)
		out = &Pending{Job: job, Participant: participant, Epoch: epoch, Items: PendingItems(st.Now, current(st, owing), participant)}
		return nil
	})
	if err != nil {
		return nil, jobError(job, err)
	}
	return out, nil
}

// current returns cps (read before the rules ran) with the rules' copies in their place,
// and the checkpoints the rules changed.
func current(st *JobState, cps []*Checkpoint) []*Checkpoint {
	byID := make(map[int64]*Checkpoint, len(cps))
	for _, cp := range cps {
		byID[cp.ID] = cp
	}
	for _, list := range [][]*Checkpoint{st.Preparing, st.Mutation.Statuses} {
		for _, cp := range list {
			byID[cp.ID] = cp
		}
	}
	out := make([]*Checkpoint, 0, len(byID))
	for _, cp := range byID {
		out = append(out, cp)
	}
	return out
}

// Pending lists what participant owes, oldest first, with its current epoch.
//
// With wait > 0 and nothing owed, it waits up to wait for something to be: a checkpoint
// opened or decided, or the participant registered again (its epoch changed), through this
// process or any other on the database; then it answers as it stands. No database read is
// made while nothing changes. epoch, when not 0, is the caller's: the wait ends at once
// when the participant's epoch is another (it registered again, also before this call).
func (s *Service) Pending(ctx context.Context, job, participant string, wait time.Duration, epoch int64) (*Pending, error) {
	if err := validateNames(job, participant); err != nil {
		return nil, err
	}
	if epoch < 0 {
		var f fieldErrors
		validateEpoch(&f, epoch)
		return nil, f.err()
	}
	if err := validateWait(wait); err != nil {
		return nil, err
	}
	if wait == 0 || s.waitsEnded() {
		return s.pending(ctx, job, participant)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	knower, _ := s.store.(VersionKnower)
	owingKnower, _ := s.store.(OwingKnower)
	var known *owingView // the last read, or what a hand-over or the store's knowledge made of it
	for first := true; ; first = false {
		if known != nil {
			// A state handed over (Changed) is the job at a version committed while this
			// call waited: what the participant owes there is an answer.
			if p, err := known.pending(participant); err != nil || PendingAnswers(p, epoch, false) {
				return p, err
			}
		}
		// Subscribe before reading, so that a change after the read wakes us. A state
		// handed over in which the participant owes nothing stands only while the store
		// knows the job is still at its version: a change between the hand-over and this
		// subscription is then looked at again.
		sub := s.store.Subscribe(job, AnyCheckpoint)
		if known != nil {
			if v, ok := knownVersion(knower, job); !ok || v != known.job.Version {
				known = nil
			}
		}
		if known == nil {
			known = knownOwing(owingKnower, job, participant, epoch)
		}
		if known == nil {
			var err error
			if known, err = s.readOwing(ctx, job); err != nil {
				sub.Cancel()
				return nil, err
			}
		}
		p, err := known.pending(participant)
		if first && err == nil && epoch == 0 {
			epoch = p.Epoch // the caller's, as far as this wait knows
		}
		if err != nil || PendingAnswers(p, epoch, false) {
			sub.Cancel()
			return p, err
		}
		select {
		case <-sub.Done():
			// Something of the job changed (or may have): read again, unless this process
			// changed only checkpoints, in a way the version last read can follow, and
			// handed them over.
			known = known.after(sub.Changed())
		case <-timer.C:
			sub.Cancel()
			return p, nil
		case <-s.closing:
			sub.Cancel()
			return p, nil
		case <-ctx.Done():
			sub.Cancel()
			return nil, ctx.Err()
		}
	}
}

func knownVersion(k VersionKnower, job string) (int64, bool) {
	if k == nil {
		return 0, false
	}
	return k.KnownVersion(job)
}

// knownOwing returns job as the store knows it without a read if by that participant owes
// nothing at epoch (0: whatever its epoch), nil otherwise. The store's knowledge is trusted
// for nothing more (OwingKnower): a participant it says owes something, or does not
// know, is read.
func knownOwing(k OwingKnower, job, participant string, epoch int64) *owingView {
	if k == nil {
		return nil
	}
	j, now, owing, ok := k.KnownOwing(job)
	if !ok {
		return nil
	}
	v := &owingView{job: j, now: now, owing: owing}
	if p, err := v.pending(participant); err != nil || PendingAnswers(p, epoch, epoch == 0) {
		return nil
	}
	return v
}

// pending reads what participant owes now, in a read it may share with the other
// participants of job asking at the same moment.
func (s *Service) pending(ctx context.Context, job, participant string) (*Pending, error) {
	known, err := s.readOwing(ctx, job)
	if err != nil {
		return nil, err
	}
	return known.pending(participant)
}

// owingView is a job as read for pending, or as a hand-over made it: the job (with its
// Version, when the store keeps one), the database's clock and the checkpoints in which
// anyone may owe something. Its slices are shared: it is read only.
type owingView struct {
	job   *Job
	now   time.Time
	owing []*Checkpoint
}

// readOwing reads job for pending, in a read it may share with the other participants of
// job asking at the same moment.
func (s *Service) readOwing(ctx context.Context, job string) (*owingView, error) {
	v, err := s.owingReads.read(ctx, s.store, job)
	if err != nil {
		return nil, jobError(job, err)
	}
	return v, nil
}

// pending is what participant owes by v.
func (v *owingView) pending(participant string) (*Pending, error) {
	owing := OwingOf(v.owing, participant)
	if err := CheckParticipant(v.job, owing, participant); err != nil {
		return nil, jobError(v.job.Name, err)
	}
	return &Pending{Job: v.job.Name, Participant: participant, Epoch: v.job.Epoch(participant), Items: PendingItems(v.now, owing, participant)}, nil
}

// after returns the job as it stands after c for the participant waiting on v, nil (read
// it) if c is nil or does not follow the version v shows (Changed): v with c's
// checkpoints in place of its own of the same ids, at c's version, and at c's clock or
// v's, whichever is later (the batch may have read its clock before v was read). When v
// is older than c.From, what it holds of checkpoints c did not touch may be stale for
// other participants, never for the waiting one, which owed nothing on them (Changed): a
// view made so serves that participant alone, as every view of a wait does.
func (v *owingView) after(c *Changed) *owingView {
	if c == nil || v.job.Version == 0 || v.job.Version < c.Since || v.job.Version > c.From {
		return nil
	}
	job := *v.job
	job.Version = c.To
	owing := make([]*Checkpoint, 0, len(v.owing)+len(c.Checkpoints))
	for _, cp := range v.owing {
		if !slices.ContainsFunc(c.Checkpoints, func(n *Checkpoint) bool { return n.ID == cp.ID }) {
			owing = append(owing, cp)
		}
	}
	for _, cp := range c.Checkpoints {
		if MayOwe(cp, "") {
			owing = append(owing, cp)
		}
	}
	slices.SortFunc(owing, func(a, b *Checkpoint) int { return cmp.Compare(a.ID, b.ID) })
	now := c.Now
	if v.now.After(now) {
		now = v.now
	}
	return &owingView{job: &job, now: now, owing: owing}
}

// Prepare opens the job's next checkpoint. replayed is true when an Idempotency-Key
// matched an earlier request, whose checkpoint is returned as it stands.
func (s *Service) Prepare(ctx context.Context, job string, req PrepareRequest) (cp *Checkpoint, replayed bool, err error) {
	if err := ValidatePrepare(job, req); err != nil {
		return nil, false, err
	}
	// The closure's results are its own: after a failure (a timeout) the store may still be
	// running it on its own goroutine, so they are read only after a committed answer.
	var got *Checkpoint
	var replay bool
	err = s.update(ctx, job, 0, func(st *JobState, tx JobTx) error {
		var prior *IdempotencyRecord
		if req.IdempotencyKey != "" {
			rec, ok, err := tx.Idempotency(ctx, req.IdempotencyKey)
			if err != nil {
				return err
			}
			if ok {
				prior = &rec
			}
		}
		opened, replayOf, err := st.Prepare(req, prior)
		if err != nil || replayOf == 0 {
			got, replay = opened, false
			return err
		}
		replay = true
		if got = st.Find(replayOf); got == nil {
			got, err = tx.Checkpoint(ctx, replayOf)
		}
		return err
	})
	if err != nil {
		return nil, false, jobError(job, err)
	}
	return got, replay, nil
}

// GetCheckpoint returns a checkpoint. With wait > 0 and the checkpoint preparing, it first
// waits up to wait for its decision.
func (s *Service) GetCheckpoint(ctx context.Context, job string, id int64, wait time.Duration) (*Checkpoint, error) {
	if err := validateCheckpoint(job, id); err != nil {
		return nil, err
	}
	if err := validateWait(wait); err != nil {
		return nil, err
	}
	if wait == 0 || s.waitsEnded() {
		return s.readCheckpoint(ctx, job, id)
	}
	return s.awaitDecision(ctx, job, id, wait, nil)
}

// validateWait checks a long-poll's wait (wait_ms).
func validateWait(wait time.Duration) error {
	if wait < 0 || wait > MaxLongPoll {
		var f fieldErrors
		f.add("wait_ms", "must be from 0 to %d", MaxLongPoll.Milliseconds())
		return f.err()
	}
	return nil
}

// awaitDecision waits up to wait for checkpoint id to leave preparing, and returns it as it
// then stands (at once if it is decided already). Given a voter, it also returns, with the
// checkpoint as it stands, once the voter owes something (voter.owes).
func (s *Service) awaitDecision(ctx context.Context, job string, id int64, wait time.Duration, voter *voterWait) (*Checkpoint, error) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	knower, _ := s.store.(PreparingKnower)
	var jobChanged <-chan struct{} // nil: never ready
	if voter != nil {
		jobChanged = voter.sub.Done()
	}
recheck:
	for first := true; ; first = false {
		// Subscribe before reading, so that a decision after the read wakes us. A wake-up
		// may be spurious (a store that lost its notifications wakes every waiter), so the
		// wait goes on until the checkpoint is decided or the time is up. The first time,
		// a store that knows the checkpoint is preparing spares the read.
		sub := s.store.Subscribe(job, id)
		if !first || knower == nil || !knower.KnownPreparing(job, id) {
			cp, err := s.readCheckpoint(ctx, job, id)
			if err != nil || CheckpointAnswers(cp) {
				sub.Cancel()
				return cp, err
			}
		}
		if first && voter != nil {
			// A voter that owes something already (a newer checkpoint opened before it
			// voted) does not wait.
			if owes, err := voter.owes(ctx, s); err != nil || owes {
				sub.Cancel()
				if err != nil {
					return nil, err
				}
				return s.asItStands(ctx, job, id)
			}
		}
		for {
			select {
			case <-sub.Done():
				sub.Cancel()
				// Decided in this process: the checkpoint as it committed, without a read.
				if cp := sub.Decided(); cp != nil && CheckpointAnswers(cp) {
					return cp, nil
				}
				continue recheck
			case <-jobChanged:
				// Its own decision wakes the job's waiters too (first, in some stores): a
				// store that knows it answers without a read. Otherwise the wait ends if
				// the voter owes something now, and goes on, subscribed again, if not.
				if decided := s.knownDecided(job, id); decided != nil {
					sub.Cancel()
					return decided, nil
				}
				voter.sub.Cancel()
				voter.sub = s.store.Subscribe(job, AnyCheckpoint)
				if owes, err := voter.owes(ctx, s); err != nil || owes {
					sub.Cancel()
					return s.asItStands(ctx, job, id)
				}
				jobChanged = voter.sub.Done()
			case <-timer.C:
				sub.Cancel()
				return s.readCheckpoint(ctx, job, id)
			case <-s.closing:
				sub.Cancel()
				return s.readCheckpoint(ctx, job, id)
			case <-ctx.Done():
				sub.Cancel()
				return nil, ctx.Err()
			}
		}
	}
}

// voterWait is what the wait of a vote knows of its voter: the wait ends, besides at the
// checkpoint's decision, once the voter owes anything on the job, as pending would list it
// (a vote on a newer checkpoint, in a job that holds several preparing at once), or its
// epoch has moved on. sub is subscribed to the job's changes (AnyCheckpoint) and woken by
// each of them, then subscribed again before the voter's debts are looked at.
type voterWait struct {
	job, participant string
	epoch            int64
	sub              *Subscription
}

// owes reports whether the voter owes anything now; w.sub must be subscribed before the
// call, so that a change after the look wakes the wait. Most wakes of a job's waiters are
// news of other participants or of the voter's own checkpoint: a store that knows the
// voter owes nothing answers without a read.
func (w *voterWait) owes(ctx context.Context, s *Service) (bool, error) {
	owingKnower, _ := s.store.(OwingKnower)
	if knownOwing(owingKnower, w.job, w.participant, w.epoch) != nil {
		return false, nil
	}
	v, err := s.readOwing(ctx, w.job)
	if err != nil {
		return false, err
	}
	p, err := v.pending(w.participant)
	return err != nil || PendingAnswers(p, w.epoch, false), nil
}

// asItStands is checkpoint id as it stands, for a vote whose wait ends because its voter
// owes something: that may be this checkpoint's own decision, taken while the voter's
// debts were looked at, which the answer then tells.
func (s *Service) asItStands(ctx context.Context, job string, id int64) (*Checkpoint, error) {
	if decided := s.knownDecided(job, id); decided != nil {
		return decided, nil
	}
	return s.readCheckpoint(ctx, job, id)
}

// knownDecided is the checkpoint as this process last committed it, if the store knows
// without a read that it is decided (DecisionKnower), else nil.
func (s *Service) knownDecided(job string, id int64) *Checkpoint {
	if knower, ok := s.store.(DecisionKnower); ok {
		return knower.KnownDecided(job, id)
	}
	return nil
}

func (s *Service) waitsEnded() bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}

func (s *Service) readCheckpoint(ctx context.Context, job string, id int64) (*Checkpoint, error) {
	cp, err := s.store.GetCheckpoint(ctx, job, id)
	if err == ErrGone {
		return nil, checkpointError(job, id, err)
	}
	if err != nil {
		return nil, jobError(job, err)
	}
	if cp == nil {
		return nil, checkpointError(job, id, ErrNotFound)
	}
	return cp, nil
}

// Vote records a participant's vote and returns the checkpoint as it stands after it.
func (s *Service) Vote(ctx context.Context, job string, id int64, participant string, v Vote) (*Checkpoint, error) {
	v, err := ValidateVoteRequest(job, id, participant, v)
	if err != nil {
		return nil, err
	}
	var recorded bool
	cp, err := s.onCheckpoint(ctx, job, id, func(st *JobState, cp *Checkpoint) error {
		n := len(st.Mutation.Votes)
		err := st.Vote(cp, participant, v)
		recorded = len(st.Mutation.Votes) > n
		return err
	})
	// recorded is read only after a committed answer (see update).
	if r := voteResult(err, err == nil && recorded); r != "" {
		s.observer.Voted(job, v.Kind, r)
	}
	return cp, err
}

// VoteAndWait is Vote, then, with wait > 0 and the checkpoint still preparing after the
// vote, a wait of up to wait for its decision: the voter learns the decision from its vote
// instead of asking again. The wait also ends, with the checkpoint still preparing, once
// the voter owes anything else (a vote on a newer checkpoint, in a job that holds several
// preparing at once) or was registered again: pending tells it what. wait is checked
// before the vote; the vote is recorded whatever becomes of the wait, and when the wait
// cannot tell (the request ends, the store cannot be read), the answer is the checkpoint
// as the vote left it.
func (s *Service) VoteAndWait(ctx context.Context, job string, id int64, participant string, v Vote, wait time.Duration) (*Checkpoint, error) {
	if err := validateWait(wait); err != nil {
		return nil, err
	}
	var voter *voterWait
	if wait > 0 {
		// A checkpoint opened while the vote waits (in a job that holds several preparing
		// at once) ends the wait: the voter owes a vote on it, which should not wait for
		// this decision. Subscribed before the vote, so that one opened meanwhile counts.
		voter = &voterWait{job: job, participant: participant, epoch: v.Epoch, sub: s.store.Subscribe(job, AnyCheckpoint)}
		defer func() { voter.sub.Cancel() }()
	}
	cp, err := s.Vote(ctx, job, id, participant, v)
	if err != nil || wait == 0 || CheckpointAnswers(cp) || s.waitsEnded() {
		return cp, err
	}
	// The other votes come close behind this one: often one has decided already.
	if decided := s.knownDecided(job, id); decided != nil {
		return decided, nil
	}
	if decided, err := s.awaitDecision(ctx, job, id, wait, voter); err == nil {
		return decided, nil
	}
	return cp, nil
}

// Commit decides commit for a checkpoint whose votes are all prepared. reason, if any, goes
// to the audit.
func (s *Service) Commit(ctx context.Context, job string, id int64, reason string) (*Checkpoint, error) {
	if err := ValidateAbort(job, id, reason); err != nil {
		return nil, err
	}
	return s.onCheckpoint(ctx, job, id, func(st *JobState, cp *Checkpoint) error {
		was := cp.Status
		if err := st.Commit(cp); err != nil {
			return err
		}
		if cp.Status != was {
			st.audit(ctx, AuditCheckpointCommitted, id, reason)
		}
		return nil
	})
}

// Complete settles, on an operator's request, what participants gone for good will never
// ack (JobState.Complete). reason, if any, goes to the audit.
func (s *Service) Complete(ctx context.Context, job string, id int64, reason string) (*Checkpoint, error) {
	if err := ValidateAbort(job, id, reason); err != nil {
		return nil, err
	}
	return s.onCheckpoint(ctx, job, id, func(st *JobState, cp *Checkpoint) error {
		settled, err := st.Complete(cp)
		if err != nil {
			return err
		}
		if settled > 0 {
			st.audit(ctx, AuditCheckpointCompleted, id, reason)
		}
		return nil
	})
}

// Abort decides abort for a checkpoint (and every higher preparing one).
func (s *Service) Abort(ctx context.Context, job string, id int64, reason string) (*Checkpoint, error) {
	if err := ValidateAbort(job, id, reason); err != nil {
		return nil, err
	}
	return s.onCheckpoint(ctx, job, id, func(st *JobState, cp *Checkpoint) error { return st.abortRequested(ctx, cp, reason) })
}

// abortRequested is Abort on request, audited when it decided.
func (st *JobState) abortRequested(ctx context.Context, cp *Checkpoint, reason string) error {
	was := cp.Status
	if err := st.Abort(cp, reason); err != nil {
		return err
	}
	if cp.Status != was {
		st.audit(ctx, AuditCheckpointAborted, cp.ID, reason)
	}
	return nil
}

// audit records that the request of ctx took action on the state's job.
func (st *JobState) audit(ctx context.Context, action AuditAction, checkpoint int64, reason string) {
	e := auditEntry(ctx, action, st.Job.Name, checkpoint, reason)
	e.At = st.Now
	st.Mutation.Audit = append(st.Mutation.Audit, e)
}

// ListAudit returns a page of the audit, newest first, and whether more follow.
func (s *Service) ListAudit(ctx context.Context, q AuditQuery) ([]*AuditEntry, bool, error) {
	var f fieldErrors
	validatePageSize(&f, q.Limit)
	if q.Jobs != "" && !ValidJobPattern(q.Jobs) {
		f.add("job", "%q is not a job pattern: a job's name, a prefix of one ending in *, or *", q.Jobs)
	}
	if err := f.err(); err != nil {
		return nil, false, err
	}
	limit := q.Limit
	q.Limit++
	entries, err := s.store.ListAudit(ctx, q)
	if err != nil {
		return nil, false, fmt.Errorf("list the audit: %w", err)
	}
	more := len(entries) > limit
	if more {
		entries = entries[:limit]
	}
	return entries, more, nil
}

// AbortAsParticipant is Abort on the request of participant, whose token allows it to
// veto only the checkpoints it is expected in: any other gets forbidden, and changes
// nothing.
func (s *Service) AbortAsParticipant(ctx context.Context, job string, id int64, participant, reason string) (*Checkpoint, error) {
	if err := ValidateAbort(job, id, reason); err != nil {
		return nil, err
	}
	return s.onCheckpoint(ctx, job, id, func(st *JobState, cp *Checkpoint) error {
		if cp.Participant(participant) == nil {
			return &Error{Code: CodeForbidden, Message: fmt.Sprintf(
				"this token acts as participant %s, which checkpoint %d does not expect: aborting it needs the operator scope", participant, id)}
		}
		return st.abortRequested(ctx, cp, reason)
	})
}

// Ack records that a participant applied a checkpoint's decision.
func (s *Service) Ack(ctx context.Context, job string, id int64, participant string, epoch int64) (*Checkpoint, error) {
	if err := ValidateAck(job, id, participant, epoch); err != nil {
		return nil, err
	}
	var recorded bool
	cp, err := s.onCheckpoint(ctx, job, id, func(st *JobState, cp *Checkpoint) error {
		n := len(st.Mutation.Acks)
		err := st.Ack(cp, participant, epoch)
		recorded = len(st.Mutation.Acks) > n
		return err
	})
	if r := ackResult(err, err == nil && recorded); r != "" {
		s.observer.Acked(job, r)
	}
	return cp, err
}

// onCheckpoint runs one rule on checkpoint id of job (see update). The checkpoint is
// returned as it stands after the rule.
func (s *Service) onCheckpoint(ctx context.Context, job string, id int64, rule func(*JobState, *Checkpoint) error) (*Checkpoint, error) {
	var out *Checkpoint
	err := s.update(ctx, job, id, func(st *JobState, tx JobTx) error {
		cp := st.Find(id)
		if cp == nil {
			var err error
			if cp, err = tx.Checkpoint(ctx, id); err != nil {
				if err == ErrNotFound && Gone(id, st.Job.Seq) {
					err = ErrGone // ids are never reused: it was issued, and removed since
				}
				return checkpointError(job, id, err)
			}
		}
		out = cp
		return rule(st, cp)
	})
	if err != nil {
		return nil, jobError(job, err)
	}
	return out, nil
}

// update runs decide on the job's state inside its lock and has the store write what the
// rules decided. The state is loaded and expired checkpoints aborted first, so that no rule
// ever decides on a checkpoint whose deadline passed (rule 6); what expired is written even
// if decide refuses the request. checkpoint, when not 0, is the one decide is about (a
// store may read it with the job).
func (s *Service) update(ctx context.Context, job string, checkpoint int64, decide func(*JobState, JobTx) error) error {
	// The store may run fn more than once; the last run is the one it committed.
	var last *JobState
	err := s.store.Update(ctx, job, checkpoint, func(tx JobTx) error {
		preparing, err := tx.Preparing(ctx)
		if err != nil {
			return err
		}
		st := &JobState{Now: tx.Now(), Job: tx.Job(), Preparing: preparing, By: actorOf(ctx), MaxCheckpointBytes: s.maxCheckpointBytes}
		last = st
		st.Expire()
		decideErr := decide(st, tx)
		if decideErr != nil && !IsRejection(decideErr) {
			return decideErr
		}
		if err := tx.Apply(ctx, &st.Mutation); err != nil {
			return err
		}
		return decideErr
	})
	// last is read only once the store answered that fn's last run committed: after a
	// failure (a timeout, say) the store may still be running fn on its own goroutine.
	if (err == nil || IsRejection(err)) && last != nil && !last.Mutation.Empty() {
		s.observer.Changed(job, last.Now, &last.Mutation)
	}
	return err
}

// SweepExpired aborts every checkpoint whose deadline passed, on every job, and returns
// how many jobs it swept. The jobs are swept at once, each bounded by sweepJobTimeout: a
// job that cannot be had now (its row locked elsewhere, say) delays no other job's
// aborts, and is swept again next time. The error, if any, is the first job's that failed.
func (s *Service) SweepExpired(ctx context.Context) (int, error) {
	jobs, err := s.store.ExpiredJobs(ctx)
	if err != nil {
		return 0, fmt.Errorf("find expired checkpoints: %w", err)
	}
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, job := range jobs {
		wg.Go(func() {
			jobCtx, cancel := context.WithTimeout(ctx, sweepJobTimeout)
			defer cancel()
			err := s.update(jobCtx, job, 0, func(st *JobState, _ JobTx) error {
				for _, cp := range st.Mutation.Statuses {
					s.logger.Info("checkpoint expired", "job", job, "checkpoint", cp.ID, "reason", cp.AbortReason)
				}
				return nil
			})
			if err != nil && !errors.Is(err, ErrNotFound) {
				errs[i] = fmt.Errorf("abort expired checkpoints of %s: %w", job, err)
			}
		})
	}
	wg.Wait()
	swept := 0
	var first error
	for _, err := range errs {
		if err == nil {
			swept++
		} else if first == nil {
			first = err
		}
	}
	return swept, first
}

// sweepJobTimeout bounds the sweep of one job, so that every expired checkpoint of the
// others is aborted within a second of its deadline (rule 6).
const sweepJobTimeout = 500 * time.Millisecond

// RunSweeper sweeps expired checkpoints every interval until ctx ends. While sweeps keep
// failing (the database is down, say), it warns of the first failure and then once every
// sweepWarnEvery, with the count, and says when sweeps work again.
func (s *Service) RunSweeper(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := failures{what: "sweep expired checkpoints"}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_, err := s.SweepExpired(ctx)
			if ctx.Err() != nil {
				return
			}
			failing.note(s.logger, time.Now(), err)
		}
	}
}

// sweepWarnEvery is how often a sweeper that keeps failing says so.
const sweepWarnEvery = 30 * time.Second

// failures counts a background task's failures in a row, to warn of them at a bounded rate.
type failures struct {
	what     string    // the task, as the warning names it
	count    int       // in a row
	warnedAt time.Time // last warning
}

func (f *failures) note(logger *slog.Logger, now time.Time, err error) {
	switch {
	case err == nil && f.count > 0:
		logger.Info(f.what+": works again", "failed_attempts", f.count)
		*f = failures{what: f.what}
	case err == nil:
	case f.count == 0 || now.Sub(f.warnedAt) >= sweepWarnEvery:
		f.count++
		f.warnedAt = now
		logger.Warn(f.what, "error", err, "failed_attempts", f.count)
	default:
		f.count++
	}
}

func jobError(job string, err error) error {
	if err == ErrNotFound {
		return reject(CodeNotFound, nil, "job %s does not exist", job)
	}
	return err
}

func checkpointError(job string, id int64, err error) error {
	switch err {
	case ErrNotFound:
		return reject(CodeNotFound, nil, "checkpoint %d of job %s does not exist", id, job)
	case ErrGone:
		return reject(CodeGone, nil, "checkpoint %d of job %s is no more: it was final and owed nothing, and was removed by the job's retention (or the job was deleted since); its id is never reused", id, job)
	}
	return err
}
