package postgres

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/groupcommit"
)

// committer group-commits updates: a dispatcher takes every update queued, and whenever
// one of a few workers is free, hands it a batch of them; the worker runs them one after
// the other in one database transaction, each under its job's lock, and answers them all
// once that transaction has committed. One fsync then serves many requests, and no request
// is answered before the transaction holding its write is durable (rule 3).
//
// A job is in at most one batch at a time: its later updates join that batch if they come
// before it commits (the job's lock is held already), else wait for it to end. So workers
// never wait for each other's job locks, and a job's updates run in the order they came.
// While every worker is busy, updates pile up, and the next batch takes them all: the
// busier the coordinator, the more each transaction carries. Within a batch the jobs are
// locked in name order. If a batch fails, its updates are run again one by one, so that
// one failing update does not fail the others.
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

// defaultWriters is how many batches commit at once unless Options.Writers says: on two
// cores with PostgreSQL on the same machine, 2 did 5-15 % more rounds at 16 jobs than 3,
// and 3 more than 5 or 8 (cmd/coordinator/BENCH.md); one would stall everything behind a
// batch waiting for a lock another process holds.
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
// updates, with those that joined it.
func (c *committer) run(batch []*groupcommit.Op) []*groupcommit.Op {
	slices.SortStableFunc(batch, func(a, b *groupcommit.Op) int { return strings.Compare(a.Job, b.Job) })
	ops, err := c.commit(batch, true, true)
	if err == nil {
		return ops
	}
	// The jobs' cached states were taken by the batch, and are not put back: what follows
	// reads every job under its lock.
	if errors.Is(err, errStale) {
		// Another process changed a cached job: nothing was committed; run the batch again.
		// Its jobs are not cached for a while: another process is changing them too.
		for _, o := range ops {
			c.cache.contended(o.Job)
		}
		if _, err = c.commit(ops, false, false); err == nil {
			return ops
		}
	}
	for _, o := range ops {
		if len(ops) > 1 {
			_, err = c.commit([]*groupcommit.Op{o}, false, false)
		}
		for attempt := 1; retryable(err) && attempt < maxAttempts; attempt++ {
			_, err = c.commit([]*groupcommit.Op{o}, false, false)
		}
		if err != nil {
			o.Finish(translate(err))
		}
	}
	return ops
}
