package postgres

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/groupcommit"
)

// committer group-commits updates: each writer takes every update queued for it, runs them
// one after the other in one database transaction, each under its job's lock, and answers
// them all once that transaction has committed. One fsync then serves many requests, and no
// request is answered before the transaction holding its write is durable (rule 3).
//
// A job always goes to the same writer, so writers never wait for each other's job locks;
// within a batch the jobs are locked in name order. If a batch fails, its updates are run
// again one by one, so that one failing update does not fail the others.
type committer struct {
	store    *Store
	queues   []*groupcommit.Queue
	maxBatch int
	seed     maphash.Seed
	stop     chan struct{}
	wg       sync.WaitGroup
}

// batchTimeout bounds one group commit; requests give up earlier on their own deadline.
const batchTimeout = 20 * time.Second

// maxAttempts bounds the retries of an update that hit a serialisation failure or deadlock.
const maxAttempts = 5

func newCommitter(s *Store, writers, maxBatch int) *committer {
	if writers <= 0 {
		writers = 4
	}
	if maxBatch <= 0 {
		maxBatch = 64
	}
	c := &committer{store: s, maxBatch: maxBatch, seed: maphash.MakeSeed(), stop: make(chan struct{})}
	for range writers {
		q := groupcommit.NewQueue(c.stop)
		c.queues = append(c.queues, q)
		c.wg.Go(func() {
			for {
				batch, ok := q.Next(c.maxBatch)
				if !ok {
					return
				}
				c.run(batch)
			}
		})
	}
	return c
}

func (c *committer) close() {
	close(c.stop)
	c.wg.Wait()
}

func (c *committer) update(ctx context.Context, job string, fn func(coordinator.JobTx) error) error {
	return c.queues[maphash.String(c.seed, job)%uint64(len(c.queues))].Submit(ctx, job, fn)
}

// run commits a batch, or its updates one by one if the batch fails.
func (c *committer) run(live []*groupcommit.Op) {
	slices.SortStableFunc(live, func(a, b *groupcommit.Op) int { return strings.Compare(a.Job, b.Job) })
	err := c.commit(live)
	if err == nil {
		return
	}
	for _, o := range live {
		if len(live) > 1 {
			err = c.commit([]*groupcommit.Op{o})
		}
		for attempt := 1; retryable(err) && attempt < maxAttempts; attempt++ {
			err = c.commit([]*groupcommit.Op{o})
		}
		if err != nil {
			o.Finish(translate(err))
		}
	}
}

// commit runs the updates in one transaction. On success it answers every update and
// returns nil; on failure it answers none and returns the error.
func (c *committer) commit(ops []*groupcommit.Op) error {
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	pooled, err := c.store.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire connection: %w", err)
	}
	// A connection left inside a transaction is closed by the pool on release.
	defer pooled.Release()
	conn := pooled.Conn()
	queue := &writeQueue{}
	queue.add("begin", "BEGIN")
	results := make([]error, len(ops))
	decided := make([][]string, len(ops))
	for i, o := range ops {
		t := &jobTx{ctx: ctx, conn: conn, write: true, queue: queue}
		if err := t.begin(o.Job); err != nil {
			if err == coordinator.ErrNotFound {
				results[i] = err
				continue
			}
			return err
		}
		fnErr := o.Fn(t)
		if fnErr != nil && !coordinator.IsRejection(fnErr) {
			return fnErr
		}
		results[i], decided[i] = fnErr, t.decided
	}
	queue.add("commit", "COMMIT")
	if err := queue.flush(ctx, conn); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	for i, o := range ops {
		for _, key := range decided[i] {
			c.store.broker.NotifyKey(key)
		}
		o.Finish(results[i])
	}
	return nil
}
