// Package groupcommit queues a store's updates so that one writer can run many of them in
// one database transaction and answer each only after that transaction committed: the
// queueing half of group commit, shared by the stores. Running a batch is the store's.
package groupcommit

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/twophase/coordinator/coordinator"
)

// ErrClosed is the cause of the unavailability a closed queue answers with.
var ErrClosed = errors.New("store closed")

// Op is one queued update: fn to run on Job's state within a batch.
//
// Its life: queued (Submit put it in the queue), claimed (a writer took it for a batch),
// started (its Fn is running, or ran, in a transaction not yet ended), finished. Until it
// has started, its caller may give up on it (Submit's context ends): then it is abandoned,
// and never runs. Once started, the caller's giving up is answered "may have been
// applied"; if the transaction then fails, the store puts it back to claimed (Unstart), and
// it starts again only if its caller still waits.
type Op struct {
	Ctx context.Context
	Job string
	// Checkpoint is the checkpoint Fn is about, 0 if none in particular (Store.Update).
	Checkpoint int64
	Fn         func(coordinator.JobTx) error
	err        error
	done       chan struct{}
	state      atomic.Int32
}

const (
	queued int32 = iota
	claimed
	started
	abandoned // given up on, by its caller or by the store (Drop)
	finished
)

// Finish answers the update, after the batch committed (or failed for good). It does
// nothing if the update was answered already, or its caller gave up on it before it
// started.
func (o *Op) Finish(err error) {
	for {
		st := o.state.Load()
		if st == abandoned || st == finished {
			return
		}
		if o.state.CompareAndSwap(st, finished) {
			o.answer(err)
			return
		}
	}
}

func (o *Op) answer(err error) {
	o.err = err
	close(o.done)
}

// Start marks a claimed update as running, right before the store runs its Fn. It returns
// false if the caller has given up on it, or its context has ended (it is answered here):
// then Fn must not run, and the store drops the update.
func (o *Op) Start() bool {
	if o.Ctx.Err() != nil {
		o.Drop()
		return false
	}
	return o.state.CompareAndSwap(claimed, started)
}

// Unstart puts an update back to claimed after the transaction it ran in failed (nothing of
// it was applied), so that its caller may give up on it again before it runs once more.
func (o *Op) Unstart() {
	o.state.CompareAndSwap(started, claimed)
}

// Abandoned reports whether the caller gave up on the update before it started: the store
// drops it without answering.
func (o *Op) Abandoned() bool { return o.state.Load() == abandoned }

// Drop gives up on a claimed update whose context has ended, answering it with its
// context's error unless its caller has already given up on it.
func (o *Op) Drop() {
	if o.state.CompareAndSwap(claimed, abandoned) {
		o.answer(notApplied(o.Ctx.Err()))
	}
}

// notApplied is the answer to an update whose caller's context ended before it started.
func notApplied(cause error) error {
	return &coordinator.Error{Code: coordinator.CodeUnavailable, Err: cause,
		Message: "the request timed out before it was applied, and nothing of it was: retry it"}
}

// mayHaveApplied is the answer to an update whose caller's context ended while the
// transaction holding it was committing.
func mayHaveApplied(cause error) error {
	return &coordinator.Error{Code: coordinator.CodeUnavailable, Err: cause,
		Message: "the request timed out while its transaction was committing: it may have been applied; " +
			"retry it (a prepare with the same Idempotency-Key), or read the state"}
}

// Queue holds updates for one writer.
type Queue struct {
	ops    chan *Op
	stop   <-chan struct{}
	exited chan struct{} // closed when Next has answered false: nobody takes updates any more
}

// NewQueue returns a queue that refuses updates once stop is closed.
func NewQueue(stop <-chan struct{}) *Queue {
	return &Queue{ops: make(chan *Op, 1024), stop: stop, exited: make(chan struct{})}
}

// Submit queues an update and waits for its answer. If ctx ends first it returns at once:
// before the update started, it is never run, and the error says it was not applied;
// after, the error says it may have been (its transaction is committing). Either error is
// a coordinator.Error with CodeUnavailable that wraps ctx's error.
func (q *Queue) Submit(ctx context.Context, job string, checkpoint int64, fn func(coordinator.JobTx) error) error {
	o := &Op{Ctx: ctx, Job: job, Checkpoint: checkpoint, Fn: fn, done: make(chan struct{})}
	select {
	case <-q.stop:
		return coordinator.Unavailable(ErrClosed)
	default:
	}
	select {
	case q.ops <- o:
	case <-ctx.Done():
		return notApplied(ctx.Err())
	case <-q.stop:
		return coordinator.Unavailable(ErrClosed)
	}
	select {
	case <-o.done:
		return o.err
	case <-ctx.Done():
		if o.state.CompareAndSwap(queued, abandoned) || o.state.CompareAndSwap(claimed, abandoned) {
			return notApplied(ctx.Err()) // no batch will run it
		}
		select {
		case <-o.done: // answered meanwhile (or dropped by the store, not applied)
			return o.err
		default:
		}
		return mayHaveApplied(ctx.Err())
	case <-q.exited:
		// Queued after the writer's last look: it will never run.
		select {
		case <-o.done:
			return o.err
		default:
			return coordinator.Unavailable(ErrClosed)
		}
	}
}

// Next waits for the next batch: the first queued update and whatever else is queued
// already, up to max, claimed, less those whose context ended (answered as not applied). It
// returns false once the queue is stopped, after answering what was left in it.
func (q *Queue) Next(max int) ([]*Op, bool) {
	for {
		var first *Op
		select {
		case <-q.stop:
		default:
			select {
			case first = <-q.ops:
			case <-q.stop:
			}
		}
		if first == nil {
			q.Drain()
			return nil, false
		}
		batch := []*Op{first}
	fill:
		for len(batch) < max {
			select {
			case o := <-q.ops:
				batch = append(batch, o)
			default:
				break fill
			}
		}
		live := batch[:0]
		for _, o := range batch {
			if q.Claim(o) {
				live = append(live, o)
			}
		}
		if len(live) > 0 {
			return live, true
		}
	}
}

// Arrivals is the channel of queued updates, for a dispatcher that waits on more than the
// queue (Next is for a writer that waits on the queue alone). An update received from it
// must be claimed (Claim) before it runs.
func (q *Queue) Arrivals() <-chan *Op { return q.ops }

// Claim takes an update received from Arrivals for a batch. It returns false, and the
// update must be dropped, if its caller abandoned it (and was answered) or its context
// has ended (and it is answered here with that error).
func (q *Queue) Claim(o *Op) bool {
	if !o.state.CompareAndSwap(queued, claimed) {
		return false
	}
	if o.Ctx.Err() != nil {
		o.Drop()
		return false
	}
	return true
}

// Drain, once stop is closed, answers every update still queued as unavailable and marks
// the queue exited: what is submitted after is answered unavailable too. A dispatcher
// calls it once, when it stops taking updates.
func (q *Queue) Drain() {
	for {
		select {
		case o := <-q.ops:
			o.Finish(coordinator.Unavailable(ErrClosed))
		default:
			close(q.exited)
			return
		}
	}
}
