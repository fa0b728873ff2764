package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/groupcommit"
)

// committer group-commits updates: a dispatcher (dispatcher.go) takes every update queued,
// and whenever one of a few writers is free, hands it a batch of them; the writer runs them
// one after the other in one database transaction, each under its job's lock, and answers
// them all once that transaction has committed (batch.go). One fsync then serves many
// requests, and no request is answered before the transaction holding its write is durable
// (rule 3). DESIGN.md, invariants 8-11, says why that is safe.
type committer struct {
	store    *Store
	queue    *groupcommit.Queue
	workers  int
	maxBatch int
	stop     chan struct{}
	done     chan struct{}
	join     chan joinRequest
	cache    *stateCache
}

// defaultWriters is how many batches may commit at once unless Options.Writers says: one
// would stall everything behind a batch waiting for a lock another process holds, or for
// a slow commit. The second starts only beside a batch that has run overlapAfter, so that
// quick commits go one at a time, in larger transactions (cmd/coordinator/BENCH.md).
const defaultWriters = 2

// batchTimeout bounds one group commit; requests give up earlier on their own deadline.
const batchTimeout = 20 * time.Second

// maxAttempts bounds the retries of an update that hit a serialisation failure or deadlock.
const maxAttempts = 5

func newCommitter(s *Store, workers, maxBatch int) *committer {
	if workers <= 0 {
		workers = defaultWriters
	}
	if maxBatch <= 0 {
		maxBatch = 64
	}
	stop := make(chan struct{})
	c := &committer{store: s, queue: groupcommit.NewQueue(stop), workers: workers, maxBatch: maxBatch,
		stop: stop, done: make(chan struct{}), join: make(chan joinRequest), cache: newStateCache()}
	go c.dispatch()
	return c
}

func (c *committer) close() {
	close(c.stop)
	<-c.done
}

func (c *committer) update(ctx context.Context, job string, checkpoint int64, fn func(coordinator.JobTx) error) error {
	return c.queue.Submit(ctx, job, checkpoint, fn)
}

// run commits a batch, or its updates one by one if the batch fails, and returns its
// updates, with those that joined it, and among them those set aside because their job's
// row is locked elsewhere (DESIGN.md, invariant 12): the dispatcher runs them again later.
// A batch whose COMMIT's outcome is unknown is never run again (invariant 13).
func (c *committer) run(batch []*groupcommit.Op) (ops, deferred []*groupcommit.Op) {
	ops, deferred, err := c.commit(batch, true, true)
	if err == nil || errors.Is(err, errOutcomeUnknown) {
		return ops, deferred
	}
	// Nothing of the batch was applied: its updates may be given up on again before they
	// run once more (groupcommit.Op.Unstart). The jobs' cached states were taken by the
	// batch, and are not put back: what follows reads every job under its lock.
	unstart(ops)
	if errors.Is(err, errStale) || lockTimedOut(err) {
		// Another process changed a cached job, or holds one's row locked (checking a cached
		// state waits for the lock, up to lock_timeout): nothing was committed; run the batch
		// again, reading every job under its lock, which skips a job locked elsewhere. Its
		// jobs are not cached for a while: another process is changing them too.
		for _, o := range ops {
			c.cache.contended(o.Job)
		}
		if _, deferred, err = c.commit(ops, false, false); err == nil || errors.Is(err, errOutcomeUnknown) {
			return ops, deferred
		}
		unstart(ops)
	}
	deferred = nil
	for _, o := range ops {
		var d []*groupcommit.Op
		if len(ops) > 1 {
			_, d, err = c.commit([]*groupcommit.Op{o}, false, false)
		}
		for attempt := 1; retryable(err) && attempt < maxAttempts; attempt++ {
			o.Unstart()
			_, d, err = c.commit([]*groupcommit.Op{o}, false, false)
		}
		deferred = append(deferred, d...)
		if err != nil && !errors.Is(err, errOutcomeUnknown) {
			o.Finish(translate(err))
		}
	}
	return ops, deferred
}

func unstart(ops []*groupcommit.Op) {
	for _, o := range ops {
		o.Unstart()
	}
}
