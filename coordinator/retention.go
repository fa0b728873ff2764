package coordinator

import (
	"context"
	"slices"
	"time"
)

// RetentionOptions configures RunRetention. The zero value is usable.
type RetentionOptions struct {
	// Interval is how often every job is looked at; 0 means 10s, so that a checkpoint is
	// deleted within a minute of its expiry however busy the sweep.
	Interval time.Duration
	// Batch is how many checkpoints one transaction deletes at most; 0 means 500 (a few
	// milliseconds of work).
	Batch int
	// Pause is the least wait between two batches; 0 means 5ms. The wait is
	// also at least four times as long as the batch took (retentionPause), so that deletion
	// holds the database a fifth of the time at most and rounds get it in between, however
	// slow the batches.
	Pause time.Duration
	// Deleted, if set, is told how many checkpoints each batch deleted.
	Deleted func(n int)
	// Events is how long the status changes the event streams resume from are kept; 0
	// means 24 hours.
	Events time.Duration
}

// RunRetention deletes, in the background until ctx ends, what retention removes (rule 12):
// checkpoints that are final, owe nothing and completed more than their job's Retention ago,
// never a job's last committed one. Each batch is one short transaction that takes neither
// a job's lock nor the right to delete if another holds it (Store.DeleteExpired): several
// coordinators on one database take turns. Failures are logged at most every 30 seconds.
func (s *Service) RunRetention(ctx context.Context, opts RetentionOptions) {
	if opts.Interval <= 0 {
		opts.Interval = 10 * time.Second
	}
	if opts.Batch <= 0 {
		opts.Batch = 500
	}
	if opts.Pause <= 0 {
		opts.Pause = 5 * time.Millisecond
	}
	if opts.Events <= 0 {
		opts.Events = 24 * time.Hour
	}
	f := failures{what: "delete expired checkpoints (retention)"}
	t := time.NewTicker(opts.Interval)
	defer t.Stop()
	for {
		err := s.retentionPass(ctx, opts)
		if err == nil {
			err = s.pruneEvents(ctx, opts)
		}
		if ctx.Err() != nil {
			return
		}
		f.note(s.logger, time.Now(), err)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pruneEvents deletes the status changes recorded more than opts.Events ago, in batches.
func (s *Service) pruneEvents(ctx context.Context, opts RetentionOptions) error {
	es, ok := s.store.(EventStore)
	if !ok {
		return nil
	}
	cutoff := time.Now().Add(-opts.Events)
	for ctx.Err() == nil {
		began := time.Now()
		n, err := es.PruneEvents(ctx, cutoff, opts.Batch)
		if err != nil || n < opts.Batch {
			return err
		}
		sleep(ctx, retentionPause(time.Since(began), opts.Pause))
	}
	return nil
}

// retentionPass deletes what has expired: only in the jobs that the store says have
// something to delete, so that a fleet of jobs with nothing expired costs one read, and in
// batches that span jobs, so that a fleet whose jobs each have a few expired checkpoints
// costs a statement per batch, not one per job.
func (s *Service) retentionPass(ctx context.Context, opts RetentionOptions) error {
	after := ""
	for {
		jobs, err := s.store.JobsToPrune(ctx, after, pruneListPage)
		if err != nil {
			return err
		}
		if err := s.deleteExpired(ctx, jobs, opts); err != nil {
			return err
		}
		if len(jobs) < pruneListPage {
			return nil
		}
		after = jobs[len(jobs)-1]
	}
}

// pruneListPage is how many job names one JobsToPrune read returns at most.
const pruneListPage = 1000

// deleteExpired deletes the expired checkpoints of jobs (in JobsToPrune's order), batch
// after batch, each batch going on from the job where the one before stopped.
func (s *Service) deleteExpired(ctx context.Context, jobs []string, opts RetentionOptions) error {
	for len(jobs) > 0 {
		start := time.Now()
		n, last, skipped, err := s.store.DeleteExpired(ctx, jobs, opts.Batch)
		if err != nil {
			return err
		}
		if n > 0 && opts.Deleted != nil {
			opts.Deleted(n)
		}
		i := slices.Index(jobs, last)
		if skipped || n == 0 || i < 0 {
			return nil // the next pass takes what is left
		}
		jobs = jobs[i:]
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retentionPause(time.Since(start), opts.Pause)):
		}
	}
	return nil
}

// retentionPause is the wait after a batch that took took: four times that, and at least
// least. A batch of 500 deletions takes about 6 ms on a busy two-core machine: deletion then
// goes at some 15,000 checkpoints a second, while the rounds keep four fifths of the time.
func retentionPause(took, least time.Duration) time.Duration {
	return max(4*took, least)
}

// Deletable reports whether retention may delete cp (rule 12): it is final (committed or
// aborted), it owes nothing to anyone (OwesAnything: no prepared vote of an aborted one
// left unacked), it completed more than retention before now, and it is not the job's last
// committed checkpoint (lastCommitted: the id of the job's highest checkpoint whose
// decision is commit, 0 if none), which a pipeline restores from. A retention of 0 keeps
// everything. The stores' deletions select exactly these (their conformance suite checks
// them against it).
func Deletable(cp *Checkpoint, now time.Time, retention time.Duration, lastCommitted int64) bool {
	if retention <= 0 || cp.CompletedAt == nil || cp.ID == lastCommitted {
		return false
	}
	if cp.Status != StatusCommitted && cp.Status != StatusAborted {
		return false
	}
	return cp.CompletedAt.Before(now.Add(-retention)) && !OwesAnything(cp)
}

// Gone reports whether checkpoint id of a job whose Seq is seq, which the store does not
// hold, was issued and removed since (by retention, or with the job when it was deleted and
// created again): ids up to Seq were issued and are never reused, so such an id answers
// 410 gone rather than 404 not found.
func Gone(id, seq int64) bool { return id >= 1 && id <= seq }
