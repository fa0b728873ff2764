package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/twophase/coordinator/coordinator"
)

// The store's one writer group-commits: it takes every update queued, runs each in a
// savepoint of one IMMEDIATE transaction, commits once (one fsync) and only then answers
// them all. An update that fails is rolled back to its savepoint alone; rejections keep
// what the rules did before refusing (rule 6's aborts), as Update's contract says.

// maxBatch bounds how many updates one transaction takes.
const maxBatch = 64

// batchTimeout bounds one group commit.
const batchTimeout = 20 * time.Second

type op struct {
	ctx  context.Context
	job  string
	fn   func(coordinator.JobTx) error
	err  error
	done chan struct{}
}

func (o *op) finish(err error) {
	o.err = err
	close(o.done)
}

func (s *Store) update(ctx context.Context, job string, fn func(tx coordinator.JobTx) error) error {
	o := &op{ctx: ctx, job: job, fn: fn, done: make(chan struct{})}
	select {
	case s.ops <- o:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stop:
		return coordinator.Unavailable(errClosed)
	}
	select {
	case <-o.done:
		return o.err
	case <-ctx.Done():
		// The update may still be applied, as when a client hangs up after sending.
		return ctx.Err()
	}
}

// write is the writer goroutine.
func (s *Store) write() {
	defer close(s.written)
	for {
		var first *op
		select {
		case first = <-s.ops:
		case <-s.stop:
			for {
				select {
				case o := <-s.ops:
					o.finish(coordinator.Unavailable(errClosed))
				default:
					return
				}
			}
		}
		batch := []*op{first}
	fill:
		for len(batch) < maxBatch {
			select {
			case o := <-s.ops:
				batch = append(batch, o)
			default:
				break fill
			}
		}
		live := batch[:0]
		for _, o := range batch {
			if err := o.ctx.Err(); err != nil {
				o.finish(err)
				continue
			}
			live = append(live, o)
		}
		var err error
		for attempt := 1; attempt <= maxAttempts; attempt++ {
			if err = s.commit(live); !retryable(err) {
				break
			}
		}
		if err != nil {
			for _, o := range live {
				o.finish(translate(err))
			}
		}
	}
}

// commit runs the updates in one transaction and, once it committed, answers them.
func (s *Store) commit(ops []*op) error {
	if len(ops) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	results := make([]error, len(ops))
	decided := make([][]string, len(ops))
	for i, o := range ops {
		if _, err := tx.ExecContext(ctx, "SAVEPOINT update_op"); err != nil {
			return err
		}
		t := &jobTx{tx: tx, write: true}
		err := t.load(ctx, o.job)
		if err == nil {
			err = o.fn(t)
		}
		if err != nil && !coordinator.IsRejection(err) {
			if _, rbErr := tx.ExecContext(ctx, "ROLLBACK TO update_op"); rbErr != nil {
				return rbErr
			}
			t.decided = nil
		}
		if _, err := tx.ExecContext(ctx, "RELEASE update_op"); err != nil {
			return err
		}
		results[i], decided[i] = err, t.decided
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	for i, o := range ops {
		for _, key := range decided[i] {
			s.broker.NotifyKey(key)
		}
		if results[i] != nil && !coordinator.IsRejection(results[i]) && results[i] != coordinator.ErrNotFound {
			results[i] = translate(results[i])
		}
		o.finish(results[i])
	}
	return nil
}
