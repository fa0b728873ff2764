package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/groupcommit"
)

// The store's one writer group-commits: it takes every update queued, runs each in a
// savepoint of one IMMEDIATE transaction, commits once (one fsync) and only then answers
// them all. An update that fails is rolled back to its savepoint alone; rejections keep
// what the rules did before refusing (rule 6's aborts), as Update's contract says.

// maxBatch bounds how many updates one transaction takes.
const maxBatch = 64

// batchTimeout bounds one group commit.
const batchTimeout = 20 * time.Second

func (s *Store) update(ctx context.Context, job string, checkpoint int64, fn func(tx coordinator.JobTx) error) error {
	return s.queue.Submit(ctx, job, checkpoint, fn)
}

// write is the writer goroutine.
func (s *Store) write() {
	defer close(s.written)
	for {
		live, ok := s.queue.Next(maxBatch)
		if !ok {
			return
		}
		var err error
		for attempt := 1; attempt <= maxAttempts; attempt++ {
			if err = s.commit(live); !retryable(err) {
				break
			}
			// Nothing of the transaction was applied: its updates may be given up on again
			// before they run once more.
			for _, o := range live {
				o.Unstart()
			}
		}
		if err != nil {
			for _, o := range live {
				o.Finish(translate(err))
			}
		}
	}
}

// commit runs the updates in one transaction and, once it committed, answers them.
func (s *Store) commit(ops []*groupcommit.Op) (err error) {
	if len(ops) == 0 {
		return nil
	}
	if observe := s.observe; observe != nil {
		began := time.Now()
		defer func() {
			if err == nil {
				observe(time.Since(began))
			}
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	results := make([]error, len(ops))
	decided := make([][]*coordinator.Checkpoint, len(ops))
	var announced []string
	for i, o := range ops {
		if !o.Start() {
			continue // its caller gave up on it: it must not run, and is answered
		}
		if _, err := tx.ExecContext(ctx, savepointSQL); err != nil {
			return err
		}
		t := &jobTx{tx: tx, write: true}
		err := t.load(ctx, o.Job)
		if err == nil {
			err = o.Fn(t)
		}
		if err != nil && !coordinator.IsRejection(err) {
			if _, rbErr := tx.ExecContext(ctx, rollbackToSavepointSQL); rbErr != nil {
				// After some errors (a full disk, an I/O error) SQLite has rolled the whole
				// transaction back itself, savepoint and all: nothing of the batch is
				// applied, and the update's own error says why.
				return fmt.Errorf("%w (then rolling back to its savepoint: %w)", err, rbErr)
			}
			t.decided, t.announced = nil, false
		}
		if _, err := tx.ExecContext(ctx, releaseSavepointSQL); err != nil {
			return err
		}
		results[i], decided[i] = err, t.decided
		if t.announced {
			announced = append(announced, o.Job)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	for _, job := range announced {
		s.broker.NotifyJob(job)
	}
	for i, o := range ops {
		for _, cp := range decided[i] {
			s.broker.Publish(cp)
		}
		if results[i] != nil && !coordinator.IsRejection(results[i]) && results[i] != coordinator.ErrNotFound {
			results[i] = translate(results[i])
		}
		o.Finish(results[i])
	}
	return nil
}
