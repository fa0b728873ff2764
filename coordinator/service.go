package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// Service carries out the protocol: it validates requests, runs the rules on a job's state
// inside one store transaction, and answers only after the store committed.
type Service struct {
	store  Store
	logger *slog.Logger
}

// NewService returns a Service on store. A nil logger discards.
func NewService(store Store, logger *slog.Logger) *Service {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Service{store: store, logger: logger}
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
	job, created, err := s.store.PutJob(ctx, name, cfg)
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
func (s *Service) ListJobs(ctx context.Context, after string, limit int) ([]*Job, bool, error) {
	limit, err := pageSize(limit)
	if err != nil {
		return nil, false, err
	}
	jobs, err := s.store.ListJobs(ctx, after, limit+1)
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

func pageSize(limit int) (int, error) {
	if limit == 0 {
		return DefaultPageSize, nil
	}
	if limit < 1 || limit > MaxPageSize {
		var f fieldErrors
		f.add("limit", "must be from 1 to %d", MaxPageSize)
		return 0, f.err()
	}
	return limit, nil
}

// ListCheckpoints returns a page of checkpoints and whether more follow.
func (s *Service) ListCheckpoints(ctx context.Context, q CheckpointQuery) ([]*Checkpoint, bool, error) {
	limit, err := pageSize(q.Limit)
	if err != nil {
		return nil, false, err
	}
	var f fieldErrors
	if q.Job != "" {
		f.name("job", q.Job)
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
	err := s.store.Update(ctx, name, 0, func(tx JobTx) error {
		round, err := s.begin(ctx, tx)
		if err != nil {
			return err
		}
		if err := s.save(ctx, tx, &round.Changes); err != nil {
			return err
		}
		owing, err := tx.Owing(ctx, "")
		if err != nil {
			return err
		}
		for _, cp := range owing {
			if OwesAnything(cp) {
				return reject(CodeJobBusy, nil, "job %s still has checkpoint %d %s with work owed; delete it once every participant acked", name, cp.ID, cp.Status)
			}
		}
		return tx.DeleteJob(ctx)
	})
	return jobError(name, err)
}

// Register gives participant a new epoch and aborts what it had not voted on; it returns
// the new epoch and what the participant owes.
func (s *Service) Register(ctx context.Context, job, participant string) (*Pending, error) {
	if err := validateNames(job, participant); err != nil {
		return nil, err
	}
	var out *Pending
	err := s.store.Update(ctx, job, 0, func(tx JobTx) error {
		round, err := s.begin(ctx, tx)
		if err != nil {
			return err
		}
		// What expired stands even if the registration is refused.
		if err := s.save(ctx, tx, &round.Changes); err != nil {
			return err
		}
		owing, err := s.checkParticipant(ctx, tx, participant)
		if err != nil {
			return err
		}
		epoch := tx.Job().Epoch(participant) + 1
		if err := tx.SetEpoch(ctx, participant, epoch); err != nil {
			return err
		}
		round.Register(participant, epoch)
		aborted := round.Statuses
		if err := s.save(ctx, tx, &round.Changes); err != nil {
			return err
		}
		out = &Pending{Job: job, Participant: participant, Epoch: epoch, Items: PendingItems(merge(owing, aborted), participant)}
		return nil
	})
	if err != nil {
		return nil, jobError(job, err)
	}
	return out, nil
}

// merge returns cps with the changed checkpoints replacing their stale copies.
func merge(cps []*Checkpoint, changed []*Checkpoint) []*Checkpoint {
	byID := make(map[int64]*Checkpoint, len(cps))
	for _, cp := range cps {
		byID[cp.ID] = cp
	}
	for _, cp := range changed {
		byID[cp.ID] = cp
	}
	out := make([]*Checkpoint, 0, len(byID))
	for _, cp := range byID {
		out = append(out, cp)
	}
	return out
}

// checkParticipant returns ErrNotFound unless participant is configured for the job or
// still has work owed on one of its checkpoints; it returns what it owes.
func (s *Service) checkParticipant(ctx context.Context, tx JobTx, participant string) ([]*Checkpoint, error) {
	owing, err := tx.Owing(ctx, participant)
	if err != nil {
		return nil, err
	}
	if slices.Contains(tx.Job().Config.Participants, participant) || len(owing) > 0 {
		return owing, nil
	}
	return nil, reject(CodeNotFound, nil, "%q is not a participant of job %s", participant, tx.Job().Name)
}

// Pending lists what participant owes, oldest first, with its current epoch.
func (s *Service) Pending(ctx context.Context, job, participant string) (*Pending, error) {
	if err := validateNames(job, participant); err != nil {
		return nil, err
	}
	var out *Pending
	err := s.store.View(ctx, job, func(tx JobTx) error {
		owing, err := s.checkParticipant(ctx, tx, participant)
		if err != nil {
			return err
		}
		now := tx.Now()
		// An expired checkpoint is no longer votable, even before the sweeper aborted it.
		owing = slices.DeleteFunc(owing, func(cp *Checkpoint) bool {
			return cp.Status == StatusPreparing && !now.Before(cp.Deadline)
		})
		out = &Pending{Job: job, Participant: participant, Epoch: tx.Job().Epoch(participant), Items: PendingItems(owing, participant)}
		return nil
	})
	if err != nil {
		return nil, jobError(job, err)
	}
	return out, nil
}

// Prepare opens the job's next checkpoint. replayed is true when an Idempotency-Key
// matched an earlier request, whose checkpoint is returned as it stands.
func (s *Service) Prepare(ctx context.Context, job string, req PrepareRequest) (cp *Checkpoint, replayed bool, err error) {
	var f fieldErrors
	f.name("job", job)
	validateTimeout(&f, req.Timeout)
	if req.IdempotencyKey != "" && !validIdempotencyKey(req.IdempotencyKey) {
		f.add("Idempotency-Key", "must be 1 to %d printable ASCII characters", MaxIdempotencyKeyLength)
	}
	if err := f.err(); err != nil {
		return nil, false, err
	}
	err = s.store.Update(ctx, job, 0, func(tx JobTx) error {
		round, err := s.begin(ctx, tx)
		if err != nil {
			return err
		}
		if err := s.save(ctx, tx, &round.Changes); err != nil {
			return err
		}
		if req.IdempotencyKey != "" {
			rec, ok, err := tx.Idempotency(ctx, req.IdempotencyKey)
			if err != nil {
				return err
			}
			if ok {
				if rec.Fingerprint != req.Fingerprint {
					return reject(CodeIdempotencyConflict, nil, "Idempotency-Key %q was used with another request", req.IdempotencyKey)
				}
				cp, err = tx.Checkpoint(ctx, rec.Checkpoint)
				replayed = true
				return err
			}
		}
		j := tx.Job()
		if n := len(round.Preparing); n >= j.Config.MaxConcurrentCheckpoints {
			return reject(CodeTooManyCheckpoints, round.Preparing[n-1], "job %s has %d checkpoint(s) preparing, its max_concurrent_checkpoints", job, n)
		}
		timeout := j.Config.CheckpointTimeout
		if req.Timeout != 0 {
			timeout = req.Timeout
		}
		now := tx.Now()
		cp = &Checkpoint{
			Job:        job,
			ID:         j.Seq + 1,
			Status:     StatusPreparing,
			CreatedAt:  now,
			Deadline:   now.Add(timeout),
			AutoCommit: j.Config.AutoCommit,
		}
		for _, p := range j.Config.Participants {
			cp.Participants = append(cp.Participants, ParticipantState{Name: p})
		}
		var rec *IdempotencyRecord
		if req.IdempotencyKey != "" {
			rec = &IdempotencyRecord{Key: req.IdempotencyKey, Fingerprint: req.Fingerprint, Checkpoint: cp.ID}
		}
		return tx.InsertCheckpoint(ctx, cp, rec)
	})
	if err != nil {
		return nil, false, jobError(job, err)
	}
	return cp, replayed, nil
}

// GetCheckpoint returns a checkpoint. With wait > 0 and the checkpoint preparing, it first
// waits up to wait for its decision.
func (s *Service) GetCheckpoint(ctx context.Context, job string, id int64, wait time.Duration) (*Checkpoint, error) {
	if err := validateCheckpoint(job, id); err != nil {
		return nil, err
	}
	if wait < 0 || wait > MaxLongPoll {
		var f fieldErrors
		f.add("wait_ms", "must be from 0 to %d", MaxLongPoll.Milliseconds())
		return nil, f.err()
	}
	if wait == 0 {
		return s.readCheckpoint(ctx, job, id)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	knower, _ := s.store.(PreparingKnower)
	for first := true; ; first = false {
		// Subscribe before reading, so that a decision after the read wakes us. A wake-up
		// may be spurious (a store that lost its notifications wakes every waiter), so the
		// wait goes on until the checkpoint is decided or the time is up. The first time,
		// a store that knows the checkpoint is preparing spares the read.
		sub := s.store.Subscribe(job, id)
		if !first || knower == nil || !knower.KnownPreparing(job, id) {
			cp, err := s.readCheckpoint(ctx, job, id)
			if err != nil || cp.Status != StatusPreparing {
				sub.Cancel()
				return cp, err
			}
		}
		select {
		case <-sub.Done():
			sub.Cancel()
			// Decided in this process: the checkpoint as it committed, without a read.
			if cp := sub.Decided(); cp != nil && cp.Status != StatusPreparing {
				return cp, nil
			}
		case <-timer.C:
			sub.Cancel()
			return s.readCheckpoint(ctx, job, id)
		case <-ctx.Done():
			sub.Cancel()
			return nil, ctx.Err()
		}
	}
}

func (s *Service) readCheckpoint(ctx context.Context, job string, id int64) (*Checkpoint, error) {
	cp, err := s.store.GetCheckpoint(ctx, job, id)
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
	if err := validateCheckpoint(job, id); err != nil {
		return nil, err
	}
	if err := ValidateName("participant", participant); err != nil {
		return nil, err
	}
	if err := ValidateVote(v); err != nil {
		return nil, err
	}
	if len(v.Committables) > 0 {
		compact, err := CompactJSON(v.Committables)
		if err != nil {
			return nil, &Error{Code: CodeInvalidRequest, Message: "committables are not valid JSON"}
		}
		v.Committables = compact
	}
	return s.onCheckpoint(ctx, job, id, func(r *Round, tx JobTx, cp *Checkpoint) error {
		return r.Vote(cp, participant, tx.Job().Epoch(participant), v)
	})
}

// Commit decides commit for a checkpoint whose votes are all prepared.
func (s *Service) Commit(ctx context.Context, job string, id int64) (*Checkpoint, error) {
	if err := validateCheckpoint(job, id); err != nil {
		return nil, err
	}
	return s.onCheckpoint(ctx, job, id, func(r *Round, _ JobTx, cp *Checkpoint) error { return r.Commit(cp) })
}

// Abort decides abort for a checkpoint (and every higher preparing one).
func (s *Service) Abort(ctx context.Context, job string, id int64, reason string) (*Checkpoint, error) {
	if err := validateCheckpoint(job, id); err != nil {
		return nil, err
	}
	var f fieldErrors
	validateReason(&f, reason)
	if err := f.err(); err != nil {
		return nil, err
	}
	return s.onCheckpoint(ctx, job, id, func(r *Round, _ JobTx, cp *Checkpoint) error { return r.Abort(cp, reason) })
}

// Ack records that a participant applied a checkpoint's decision.
func (s *Service) Ack(ctx context.Context, job string, id int64, participant string, epoch int64) (*Checkpoint, error) {
	if err := validateCheckpoint(job, id); err != nil {
		return nil, err
	}
	var f fieldErrors
	f.name("participant", participant)
	if epoch < 1 {
		f.add("epoch", "must be 1 or more (the epoch that register returned)")
	}
	if err := f.err(); err != nil {
		return nil, err
	}
	return s.onCheckpoint(ctx, job, id, func(r *Round, tx JobTx, cp *Checkpoint) error {
		return r.Ack(cp, participant, tx.Job().Epoch(participant), epoch)
	})
}

// onCheckpoint runs one rule on checkpoint id of job, inside the job's lock, and saves what
// it changed. The checkpoint is returned as it stands after the rule.
func (s *Service) onCheckpoint(ctx context.Context, job string, id int64, rule func(*Round, JobTx, *Checkpoint) error) (*Checkpoint, error) {
	var out *Checkpoint
	err := s.store.Update(ctx, job, id, func(tx JobTx) error {
		round, err := s.begin(ctx, tx)
		if err != nil {
			return err
		}
		cp := findCheckpoint(id, round.Preparing, round.Statuses)
		// What expired stands even if the request is refused.
		if err := s.save(ctx, tx, &round.Changes); err != nil {
			return err
		}
		if cp == nil {
			if cp, err = tx.Checkpoint(ctx, id); err != nil {
				return checkpointError(job, id, err)
			}
		}
		ruleErr := rule(round, tx, cp)
		if err := s.save(ctx, tx, &round.Changes); err != nil {
			return err
		}
		out = cp
		return ruleErr
	})
	if err != nil {
		return nil, jobError(job, err)
	}
	return out, nil
}

// findCheckpoint returns checkpoint id from the round's lists, nil if it is in neither.
func findCheckpoint(id int64, lists ...[]*Checkpoint) *Checkpoint {
	for _, list := range lists {
		for _, cp := range list {
			if cp.ID == id {
				return cp
			}
		}
	}
	return nil
}

// begin loads the job's preparing checkpoints and aborts the expired ones, so that no rule
// ever decides on a checkpoint whose deadline passed (rule 6).
func (s *Service) begin(ctx context.Context, tx JobTx) (*Round, error) {
	preparing, err := tx.Preparing(ctx)
	if err != nil {
		return nil, err
	}
	round := &Round{Now: tx.Now(), Preparing: preparing}
	round.Expire()
	return round, nil
}

// save writes what a round changed, and resets it so it can be saved again.
func (s *Service) save(ctx context.Context, tx JobTx, c *Changes) error {
	for _, v := range c.Votes {
		if err := tx.SaveVote(ctx, v.Checkpoint, v.Participant); err != nil {
			return err
		}
	}
	for _, a := range c.Acks {
		if err := tx.SaveAck(ctx, a.Checkpoint, a.Participant); err != nil {
			return err
		}
	}
	for _, cp := range c.Statuses {
		if err := tx.SaveStatus(ctx, cp); err != nil {
			return err
		}
	}
	*c = Changes{Statuses: c.Statuses[:0:0]}
	return nil
}

// SweepExpired aborts every checkpoint whose deadline passed, on every job, and returns
// how many jobs it swept.
func (s *Service) SweepExpired(ctx context.Context) (int, error) {
	jobs, err := s.store.ExpiredJobs(ctx)
	if err != nil {
		return 0, fmt.Errorf("find expired checkpoints: %w", err)
	}
	for _, job := range jobs {
		err := s.store.Update(ctx, job, 0, func(tx JobTx) error {
			round, err := s.begin(ctx, tx)
			if err != nil {
				return err
			}
			for _, cp := range round.Statuses {
				s.logger.Info("checkpoint expired", "job", job, "checkpoint", cp.ID, "reason", cp.AbortReason)
			}
			return s.save(ctx, tx, &round.Changes)
		})
		if err != nil && !errors.Is(err, ErrNotFound) {
			return 0, fmt.Errorf("abort expired checkpoints of %s: %w", job, err)
		}
	}
	return len(jobs), nil
}

// RunSweeper sweeps expired checkpoints every interval until ctx ends.
func (s *Service) RunSweeper(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := s.SweepExpired(ctx); err != nil && ctx.Err() == nil {
				s.logger.Warn("sweep expired checkpoints", "error", err)
			}
		}
	}
}

func validateNames(job, participant string) error {
	var f fieldErrors
	f.name("job", job)
	f.name("participant", participant)
	return f.err()
}

func validateCheckpoint(job string, id int64) error {
	var f fieldErrors
	f.name("job", job)
	if id < 1 {
		f.add("id", "checkpoint ids start at 1")
	}
	return f.err()
}

func jobError(job string, err error) error {
	if err == ErrNotFound {
		return reject(CodeNotFound, nil, "job %s does not exist", job)
	}
	return err
}

func checkpointError(job string, id int64, err error) error {
	if err == ErrNotFound {
		return reject(CodeNotFound, nil, "checkpoint %d of job %s does not exist", id, job)
	}
	return err
}
