package postgres

import (
	"slices"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/groupcommit"
)

// The dispatcher is the committer's one goroutine that decides what runs: it takes the
// updates queued, hands a batch of them to a worker whenever one is free (dispatcher.next),
// and answers the join requests of batches about to commit (dispatcher.answer), holding one
// while the linger policy says its batch may wait for followers.

// joinRequest asks the dispatcher, for a batch about to commit, for the updates that came
// meanwhile for its jobs (whose locks it holds), up to max. If none came, but the batch
// awaits some (await: jobs whose checkpoint still misses votes or acks), the dispatcher
// may hold the answer until one comes, or until until (lingerPolicy).
type joinRequest struct {
	jobs  map[string]bool
	await map[string]bool
	until time.Time
	max   int
	reply chan []*groupcommit.Op
}

// dispatcher is the state of the dispatch loop; only that goroutine touches it.
type dispatcher struct {
	c        *committer
	waiting  []*groupcommit.Op // claimed, in arrival order, not yet in a batch
	busy     map[string]bool   // jobs in a running batch
	parked   []joinRequest     // join requests held for followers, oldest first
	linger   *lingerPolicy     // whether they may be held
	starts   []time.Time       // when each running batch started, oldest first: one per batch running
	finished chan batchDone
	// Jobs whose row was found locked by another transaction: their updates wait until
	// retry, then run again; the wait doubles while the job stays locked (DESIGN.md,
	// invariant 12).
	retry        map[string]time.Time
	retryBackoff map[string]time.Duration
}

// batchDone is a batch's end: its updates, and those set aside because their job's row
// is locked elsewhere.
type batchDone struct {
	ops, deferred []*groupcommit.Op
	started       time.Time
}

// The wait before an update of a job locked elsewhere runs again: first, and at most.
const (
	lockedRetryFirst = 2 * time.Millisecond
	lockedRetryMax   = 250 * time.Millisecond
)

// dispatch hands batches to workers until the committer stops, then waits for the batches
// running and answers what was left as unavailable.
func (c *committer) dispatch() {
	defer close(c.done)
	d := &dispatcher{c: c, busy: map[string]bool{}, linger: newLingerPolicy(time.Now),
		finished: make(chan batchDone, c.workers), retry: map[string]time.Time{}, retryBackoff: map[string]time.Duration{}}
	arrivals := c.queue.Arrivals()
	for {
		d.startBatches()
		select {
		case o := <-arrivals:
			d.claim(o)
			d.take(arrivals)
			d.reanswer()
		case req := <-c.join:
			d.take(arrivals)
			if !d.answer(req) {
				d.parked = append(d.parked, req)
			}
		case <-d.wake():
			d.reanswer()
		case done := <-d.finished:
			if i := slices.Index(d.starts, done.started); i >= 0 {
				d.starts = slices.Delete(d.starts, i, i+1)
			}
			d.batchDone(done)
		case <-c.stop:
			d.stop()
			return
		}
	}
}

// startBatches hands batches to free workers while there are updates they can take. With
// a batch running, another starts beside it only if it may overlap (mayOverlap).
func (d *dispatcher) startBatches() {
	for len(d.starts) < d.c.workers {
		now := time.Now()
		if len(d.starts) > 0 && !d.mayOverlap(now) {
			return
		}
		batch := d.next()
		if len(batch) == 0 {
			return
		}
		d.starts = append(d.starts, now)
		go func() {
			ops, deferred := d.c.run(batch)
			d.finished <- batchDone{ops, deferred, now}
		}()
	}
}

// overlapAfter is how long the latest batch runs before another may start beside it.
// Group commits that overlap are smaller: the updates that come while one commits make
// the next batch, and every batch costs PostgreSQL a commit and each job a lock check, so
// while commits are quick, one at a time does more with the same CPU. A batch that runs
// longer is waiting (for a lock another transaction holds, a slow disk, a far synchronous
// standby), and the updates that came meanwhile go on beside it instead of behind it.
const overlapAfter = 5 * time.Millisecond

// mayOverlap tells whether a batch may start beside those running: the latest of them has
// run overlapAfter, or a whole batch of updates waits, which would not grow by waiting.
func (d *dispatcher) mayOverlap(now time.Time) bool {
	return len(d.waiting) >= d.c.maxBatch || !now.Before(d.overlapAt())
}

// overlapAt is when the latest running batch will have run overlapAfter (one must run).
func (d *dispatcher) overlapAt() time.Time {
	return d.starts[len(d.starts)-1].Add(overlapAfter)
}

func (d *dispatcher) claim(o *groupcommit.Op) {
	if d.c.queue.Claim(o) {
		d.waiting = append(d.waiting, o)
	}
}

// take claims what else has arrived, without waiting, up to a bound.
func (d *dispatcher) take(arrivals <-chan *groupcommit.Op) {
	for len(d.waiting) < 4*d.c.maxBatch {
		select {
		case o := <-arrivals:
			d.claim(o)
		default:
			return
		}
	}
}

// batchDone frees a finished batch's jobs, and puts the updates it set aside back first in
// line, in their order, to run again once their job's wait is over.
func (d *dispatcher) batchDone(done batchDone) {
	for _, o := range done.ops {
		delete(d.busy, o.Job)
	}
	if len(done.deferred) == 0 {
		for _, o := range done.ops {
			delete(d.retryBackoff, o.Job)
		}
		return
	}
	now := time.Now()
	locked := map[string]bool{}
	var back []*groupcommit.Op
	for _, o := range done.deferred {
		if !locked[o.Job] {
			locked[o.Job] = true
			wait := min(max(2*d.retryBackoff[o.Job], lockedRetryFirst), lockedRetryMax)
			d.retryBackoff[o.Job], d.retry[o.Job] = wait, now.Add(wait)
		}
		if !o.Abandoned() {
			back = append(back, o)
		}
	}
	for _, o := range done.ops {
		if !locked[o.Job] {
			delete(d.retryBackoff, o.Job)
		}
	}
	d.waiting = append(back, d.waiting...)
}

// next takes from waiting, in order, up to maxBatch updates whose job is in no running
// batch and not waiting to be retried, marks their jobs busy and returns them. Updates
// it would take whose caller gave up, or whose context ended, are dropped (and
// answered); those it leaves are looked at when their turn comes. It is called on every
// arrival while a worker is free, so what it leaves costs it two map lookups each: under
// a backlog most of waiting is updates of jobs in a running batch.
func (d *dispatcher) next() []*groupcommit.Op {
	var batch []*groupcommit.Op
	var inBatch map[string]bool
	rest := d.waiting[:0]
	now := time.Now()
	for job, at := range d.retry {
		if !now.Before(at) {
			delete(d.retry, job)
		}
	}
	for i, o := range d.waiting {
		if len(batch) >= d.c.maxBatch {
			rest = append(rest, d.waiting[i:]...)
			break
		}
		_, retryLater := d.retry[o.Job]
		switch {
		case retryLater || d.busy[o.Job] && !inBatch[o.Job]:
			rest = append(rest, o)
		case o.Abandoned() || o.Ctx.Err() != nil:
			o.Drop()
		default:
			if inBatch == nil {
				inBatch = map[string]bool{}
			}
			batch = append(batch, o)
			inBatch[o.Job] = true
			d.busy[o.Job] = true
		}
	}
	clear(d.waiting[len(rest):])
	d.waiting = rest
	return batch
}

// answer answers a join request with the updates waiting for its jobs. If there are none
// and the linger policy lets the batch wait, it answers nothing and returns false: the
// caller parks the request. Like next, it looks at the context only of the updates it
// would take.
func (d *dispatcher) answer(req joinRequest) bool {
	var joined []*groupcommit.Op
	rest := d.waiting[:0]
	for _, o := range d.waiting {
		switch {
		case len(joined) >= req.max || !req.jobs[o.Job]:
			rest = append(rest, o)
		case o.Abandoned() || o.Ctx.Err() != nil:
			o.Drop()
		default:
			joined = append(joined, o)
		}
	}
	clear(d.waiting[len(rest):])
	d.waiting = rest
	if len(joined) > 0 {
		d.linger.joined(req.await)
	} else if d.linger.keepWaiting(req.await, req.until) {
		return false
	}
	req.reply <- joined
	return true
}

// reanswer answers the parked requests that can be answered now.
func (d *dispatcher) reanswer() {
	still := d.parked[:0]
	for _, req := range d.parked {
		if !d.answer(req) {
			still = append(still, req)
		}
	}
	clear(d.parked[len(still):])
	d.parked = still
}

// wake fires when the first parked request's time is up, or the first wait of a job locked
// elsewhere is over; nil (never) when there is neither.
func (d *dispatcher) wake() <-chan time.Time {
	var first time.Time
	for _, req := range d.parked {
		if first.IsZero() || req.until.Before(first) {
			first = req.until
		}
	}
	for _, at := range d.retry {
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	if len(d.starts) > 0 && len(d.starts) < d.c.workers && len(d.waiting) > 0 {
		// When a batch may start beside the running ones; if that time has passed and none
		// started, what waits cannot run yet, and an arrival or a batch's end wakes the loop.
		if at := d.overlapAt(); at.After(time.Now()) && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	if first.IsZero() {
		return nil
	}
	return time.After(time.Until(first))
}

// stop answers the parked requests empty, waits for the running batches, and answers what
// was still waiting, and what is still queued, as unavailable.
func (d *dispatcher) stop() {
	for _, req := range d.parked {
		req.reply <- nil
	}
	for range d.starts {
		done := <-d.finished
		for _, o := range done.deferred {
			o.Finish(coordinator.Unavailable(groupcommit.ErrClosed))
		}
	}
	for _, o := range d.waiting {
		o.Finish(coordinator.Unavailable(groupcommit.ErrClosed))
	}
	d.c.queue.Drain()
}

// more returns the updates that came, while a batch of n updates ran, for jobs (those
// whose locks the batch holds): they join the batch before it commits (no lock is taken out
// of order), instead of waiting for a transaction of their own.
func (c *committer) more(n int, jobs, await map[string]bool, until time.Time) []*groupcommit.Op {
	if n >= c.maxBatch {
		return nil
	}
	req := joinRequest{jobs: jobs, await: await, until: until, max: c.maxBatch - n, reply: make(chan []*groupcommit.Op, 1)}
	select {
	case c.join <- req:
		return <-req.reply
	case <-c.stop:
		return nil
	}
}
